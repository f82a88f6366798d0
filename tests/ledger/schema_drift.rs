//! What is generated from a migrated database must match it: `src/schema.rs` (diesel's
//! `print-schema` layout, compared ignoring whitespace) and the live SQL in `src/ledger/live/`
//! (each function as it runs, and the catalog). `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace
//! --test ledger schema_drift` rewrites them after a migration changes.

use crate::common;

use std::collections::BTreeMap;

use briefrail::testing::TestDb;
use diesel::sql_types::{Bool, Integer, Text};
use diesel_async::RunQueryDsl;

#[derive(diesel::QueryableByName)]
struct Col {
    #[diesel(sql_type = Text)]
    schema: String,
    #[diesel(sql_type = Text)]
    table: String,
    #[diesel(sql_type = Text)]
    column: String,
    #[diesel(sql_type = Text)]
    udt: String,
    #[diesel(sql_type = Bool)]
    nullable: bool,
    #[diesel(sql_type = Integer)]
    pk_pos: i32,
}

fn diesel_type(udt: &str) -> String {
    match udt {
        "uuid" => "Uuid".into(),
        "text" => "Text".into(),
        "timestamptz" => "Timestamptz".into(),
        "int8" => "Int8".into(),
        "int4" => "Int4".into(),
        "bool" => "Bool".into(),
        "jsonb" => "Jsonb".into(),
        "date" => "Date".into(),
        "float8" => "Float8".into(),
        "bytea" => "Bytea".into(),
        a if a.starts_with('_') => format!("Array<Nullable<{}>>", diesel_type(&a[1..])),
        other => panic!("no diesel type for {other}: extend the drift test"),
    }
}

fn render(cols: &[Col]) -> String {
    let mut schemas: BTreeMap<&str, BTreeMap<&str, Vec<&Col>>> = BTreeMap::new();
    for c in cols {
        schemas
            .entry(&c.schema)
            .or_default()
            .entry(&c.table)
            .or_default()
            .push(c);
    }
    let mut out = String::from(
        "// @generated from the migrated database by tests/ledger/schema_drift.rs (BRIEFRAIL_BLESS_SCHEMA=1).\n\
         // Do not edit by hand: that test fails when this file drifts from migrations/.\n",
    );
    for (schema, tables) in &schemas {
        out.push_str(&format!("\npub mod {schema} {{\n"));
        for (table, cols) in tables {
            let mut pk: Vec<&&Col> = cols.iter().filter(|c| c.pk_pos > 0).collect();
            pk.sort_by_key(|c| c.pk_pos);
            let pk: Vec<&str> = pk.iter().map(|c| c.column.as_str()).collect();
            out.push_str(&format!(
                "    diesel::table! {{\n        {schema}.{table} ({}) {{\n",
                pk.join(", ")
            ));
            for c in cols {
                let ty = diesel_type(&c.udt);
                let ty = if c.nullable {
                    format!("Nullable<{ty}>")
                } else {
                    ty
                };
                out.push_str(&format!("            {} -> {ty},\n", c.column));
            }
            out.push_str("        }\n    }\n\n");
        }
        let names: Vec<&str> = tables.keys().copied().collect();
        out.push_str(&format!(
            "    diesel::allow_tables_to_appear_in_same_query!({},);\n}}\n",
            names.join(", ")
        ));
    }
    out
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

#[tokio::test]
async fn schema_rs_matches_the_migrations() {
    let db = TestDb::new(1).await.expect("test db");
    let mut conn = db.pool.get().await.unwrap();
    let cols: Vec<Col> = diesel::sql_query(
        "SELECT c.table_schema::text AS schema, c.table_name::text AS table, c.column_name::text AS column,
                c.udt_name::text AS udt, (c.is_nullable = 'YES') AS nullable,
                coalesce((SELECT k.ord::int
                            FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
                            CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                            JOIN pg_namespace n ON n.oid = t.relnamespace
                            JOIN pg_attribute a ON a.attrelid = t.oid AND a.attname = c.column_name
                           WHERE i.indisprimary AND k.attnum = a.attnum AND n.nspname = c.table_schema AND t.relname = c.table_name), 0)
                  AS pk_pos
           FROM information_schema.columns c
          WHERE c.table_schema IN ('ops', 'record')
          ORDER BY c.table_schema, c.table_name, c.ordinal_position",
    )
    .load(&mut conn)
    .await
    .expect("introspect");
    let expected = render(&cols);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/schema.rs");
    if std::env::var_os("BRIEFRAIL_BLESS_SCHEMA").is_some() {
        std::fs::write(path, &expected).expect("write schema.rs");
        return;
    }
    let actual = std::fs::read_to_string(path).expect("read schema.rs");
    assert_eq!(
        squash(&actual),
        squash(&expected),
        "src/schema.rs drifted from migrations/. Regenerate: BRIEFRAIL_BLESS_SCHEMA=1 cargo test --test ledger schema_drift\n\
         expected:\n{expected}"
    );
}

/// Where `text` reads the database clock directly: `now()` or `clock_timestamp()` not spelled
/// `ops.now()` / `ops.clock()` (a Rust `Instant::now()` or `Utc::now()` is not SQL).
fn raw_clock_reads(text: &str) -> Vec<usize> {
    let mut at = Vec::new();
    for needle in ["now()", "clock_timestamp()"] {
        for (i, _) in text.match_indices(needle) {
            let before = text[..i].chars().next_back();
            let qualified = text[..i].ends_with("ops.");
            let rust_path = text[..i].ends_with("::");
            let in_word = before.is_some_and(|c| c.is_alphanumeric() || c == '_');
            if !qualified && !rust_path && !in_word {
                at.push(i);
            }
        }
    }
    at
}

#[derive(diesel::QueryableByName)]
struct Function {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    body: String,
    #[diesel(sql_type = Text)]
    def: String,
}

/// Where the live SQL of the ledger is written out, one file per function plus the catalog.
const LIVE_DIR: &str = "src/ledger/live";
const REGENERATE: &str =
    "BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift";

/// The catalog of schemas `ops` and `record` as `pg_dump --schema-only` prints it, without the
/// functions (each has its own file) and without the lines naming pg_dump's version.
fn catalog(url: &str) -> String {
    dump(url, false)
}

/// [`catalog`], or with `functions` the whole of it: the functions' text and settings too.
fn dump(url: &str, functions: bool) -> String {
    let bindir = std::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        .expect("pg_config (package postgresql) is needed to find pg_dump");
    let pg_dump =
        std::path::Path::new(String::from_utf8_lossy(&bindir.stdout).trim()).join("pg_dump");
    let out = std::process::Command::new(&pg_dump)
        .args([
            "--schema-only",
            "--no-owner",
            "--no-privileges",
            "-n",
            "ops",
            "-n",
            "record",
        ])
        .arg(format!("--dbname={url}"))
        .output()
        .unwrap_or_else(|e| panic!("{} is needed for the catalog: {e}", pg_dump.display()));
    assert!(
        out.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump = String::from_utf8(out.stdout).expect("pg_dump prints UTF-8");
    let mut text = format!(
        "-- The ledger's catalog (schemas ops and record), generated from a migrated database by\n\
         -- `{REGENERATE}`.\n\
         -- Do not edit: change the schema with a migration. Each function is in its own file here.\n"
    );
    // Each object's block starts with a "--\n-- Name: …; Type: …" comment.
    // pg_dump's `\restrict` lines carry a random key each run.
    let dump: String = dump
        .lines()
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dump = dump
        .split("\n--\n-- PostgreSQL database dump complete")
        .next()
        .unwrap_or("");
    for block in dump.split("\n--\n-- Name: ").skip(1) {
        if !functions && block.contains("; Type: FUNCTION;") {
            continue;
        }
        text.push_str("\n--\n-- Name: ");
        text.push_str(block.trim_end());
        text.push('\n');
    }
    text
}

/// `dump` without its `-- rule: <name>` marker comments, and nothing else changed: a marker
/// after code goes with the blanks before it, a line holding only a marker goes whole.
fn without_rule_markers(dump: &str) -> String {
    dump.lines()
        .filter_map(|l| match l.find("-- rule: ") {
            Some(pos) if l[..pos].trim().is_empty() => None,
            Some(pos) => Some(l[..pos].trim_end()),
            None => Some(l),
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The first line where `found` and `expected` differ, for a failure message a reader can act on.
fn first_difference(found: &str, expected: &str) -> String {
    let (f, e): (Vec<&str>, Vec<&str>) = (found.lines().collect(), expected.lines().collect());
    let at = f
        .iter()
        .zip(&e)
        .position(|(a, b)| a != b)
        .unwrap_or(f.len().min(e.len()));
    format!(
        "line {}: the file has {:?}, a migrated database {:?}",
        at + 1,
        f.get(at).unwrap_or(&"(end)"),
        e.get(at).unwrap_or(&"(end)")
    )
}

/// The files of the live SQL directory by name (after writing `expected` there when
/// `BRIEFRAIL_BLESS_SCHEMA` is set).
fn live_files(expected: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(LIVE_DIR);
    if std::env::var_os("BRIEFRAIL_BLESS_SCHEMA").is_some() {
        std::fs::create_dir_all(&dir).expect("create the live directory");
        for e in std::fs::read_dir(&dir)
            .expect("read the live directory")
            .flatten()
        {
            if e.path().extension().is_some_and(|x| x == "sql") {
                std::fs::remove_file(e.path()).expect("remove a stale file");
            }
        }
        for (name, text) in expected {
            std::fs::write(dir.join(name), text).expect("write a live file");
        }
    }
    let mut found = BTreeMap::new();
    for e in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{LIVE_DIR}: {e}; generate it: {REGENERATE}"))
        .flatten()
    {
        if e.path().extension().is_some_and(|x| x == "sql") {
            let name = e.file_name().to_string_lossy().into_owned();
            found.insert(
                name,
                std::fs::read_to_string(e.path()).expect("read a live file"),
            );
        }
    }
    found
}

/// The live SQL of the ledger, readable in one place: `src/ledger/live/<function>.sql` holds
/// each function exactly as a migrated database runs it, and `catalog.sql` the tables, indexes,
/// constraints and triggers. Both are generated from a migrated database and this test fails
/// when they are stale, so the text a reader (and a planted mutation) sees is the text that
/// runs. And every live statement reads time only through the ledger clock.
#[tokio::test]
async fn the_live_sql_is_what_a_migrated_database_runs() {
    let db = TestDb::new(1).await.expect("test db");
    let mut conn = db.pool.get().await.unwrap();
    let live: Vec<Function> = diesel::sql_query(
        "SELECT p.proname::text AS name, p.prosrc AS body, pg_get_functiondef(p.oid) AS def
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname IN ('ops', 'record') ORDER BY 1",
    )
    .load(&mut conn)
    .await
    .expect("introspect");
    let mut expected: BTreeMap<String, String> = live
        .iter()
        .map(|f| {
            (
                format!("{}.sql", f.name),
                format!(
                    "-- ops.{}: generated from a migrated database by\n\
                     -- `{REGENERATE}`.\n\
                     -- Do not edit: change it with a migration that redefines it.\n{};\n",
                    f.name,
                    f.def.trim_end()
                ),
            )
        })
        .collect();
    expected.insert("catalog.sql".into(), catalog(&db.url));
    let found = live_files(&expected);
    assert_eq!(
        found.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "{LIVE_DIR} names other functions than a migrated database has. Regenerate: {REGENERATE}"
    );
    for (name, text) in &expected {
        assert!(
            &found[name] == text,
            "{LIVE_DIR}/{name} is stale ({}): a migration changed what runs. Regenerate: {REGENERATE}",
            first_difference(&found[name], text)
        );
    }
    let live: BTreeMap<&str, &str> = live
        .iter()
        .map(|f| (f.name.as_str(), f.body.as_str()))
        .collect();

    // The ledger clock: only ops.now() and ops.clock() read the database clock.
    for (name, body) in &live {
        if *name != "now" && *name != "clock" {
            assert!(
                raw_clock_reads(body).is_empty(),
                "ops.{name} reads now() or clock_timestamp() instead of ops.now() / ops.clock():\n{body}"
            );
        }
    }
    #[derive(diesel::QueryableByName)]
    struct Default {
        #[diesel(sql_type = Text)]
        column: String,
        #[diesel(sql_type = Text)]
        default: String,
    }
    let defaults: Vec<Default> = diesel::sql_query(
        "SELECT table_name || '.' || column_name AS column, column_default AS default
           FROM information_schema.columns
          WHERE table_schema = 'ops' AND column_default IS NOT NULL",
    )
    .load(&mut conn)
    .await
    .expect("introspect");
    for d in &defaults {
        assert!(
            raw_clock_reads(&d.default).is_empty(),
            "ops.{} defaults to {}: a time of the ledger is ops.now()",
            d.column,
            d.default
        );
    }
}

/// The Rust side of the ledger clock: SQL in `src/` reads time through `ops.now()` (or
/// `ledger::clock::ledger_now`), never `now()`, `clock_timestamp()` or `diesel::dsl::now`, so
/// every statement agrees with the ledger under an advanced clock. The one exception is the
/// record's own `archived_at` (`src/ledger/facts.rs`), which no statement compares with a time.
#[test]
fn rust_sql_reads_the_ledger_clock() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stack = vec![root.clone()];
    let mut offenders = Vec::new();
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read src").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.trim_start();
                if code.starts_with("//") || rel == "ledger/clock.rs" {
                    continue; // prose about the clock, not a statement
                }
                let dsl_now = line.contains("dsl::now") && rel != "ledger/facts.rs";
                if dsl_now || !raw_clock_reads(line).is_empty() {
                    offenders.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "SQL that reads the database clock instead of the ledger clock (ops.now()):\n  {}",
        offenders.join("\n  ")
    );
}

/// Every planted bug of `common::mutations` still finds the text it patches in the live SQL and
/// applies to a migrated database (each is then shown to be caught by its killers, in the
/// binaries that name them).
#[tokio::test]
async fn every_planted_bug_applies_to_the_live_sql() {
    use diesel_async::SimpleAsyncConnection;
    let db = TestDb::new(1).await.expect("test db");
    let mut c = db.connection().await.expect("connection");
    for m in common::mutations::all() {
        let sql = m.sql();
        c.batch_execute(&format!("BEGIN; {sql}; ROLLBACK;"))
            .await
            .unwrap_or_else(|e| panic!("mutation {} does not apply: {e}", m.name));
    }
}

/// A planted bug lands whole or not at all: a marker that is missing, an edit that does not
/// match in the text its marker marks, or a marked place left unchanged panics naming the
/// function and the marker, instead of planting nothing.
#[test]
fn a_mutation_that_misses_its_marked_rule_fails_naming_it() {
    use common::mutations::plant;
    let def = "BEGIN\n    IF a > b THEN  -- rule: cap\n        RETURN 1;\n    END IF;\n    \
               -- rule: sum\n    RETURN x\n       + y;\n    RETURN x + z;  -- rule: cap\nEND";
    // Whitespace aside; a marker alone on its line marks the statement below it.
    assert_eq!(
        plant(def, "f", "sum", &[("x + y", "x - y")]),
        def.replace("x\n       + y", "x - y")
    );
    assert_eq!(
        plant(def, "f", "cap", &[("a > b", "false"), ("x + z", "0")]),
        def.replace("a > b", "false").replace("x + z", "0")
    );
    let misses: [(&str, &[(&str, &str)]); 4] = [
        ("gone", &[("a > b", "false")]),
        ("cap", &[("a < b", "false")]),
        ("cap", &[("a > b", "false")]),
        ("sum", &[("x + z", "0")]),
    ];
    for (rule, edits) in misses {
        let panic = std::panic::catch_unwind(|| plant(def, "f", rule, edits))
            .expect_err("a mutation that misses its rule planted something");
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            message.contains("ops.f") && message.contains(&format!("-- rule: {rule}")),
            "the refusal does not name the function and the marker: {message}"
        );
    }
}

/// Every planted bug of `common::mutations` is planted at a marked rule, not at a layout: the
/// same bug lands in its function reformatted (whitespace only, the way a formatter might).
#[test]
fn every_planted_bug_survives_reformatting_its_function() {
    common::mutations::assert_every_plant_survives_reformatting();
}

/// Every migration runs up, then every one down (newest first), then up again, on an empty
/// database, and the catalog it ends with is the one a database migrated once has: no `down.sql`
/// that fails or leaves something behind, and none that a second `up` trips over.
#[tokio::test]
async fn every_migration_runs_up_down_and_up_again() {
    use briefrail::db::admin;
    use diesel::Connection;
    use diesel_async::AsyncPgConnection;
    use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
    use diesel_migrations::MigrationHarness;

    let server = briefrail::testing::server_url();
    let name = format!(
        "br_updown_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let url = admin::with_database(&server, &name).expect("url");
    admin::create_database_if_missing(&url)
        .await
        .expect("create an empty database");
    let cycled = {
        let url = url.clone();
        std::thread::spawn(move || -> Result<(usize, usize, usize), String> {
            let mut c = AsyncConnectionWrapper::<AsyncPgConnection>::establish(&url)
                .map_err(|e| e.to_string())?;
            use briefrail::db::migrate::MIGRATIONS as m;
            let up = c
                .run_pending_migrations(m)
                .map_err(|e| format!("up: {e}"))?
                .len();
            let down = c
                .revert_all_migrations(m)
                .map_err(|e| format!("down: {e}"))?
                .len();
            let again = c
                .run_pending_migrations(m)
                .map_err(|e| format!("up again: {e}"))?
                .len();
            Ok((up, down, again))
        })
        .join()
        .expect("the migration thread")
    };
    let outcome = match cycled {
        Ok((up, down, again)) => {
            assert!(
                up > 0 && up == down && down == again,
                "{up} up, {down} down, {again} up again"
            );
            let once = TestDb::new(1).await.expect("test db");
            let (after_cycle, migrated_once) = (catalog(&url), catalog(&once.url));
            (after_cycle == migrated_once)
                .then_some(())
                .ok_or_else(|| first_difference(&after_cycle, &migrated_once))
        }
        Err(e) => Err(e),
    };
    admin::drop_database(&server, &name).await.expect("drop");
    outcome.unwrap_or_else(|e| panic!("migrations up, down, up: {e}"));
}

/// The commit whose migrations release 0.1.0 squashed into its baseline.
const PRE_RELEASE_COMMIT: &str = "e9729f9cd59c303d80d59f6b1354509661af9bc0";

/// The pre-release migrations, from git history, into `dir`; panics naming what is missing.
fn pre_release_migrations(dir: &std::path::Path) -> std::path::PathBuf {
    let repo = env!("CARGO_MANIFEST_DIR");
    let archive = std::process::Command::new("git")
        .args(["-C", repo, "archive", PRE_RELEASE_COMMIT, "migrations"])
        .output()
        .unwrap_or_else(|e| panic!("this test needs git, to read the pre-release migrations: {e}"));
    assert!(
        archive.status.success(),
        "the repository at {repo} lacks commit {PRE_RELEASE_COMMIT}, which holds the pre-release \
         migrations (a shallow clone? `git fetch --unshallow`): {}",
        String::from_utf8_lossy(&archive.stderr)
    );
    std::fs::create_dir_all(dir).expect("scratch dir");
    let mut tar = std::process::Command::new("tar")
        .args(["-x", "-C"])
        .arg(dir)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("this test needs tar, to unpack the pre-release migrations");
    use std::io::Write;
    tar.stdin
        .take()
        .expect("tar's stdin")
        .write_all(&archive.stdout)
        .expect("unpack");
    assert!(tar.wait().expect("tar").success(), "tar failed");
    dir.join("migrations")
}

/// The pre-release migrations of `files`, run by diesel's harness on the database at `url` (on
/// a thread of its own: the harness blocks); the versions applied.
fn run_pre_release_migrations(
    url: String,
    files: std::path::PathBuf,
) -> Result<Vec<String>, String> {
    use diesel_async::AsyncPgConnection;
    use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
    use diesel_migrations::{FileBasedMigrations, MigrationHarness};
    std::thread::spawn(move || -> Result<Vec<String>, String> {
        let mut c =
            <AsyncConnectionWrapper<AsyncPgConnection> as diesel::Connection>::establish(&url)
                .map_err(|e| e.to_string())?;
        let source = FileBasedMigrations::from_path(&files).map_err(|e| e.to_string())?;
        let done = c
            .run_pending_migrations(source)
            .map_err(|e| format!("the pre-release migrations: {e}"))?;
        Ok(done.iter().map(|v| v.to_string()).collect())
    })
    .join()
    .expect("the migration thread")
}

/// The baseline migration alone, by diesel's harness, on the database at `url` (on a thread
/// of its own: the harness blocks).
fn run_baseline_only(url: String) -> Result<(), String> {
    use briefrail::db::baseline::BASELINE;
    use briefrail::db::migrate::MIGRATIONS;
    use diesel::migration::MigrationSource;
    use diesel_async::AsyncPgConnection;
    use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
    use diesel_migrations::MigrationHarness;
    std::thread::spawn(move || -> Result<(), String> {
        let mut c =
            <AsyncConnectionWrapper<AsyncPgConnection> as diesel::Connection>::establish(&url)
                .map_err(|e| e.to_string())?;
        let all = MigrationSource::<diesel::pg::Pg>::migrations(&MIGRATIONS)
            .map_err(|e| e.to_string())?;
        let baseline = all
            .iter()
            .find(|m| m.name().version().to_string() == BASELINE)
            .ok_or_else(|| {
                format!("no embedded migration has the baseline's version {BASELINE}")
            })?;
        // Reading what is applied creates diesel's migrations table, as `migrate` does first.
        c.applied_migrations().map_err(|e| e.to_string())?;
        c.run_migration(&**baseline)
            .map_err(|e| format!("the baseline: {e}"))?;
        Ok(())
    })
    .join()
    .expect("the migration thread")
}

/// The versions embedded in this build after the baseline, in order.
fn after_baseline() -> Vec<String> {
    use briefrail::db::baseline::BASELINE;
    use briefrail::db::migrate::MIGRATIONS;
    use diesel::migration::MigrationSource;
    let mut v: Vec<String> = MigrationSource::<diesel::pg::Pg>::migrations(&MIGRATIONS)
        .expect("the embedded migrations")
        .iter()
        .map(|m| m.name().version().to_string())
        .filter(|v| v.as_str() > BASELINE)
        .collect();
    v.sort();
    v
}

/// The versions the migrations table of the database at `url` records, in order.
async fn versions(url: &str) -> Result<Vec<String>, String> {
    use diesel_async::{AsyncConnection as _, AsyncPgConnection};
    let mut c = AsyncPgConnection::establish(url)
        .await
        .map_err(|e| e.to_string())?;
    #[derive(diesel::QueryableByName)]
    struct V {
        #[diesel(sql_type = Text)]
        version: String,
    }
    diesel::sql_query("SELECT version::text AS version FROM __diesel_schema_migrations ORDER BY 1")
        .load::<V>(&mut c)
        .await
        .map(|v| v.into_iter().map(|v| v.version).collect::<Vec<_>>())
        .map_err(|e| e.to_string())
}

/// Every pre-release version's row back (from the temp table `gone` on `c`): the database at
/// `url` is adopted by the baseline (recorded, not run), the migrations after it run, and its
/// catalog is then `current`, a fresh database's (rule markers aside); a second `migrate` has
/// nothing to do.
async fn adopt_every_pre_release_version(
    c: &mut diesel_async::AsyncPgConnection,
    url: &str,
    current: &str,
) -> Result<(), String> {
    use briefrail::db::baseline::{BASELINE, PRE_RELEASE};
    use briefrail::db::migrate::{self, MigrationState};
    use diesel_async::SimpleAsyncConnection;
    // All of them: adopted, and nothing of the catalog changes.
    c.batch_execute("INSERT INTO __diesel_schema_migrations SELECT * FROM gone")
        .await
        .map_err(|e| e.to_string())?;
    let status = migrate::status(url).await.map_err(|e| e.to_string())?;
    let squashed = status
        .iter()
        .filter(|m| matches!(m.state, MigrationState::PreRelease { .. }))
        .count();
    if squashed != PRE_RELEASE.len() {
        return Err(format!(
            "status shows {squashed} pre-release versions: {status:?}"
        ));
    }
    if migrate::require_current(url).await.is_ok() {
        return Err("a pre-release database passed as current before `migrate`".into());
    }
    let ran = migrate::run_pending(url).await.map_err(|e| e.to_string())?;
    let mut expected = vec![BASELINE.to_owned()];
    expected.extend(after_baseline());
    if ran != expected {
        return Err(format!(
            "adopting answered {ran:?}, not the baseline and then {:?}",
            &expected[1..]
        ));
    }
    let mut recorded: Vec<String> = PRE_RELEASE.iter().map(|v| v.to_string()).collect();
    recorded.extend(expected);
    if versions(url).await? != recorded {
        return Err(
            "after adoption the versions recorded are not the squashed ones, the baseline and \
             the later ones"
                .into(),
        );
    }
    if without_rule_markers(&dump(url, true)) != current {
        return Err(format!(
            "adopted and migrated, the catalog is not a fresh database's: {}",
            first_difference(&without_rule_markers(&dump(url, true)), current)
        ));
    }
    migrate::require_current(url)
        .await
        .map_err(|e| e.to_string())?;
    // And again: nothing to do.
    let again = migrate::run_pending(url).await.map_err(|e| e.to_string())?;
    if !again.is_empty() {
        return Err(format!("a second `migrate` applied {again:?}"));
    }
    Ok(())
}

/// A database the pre-release migrations built (by diesel's harness, from their files in git
/// history, as a pre-release `briefrail migrate` did) has exactly the baseline's catalog, so
/// `briefrail migrate` adopts it: the baseline is recorded without running, beside the squashed
/// versions (so pre-release nodes keep serving), and nothing else changes. A database part-way
/// through them is refused, naming its last version, and left as it was.
///
/// The two catalogs are compared whole, function bodies and settings included, except for the
/// `-- rule: <name>` marker comments (see [`without_rule_markers`]): the baseline marks in its
/// function bodies the rules the planted bugs of `common::mutations` break, and an adopted
/// database keeps the unmarked bodies, which run the same.
#[tokio::test]
async fn the_baseline_adopts_a_database_the_pre_release_migrations_built() {
    use briefrail::db::admin;
    use briefrail::db::baseline::PRE_RELEASE;
    use briefrail::db::migrate;
    use diesel_async::{AsyncConnection as _, AsyncPgConnection, SimpleAsyncConnection};

    let scratch = common::scratch_dir("pre-release-migrations");
    let files = pre_release_migrations(&scratch);
    let server = briefrail::testing::server_url();
    let name = format!(
        "br_adopt_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let url = admin::with_database(&server, &name).expect("url");
    admin::create_database_if_missing(&url)
        .await
        .expect("create an empty database");
    let applied = run_pre_release_migrations(url.clone(), files);
    // What the pre-release migrations are held to: the baseline alone (a later migration
    // changes the catalog further, for adopted and fresh databases alike).
    let baseline_name = format!("{name}_base");
    let baseline_url = admin::with_database(&server, &baseline_name).expect("url");
    admin::create_database_if_missing(&baseline_url)
        .await
        .expect("create an empty database");
    let baseline_built = run_baseline_only(baseline_url.clone());
    let outcome = async {
        baseline_built?;
        let applied = applied?;
        if applied != PRE_RELEASE {
            return Err(format!(
                "briefrail::db::baseline::PRE_RELEASE lists {PRE_RELEASE:?}, the pre-release \
                 commit's migrations are {applied:?}"
            ));
        }
        let built = dump(&url, true);
        let expected = without_rule_markers(&dump(&baseline_url, true));
        if without_rule_markers(&built) != expected {
            return Err(format!(
                "the baseline's catalog is not the pre-release migrations' catalog: {}",
                first_difference(&without_rule_markers(&built), &expected)
            ));
        }

        // Part-way: the newest four versions' rows gone. Refused, naming the last it has.
        let mut c = AsyncPgConnection::establish(&url)
                .await
                .map_err(|e| e.to_string())?;
        let newest: Vec<String> = PRE_RELEASE[20..].iter().map(|v| format!("'{v}'")).collect();
        c.batch_execute(&format!(
            "CREATE TEMP TABLE gone AS SELECT * FROM __diesel_schema_migrations WHERE version IN ({0});
             DELETE FROM __diesel_schema_migrations WHERE version IN ({0})",
            newest.join(", ")
        ))
        .await
        .map_err(|e| e.to_string())?;
        let refused = migrate::run_pending(&url)
            .await
            .err()
            .ok_or("a database part-way through the pre-release migrations was migrated")?
            .to_string();
        for needle in ["pre-release", PRE_RELEASE[19], PRE_RELEASE[23], "fresh database"] {
            if !refused.contains(needle) {
                return Err(format!("the refusal does not name {needle:?}: {refused}"));
            }
        }
        if versions(&url).await? != PRE_RELEASE[..20] {
            return Err("the refusal changed the migrations table".into());
        }

        let current = TestDb::new(1).await.map_err(|e| e.to_string())?;
        let current = without_rule_markers(&dump(&current.url, true));
        adopt_every_pre_release_version(&mut c, &url, &current).await?;
        Ok::<(), String>(())
    }
    .await;
    admin::drop_database(&server, &name).await.expect("drop");
    admin::drop_database(&server, &baseline_name)
        .await
        .expect("drop");
    let _ = std::fs::remove_dir_all(&scratch);
    outcome.unwrap_or_else(|e| panic!("{e}"));
}
