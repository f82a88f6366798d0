//! `src/schema.rs` must describe exactly what the migrations create. This test renders the
//! schema of a freshly migrated database in diesel's `print-schema` layout and compares it with
//! the file (ignoring whitespace). `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --test schema_drift`
//! rewrites the file after a migration changes.

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
        "// @generated from the migrated database by tests/schema_drift.rs (BRIEFRAIL_BLESS_SCHEMA=1).\n\
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
        "src/schema.rs drifted from migrations/. Regenerate: BRIEFRAIL_BLESS_SCHEMA=1 cargo test --test schema_drift\n\
         expected:\n{expected}"
    );
}

/// The one migration that holds every live statement of the ledger in full...
const LIVE_HOME: &str = "migrations/2026-12-01-000005_ledger_clock/up.sql";
/// ...and the later ones, each the live home of the functions it names in its header (it
/// redefines them in full); a function's last definition is the one that runs.
const LATER_HOMES: [&str; 14] = [
    "migrations/2026-12-01-000006_deadlines_from_the_statement_clock/up.sql",
    "migrations/2026-12-01-000007_retention/up.sql",
    "migrations/2026-12-01-000009_ledger_at_speed/up.sql",
    "migrations/2026-12-01-000010_operator_console/up.sql",
    "migrations/2026-12-02-000011_batched_claims_and_commits/up.sql",
    "migrations/2026-12-02-000013_rows_by_their_key/up.sql",
    "migrations/2026-12-02-000014_clock_in_line/up.sql",
    "migrations/2026-12-02-000015_debounce_from_the_record/up.sql",
    "migrations/2026-12-03-000017_batches_in_one_statement/up.sql",
    "migrations/2026-12-03-000018_triggers_in_one_statement/up.sql",
    "migrations/2026-12-03-000020_outbox_statements_by_key/up.sql",
    "migrations/2026-12-04-000021_claims_by_their_rows/up.sql",
    "migrations/2026-12-05-000023_fair_share/up.sql",
    "migrations/2026-12-05-000024_build_limits/up.sql",
];

/// The `(name, body)` of every `CREATE OR REPLACE FUNCTION ops.<name>(` in `sql`, the body being
/// the text between its dollar quotes (what Postgres keeps as `pg_proc.prosrc`).
fn defined_functions(sql: &str) -> Vec<(String, String)> {
    let head = "CREATE OR REPLACE FUNCTION ops.";
    let mut out = Vec::new();
    let mut rest = sql;
    while let Some(at) = rest.find(head) {
        let def = &rest[at + head.len()..];
        let name = &def[..def.find('(').expect("a parameter list")];
        let open = def.find("$$").expect("a dollar-quoted body") + 2;
        let close = open + def[open..].find("$$").expect("the body's closing $$");
        out.push((name.to_owned(), def[open..close].to_owned()));
        rest = &def[close + 2..];
    }
    out
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
}

/// The promise of `migrations/…000005_ledger_clock/up.sql`: every function of schema `ops` in a
/// migrated database is defined there in full, exactly as it runs, and the file says it is the
/// live home. A migration that adds or redefines a function of `ops` elsewhere fails here
/// (define it in full in the live home, or move the promise to the new migration and this test
/// with it). And every live statement reads time only through the ledger clock.
#[tokio::test]
async fn every_function_of_ops_is_defined_in_full_in_the_live_home() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(LIVE_HOME);
    let sql = std::fs::read_to_string(&path).expect("read the live home");
    let header: String = sql
        .lines()
        .take_while(|l| l.starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        header.contains("THIS FILE IS THE LIVE HOME OF THE LEDGER'S SQL")
            && header.contains("every function in schema"),
        "{LIVE_HOME}: its header must say it is the live home of every function of ops:\n{header}"
    );
    assert!(
        !sql.contains("CREATE FUNCTION"),
        "{LIVE_HOME}: every definition is a CREATE OR REPLACE FUNCTION (the mutation controls \
         and this test look for that head)"
    );
    let defined = defined_functions(&sql);
    let mut in_file = BTreeMap::new();
    let mut home: BTreeMap<String, &str> = BTreeMap::new();
    for (name, body) in &defined {
        assert!(
            in_file.insert(name.clone(), body.clone()).is_none(),
            "{LIVE_HOME} defines ops.{name} twice"
        );
        home.insert(name.clone(), LIVE_HOME);
    }
    for later in LATER_HOMES {
        let text =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(later))
                .expect("read a later live home");
        let header: String = text
            .lines()
            .take_while(|l| l.starts_with("--"))
            .collect::<Vec<_>>()
            .join(" ");
        for (name, body) in defined_functions(&text) {
            assert!(
                header.contains(&format!("ops.{name}")) && header.contains("THE LIVE HOME OF"),
                "{later} redefines ops.{name} without naming it in its header as a function it is the live home of"
            );
            in_file.insert(name.clone(), body);
            home.insert(name, later);
        }
    }

    let db = TestDb::new(1).await.expect("test db");
    let mut conn = db.pool.get().await.unwrap();
    let live: Vec<Function> = diesel::sql_query(
        "SELECT p.proname::text AS name, p.prosrc AS body
           FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = 'ops' ORDER BY 1",
    )
    .load(&mut conn)
    .await
    .expect("introspect");
    let live: BTreeMap<&str, &str> = live
        .iter()
        .map(|f| (f.name.as_str(), f.body.as_str()))
        .collect();
    assert_eq!(
        live.keys().copied().collect::<Vec<_>>(),
        in_file.keys().map(String::as_str).collect::<Vec<_>>(),
        "the functions of schema ops in a migrated database and those the live homes define"
    );
    for (name, body) in &live {
        assert_eq!(
            *body,
            in_file[*name].as_str(),
            "ops.{name} runs a body other than the one in {}: a later migration \
             redefined it; define it in full in a live home",
            home[*name]
        );
    }

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
