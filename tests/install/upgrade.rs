//! A rolling upgrade without stopping, with real processes on a real Postgres: the previous
//! release's binary keeps claiming and committing on the schema this release migrates to, while
//! a node of this release runs beside it, and every guarantee holds.
//!
//! The previous release is built from git history ([`PREVIOUS_RELEASE`]): `git archive` of that
//! commit, `cargo build` of its `briefrail` binary, cached under the target directory
//! (`target/previous-release/<sha>/briefrail`, or under `CARGO_TARGET_DIR`). The build shares
//! this test run's build directory (`CARGO_BUILD_BUILD_DIR`), so the dependencies compiled for
//! `cargo test` are reused and only the previous release's own crate compiles (about a minute,
//! once; a build from inside a running test does not wait for the outer `cargo test`, whose lock
//! is only held while it compiles). Its binary goes to
//! a target directory of its own, and its crate is built with a package profile setting of its
//! own: cargo names a path crate's artifacts by its path *relative to the workspace*, so without
//! it the previous release's `briefrail` would overwrite this release's in the shared build
//! directory, and cargo, finding them newer than this tree's sources, would take them as fresh.
//!
//! The scenario: a database migrated by the previous binary's own `briefrail migrate`; a node of
//! the previous release serves alone while facts arrive; this release's migrations are applied
//! under it; a second node of the previous release starts on the migrated schema (a supervisor's
//! restart mid-upgrade); a node of this release starts beside them; the old nodes are stopped
//! with SIGTERM (their claims handed back) and the new node serves the rest. Facts arrive the
//! whole time. Then, from the ledger: every demand served, every frame a fenced landing, the old
//! nodes landed builds after the migration, no statement of theirs went missing, and every
//! uploaded document is in its matter's latest frame.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{NodeProcess, eventually, scratch_dir};
use briefrail::db::{self, Pool, PoolOptions, admin};
use briefrail::ledger::facts;
use briefrail::testing::server_url;
use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Jsonb, Text, Timestamptz, Uuid as SqlUuid};
use diesel_async::RunQueryDsl;
use uuid::Uuid;

/// The release this one upgrades from; move it forward to the tag when a release ships. For
/// 0.1.0 it is the last pre-release build, whose migrations 0.1.0 squashed into its baseline.
const PREVIOUS_RELEASE: &str = "e9729f9cd59c303d80d59f6b1354509661af9bc0";

/// How many matters the facts are spread over.
const MATTERS: usize = 40;

/// A line on the test's stderr as it happens, even while libtest captures the test's output
/// (it captures `eprintln!`, not writes to the stream): what explains a slow first run.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `git -C <repository> args`, or a panic saying that git is needed.
fn git(args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("-C")
        .arg(repository())
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "the upgrade test needs git, to build the previous release ({PREVIOUS_RELEASE}) \
                 from the history of {}: cannot run git ({e}); install git",
                repository().display()
            )
        })
}

/// Panics, saying what is missing and how to get it, unless the repository holds the commit.
fn require_previous_release_commit() {
    let inside = git(&["rev-parse", "--git-dir"]);
    assert!(
        inside.status.success(),
        "the upgrade test builds the previous release from git history, but {} is not a git \
         checkout ({}): run it from a clone of the repository",
        repository().display(),
        String::from_utf8_lossy(&inside.stderr).trim()
    );
    let found = git(&["cat-file", "-e", &format!("{PREVIOUS_RELEASE}^{{commit}}")]);
    assert!(
        found.status.success(),
        "commit {PREVIOUS_RELEASE} (PREVIOUS_RELEASE in tests/install/upgrade.rs, the previous release) \
         is not in the repository at {} (a shallow clone?): run `git fetch --unshallow` (or fetch \
         that commit) and run the test again",
        repository().display()
    );
}

/// The migration directories of the previous release, in order.
fn previous_migrations() -> Vec<String> {
    let out = git(&[
        "ls-tree",
        "-d",
        "--name-only",
        PREVIOUS_RELEASE,
        "migrations/",
    ]);
    assert!(
        out.status.success(),
        "git ls-tree -d {PREVIOUS_RELEASE} migrations/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("migrations/"))
        .filter(|n| !n.starts_with('.'))
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

/// The migration directories of this tree (what this release's binary embeds), in order.
fn current_migrations() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repository().join("migrations"))
        .expect("migrations/")
        .map(|e| e.expect("migrations/ entry").path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// diesel's version of a migration directory: its date and number without dashes.
fn version(migration: &str) -> String {
    migration.split('_').next().unwrap().replace('-', "")
}

/// The previous release's `briefrail` binary: built once per commit, then reused from
/// `<build dir>/previous-release/<sha>/briefrail` (the build directory is the target directory,
/// `target/` or `CARGO_TARGET_DIR`, unless `build.build-dir` is set).
fn previous_release_binary() -> PathBuf {
    let (build_dir, profile) = common::system::build_dir();
    let home = build_dir.join("previous-release").join(PREVIOUS_RELEASE);
    let cached = home.join("briefrail");
    if cached.exists() {
        say!(
            "upgrade: the previous release ({}) is built: {}",
            &PREVIOUS_RELEASE[..7],
            cached.display()
        );
        return cached;
    }
    let source = home.join("source");
    let _ = std::fs::remove_dir_all(&source);
    std::fs::create_dir_all(&source).expect("the previous release's source directory");
    say!(
        "upgrade: extracting the previous release ({PREVIOUS_RELEASE}) into {}",
        source.display()
    );
    let mut archive = Command::new("git")
        .arg("-C")
        .arg(repository())
        .args(["archive", "--format=tar", PREVIOUS_RELEASE])
        .stdout(Stdio::piped())
        .spawn()
        .expect("git archive");
    // `-m`: the files are dated now, not at the commit. The previous release's crate has the
    // same artifact names whichever commit PREVIOUS_RELEASE names, so sources dated before the
    // last build of another commit would look fresh to cargo and get that commit's binary.
    let untar = Command::new("tar")
        .args(["-x", "-m", "-C"])
        .arg(&source)
        .stdin(archive.stdout.take().unwrap())
        .status()
        .expect("the upgrade test needs tar to extract the previous release");
    let archived = archive.wait().expect("git archive");
    assert!(
        archived.success() && untar.success(),
        "git archive {PREVIOUS_RELEASE} | tar -x -m -C {} failed ({archived}, {untar})",
        source.display()
    );

    let mut build = common::system::cargo();
    // `--examples`: building an example needs the dev-dependencies, so features resolve exactly
    // as under `cargo test` and the dependencies' artifacts in the shared build directory are
    // reused (a plain `--bin` build would recompile tokio and everything above it).
    build
        .current_dir(&source)
        .args(["build", "--locked", "--bin", "briefrail", "--examples"]);
    let profile_name = match &*profile {
        "debug" => "dev",
        "release" => {
            build.arg("--release");
            "release"
        }
        other => {
            build.args(["--profile", other]);
            other
        }
    };
    // Artifacts of their own for the previous release's crate (lib, bin, example): a profile
    // setting is part of their names, and this one changes nothing that matters. Without it they
    // would be named exactly like this release's (the same package at the same place in its
    // workspace) and replace them.
    build.args([
        "--config",
        &format!("profile.{profile_name}.package.briefrail.codegen-units=255"),
    ]);
    // The binary to a target directory of its own (it must not replace this release's
    // `briefrail`); every intermediate artifact in this run's build directory, shared. Cargo
    // takes its build lock only while compiling, so a build from inside a running test does
    // not wait for the outer `cargo test` (tried: it does not deadlock).
    build
        .env("CARGO_TARGET_DIR", home.join("target"))
        .env("CARGO_BUILD_BUILD_DIR", &build_dir);
    say!(
        "upgrade: building the previous release's briefrail in {} ({} {}) with build directory \
         {} (shared with this run: only the previous release's crate compiles, a minute or two \
         on a first run; later runs reuse {})",
        source.display(),
        Path::new(build.get_program()).display(),
        build
            .get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        build_dir.display(),
        cached.display()
    );
    let started = Instant::now();
    let status = build
        .stdin(Stdio::null())
        .status()
        .expect("run cargo to build the previous release");
    assert!(
        status.success(),
        "building the previous release ({PREVIOUS_RELEASE}) in {} failed: {status} (cargo's \
         output is above)",
        source.display()
    );
    say!(
        "upgrade: the previous release built in {:.0?}",
        started.elapsed()
    );
    let built = home.join("target").join(&profile).join("briefrail");
    let partial = home.join("briefrail.partial");
    std::fs::copy(&built, &partial).expect("copy the previous release's binary");
    std::fs::rename(&partial, &cached).expect("cache the previous release's binary");
    cached
}

/// `binary migrate --status` on `url`: its output, after checking it exits 0.
fn migrate_status(binary: &Path, url: &str) -> String {
    let out = Command::new(binary)
        .args(["migrate", "--status"])
        .env("BRIEFRAIL__DATABASE__URL", url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run briefrail migrate --status");
    assert!(
        out.status.success(),
        "migrate --status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A database of the test's own (not from the migrated template: it starts at the previous
/// release's schema), dropped on drop, also when the test panics.
struct OwnDatabase {
    name: String,
    url: String,
}

impl OwnDatabase {
    fn new() -> Self {
        let name = format!("br_up_{}", &Uuid::new_v4().simple().to_string()[..16]);
        let url = admin::with_database(&server_url(), &name).unwrap();
        Self { name, url }
    }
}

impl Drop for OwnDatabase {
    fn drop(&mut self) {
        briefrail::testing::drop_database_now(&self.name);
    }
}

/// The builder of every node: it echoes the build context it received on stdin (the matter and
/// the documents the build read) into the frame, with its node and token.
fn echo_builder(dir: &Path) -> PathBuf {
    let path = dir.join("echo-builder.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\nctx=$(cat)\nsleep \"${BUILD_SECONDS:-0}\"\n\
         printf '{\"built_by\":\"%s\",\"token\":%s,\"context\":%s}' \"$NODE\" \"$BRIEFRAIL_TOKEN\" \"$ctx\"\n",
    )
    .expect("write the builder script");
    path
}

/// `briefrail run` of `binary` as node `id`, with the command builder and the postgres
/// transport. Only settings every release since the previous one understands.
fn spawn_node(binary: &Path, url: &str, dir: &Path, id: &str) -> NodeProcess {
    let script = echo_builder(dir);
    let log = dir.join(format!("{id}.log"));
    let out = std::fs::File::create(&log).expect("log file");
    let err = out.try_clone().expect("log file");
    let child = Command::new(binary)
        .arg("run")
        .env("BRIEFRAIL__DATABASE__URL", url)
        .env("BRIEFRAIL__DATABASE__POOL_SIZE", "4")
        .env("BRIEFRAIL__NODE__ID", id)
        .env("NODE", id)
        .env("BUILD_SECONDS", "0.2")
        .env("BRIEFRAIL__TRANSPORT__KIND", "postgres")
        .env("BRIEFRAIL__BUILDER__KIND", "command")
        .env(
            "BRIEFRAIL__BUILDER__COMMAND",
            format!("/bin/sh {}", script.display()),
        )
        .env("BRIEFRAIL__BUILDERS__CONCURRENCY", "2")
        .env("BRIEFRAIL__TRIGGER__DEBOUNCE_MS", "20")
        .env("BRIEFRAIL__TRIGGER__MAX_WAIT_MS", "100")
        .env("BRIEFRAIL__RELAY__POLL_MS", "200")
        .env("BRIEFRAIL__SWEEPER__INTERVAL_SECONDS", "0.25")
        .env("BRIEFRAIL__LEASE__SECONDS", "10")
        .env("BRIEFRAIL__SHUTDOWN__GRACE_SECONDS", "2")
        .env("BRIEFRAIL__HTTP__BIND", "127.0.0.1:0")
        .env("BRIEFRAIL__LOG__LEVEL", "info,briefrail=debug")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {} run: {e}", binary.display()));
    NodeProcess {
        id: id.to_owned(),
        child,
        log,
    }
}

/// The nodes of the test; on a panic, the tail of every node's log is printed.
#[derive(Default)]
struct Fleet {
    nodes: Vec<NodeProcess>,
}

impl Fleet {
    fn get(&mut self, id: &str) -> &mut NodeProcess {
        self.nodes.iter_mut().find(|n| n.id == id).expect("a node")
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for n in &self.nodes {
                eprintln!("---- the log of {} (last 60 lines) ----", n.id);
                let text = n.log_text();
                let lines: Vec<&str> = text.lines().collect();
                for l in &lines[lines.len().saturating_sub(60)..] {
                    eprintln!("{l}");
                }
            }
        }
    }
}

/// Lines of a node's log that name a statement, column or relation its schema lacks: what a
/// node of the previous release logs when a migration broke it.
fn missing_schema_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            l.contains("does not exist")
                || (l.contains("ERROR")
                    && ["function", "column", "relation"]
                        .iter()
                        .any(|w| l.contains(w)))
        })
        .collect()
}

/// A log line without its terminal colour codes (`ESC [ ... m`).
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// What the writer recorded: the matters and the documents uploaded to each.
#[derive(Default)]
struct Record {
    matters: Vec<Uuid>,
    documents: BTreeMap<Uuid, BTreeSet<Uuid>>,
    facts: usize,
}

/// Sets the writer's stop flag when dropped: a failing test stops its facts before it drops the
/// database under them.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Records facts until `stop`: first the matters, then documents (and now and then a Brief
/// request) for random matters, every 60 ms.
async fn write_facts(pool: Pool, firm: Uuid, record: Arc<Mutex<Record>>, stop: Arc<AtomicBool>) {
    let mut c = pool.get().await.expect("a connection for the facts");
    let mut i: u64 = 0;
    while !AtomicBool::load(&stop, Ordering::SeqCst) {
        i += 1;
        let random = Uuid::new_v4().as_u128();
        let (count, pick) = {
            let r = record.lock().unwrap();
            let pick = (!r.matters.is_empty())
                .then(|| r.matters[(random % r.matters.len() as u128) as usize]);
            (r.matters.len(), pick)
        };
        let recorded = match pick {
            Some(matter) if count >= MATTERS || i.is_multiple_of(2) => {
                if i.is_multiple_of(7) {
                    facts::request_brief(&mut c, firm, matter).await.map(drop)
                } else {
                    let document_id = Uuid::new_v4();
                    facts::add_document(
                        &mut c,
                        facts::NewDocument {
                            document_id,
                            firm_id: firm,
                            matter_id: matter,
                            title: format!("Exhibit {i}"),
                            dated: chrono::NaiveDate::from_ymd_opt(2025, 1, 1)
                                .map(|d| d + chrono::Days::new(i % 365)),
                            body: format!("Exhibit {i}: the supply agreement, clause {random}."),
                        },
                    )
                    .await
                    .map(|_| {
                        let mut r = record.lock().unwrap();
                        r.documents.entry(matter).or_default().insert(document_id);
                    })
                }
            }
            _ => {
                let matter = Uuid::new_v4();
                facts::create_matter(&mut c, firm, matter, &format!("Acme v. Globex {i}"))
                    .await
                    .map(|_| record.lock().unwrap().matters.push(matter))
            }
        };
        match recorded {
            Ok(()) => record.lock().unwrap().facts += 1,
            // The test is over (it failed, and its database is being dropped).
            Err(_) if AtomicBool::load(&stop, Ordering::SeqCst) => return,
            Err(e) => panic!("recording a fact: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
}

#[derive(diesel::QueryableByName)]
struct DbTime {
    #[diesel(sql_type = Timestamptz)]
    t: DateTime<Utc>,
}

/// The database's clock (the ledger's clock: no test advances it here).
async fn db_now(pool: &Pool) -> DateTime<Utc> {
    let mut c = pool.get().await.unwrap();
    diesel::sql_query("SELECT clock_timestamp() AS t")
        .get_result::<DbTime>(&mut c)
        .await
        .unwrap()
        .t
}

/// Frames `node` landed (runs with outcome `landed`) that finished after `after`.
async fn landed_by(pool: &Pool, node: &str, after: DateTime<Utc>) -> i64 {
    let mut c = pool.get().await.unwrap();
    diesel::sql_query(
        "SELECT count(*) AS n FROM ops.matter_frame_runs
          WHERE node_id = $1 AND outcome = 'landed' AND finished_at > $2",
    )
    .bind::<Text, _>(node)
    .bind::<Timestamptz, _>(after)
    .get_result::<common::Count>(&mut c)
    .await
    .unwrap()
    .n
}

#[derive(diesel::QueryableByName)]
struct Failure {
    #[diesel(sql_type = Text)]
    node_id: String,
    #[diesel(sql_type = Text)]
    error: String,
}

/// Panics at once, naming them, if runs failed on a statement, column or relation the schema
/// lacks, or a node's log names one: a migration broke the nodes that call it.
async fn assert_no_missing_statement(pool: &Pool, fleet: &Fleet) {
    for n in &fleet.nodes {
        let log = n.log_text();
        let bad = missing_schema_lines(&log);
        assert!(
            bad.is_empty(),
            "{}'s log names a statement, column or relation the migrated schema lacks: a \
             migration broke it (a release's migrations must keep every statement the previous \
             release calls: expand, then contract):\n{}",
            n.id,
            bad.iter()
                .take(5)
                .map(|l| without_colours(l))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let mut c = pool.get().await.unwrap();
    let failures: Vec<Failure> = diesel::sql_query(
        "SELECT DISTINCT node_id, error FROM ops.matter_frame_runs
          WHERE error LIKE '%does not exist%' LIMIT 5",
    )
    .load(&mut c)
    .await
    .unwrap();
    assert!(
        failures.is_empty(),
        "builds failed on a statement the migrated schema lacks: a migration broke the nodes \
         that call it (a release's migrations must keep every statement the previous release \
         calls: expand, then contract):\n{}",
        failures
            .iter()
            .map(|f| format!("  {}: {}", f.node_id, f.error))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Waits (up to 60 s) until `node` has landed `n` frames that finished after `after`; fails
/// at once if a build failed on a statement the schema lacks.
async fn until_landed(
    pool: &Pool,
    fleet: &Fleet,
    node: &str,
    n: i64,
    after: DateTime<Utc>,
    what: &str,
) {
    eventually(Duration::from_secs(60), what, || async {
        assert_no_missing_statement(pool, fleet).await;
        (landed_by(pool, node, after).await >= n).then_some(())
    })
    .await
}

/// Lets a phase last at least `min` since `since`: facts keep arriving and nodes keep serving.
async fn last_at_least(since: Instant, min: Duration) {
    tokio::time::sleep(min.saturating_sub(since.elapsed())).await;
}

#[derive(diesel::QueryableByName)]
struct Served {
    #[diesel(sql_type = SqlUuid)]
    matter_id: Uuid,
    #[diesel(sql_type = BigInt)]
    requested_generation: i64,
    #[diesel(sql_type = BigInt)]
    landed_generation: i64,
    #[diesel(sql_type = Text)]
    run_status: String,
    #[diesel(sql_type = BigInt)]
    running_runs: i64,
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    latest_generation: Option<i64>,
    #[diesel(sql_type = diesel::sql_types::Nullable<Jsonb>)]
    latest_body: Option<serde_json::Value>,
}

async fn jobs(pool: &Pool, firm: Uuid) -> Vec<Served> {
    let mut c = pool.get().await.unwrap();
    diesel::sql_query(
        "SELECT j.matter_id, j.requested_generation, j.landed_generation, j.run_status,
                (SELECT count(*) FROM ops.matter_frame_runs r
                  WHERE r.firm_id = j.firm_id AND r.matter_id = j.matter_id
                    AND r.outcome = 'running') AS running_runs,
                f.generation AS latest_generation, f.body AS latest_body
           FROM ops.matter_frame_jobs j
           LEFT JOIN LATERAL (SELECT generation, body FROM ops.matter_frames f
                               WHERE f.firm_id = j.firm_id AND f.matter_id = j.matter_id
                               ORDER BY generation DESC LIMIT 1) f ON true
          WHERE j.firm_id = $1",
    )
    .bind::<SqlUuid, _>(firm)
    .load(&mut c)
    .await
    .unwrap()
}

#[derive(diesel::QueryableByName, Debug)]
struct Outcomes {
    #[diesel(sql_type = Text)]
    node_id: String,
    #[diesel(sql_type = Text)]
    outcome: String,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The previous release's migrations and this tree's: this release must add some, after the
/// previous release's (or the previous release is the pre-release build whose migrations
/// this tree's baseline squashed). The directories added, and their versions.
fn migrations_this_release_adds() -> (Vec<String>, Vec<String>) {
    require_previous_release_commit();
    let previous = previous_migrations();
    let current = current_migrations();
    assert_ne!(
        previous, current,
        "this tree has the same migrations as PREVIOUS_RELEASE ({PREVIOUS_RELEASE}), so this test \
         upgrades nothing: move PREVIOUS_RELEASE (tests/install/upgrade.rs) to the last commit before the \
         migrations this release adds (the previous release; it moves forward when a release \
         ships)"
    );
    // A release only adds migrations after the previous release's; or the previous release is
    // the pre-release build whose migrations this tree's baseline squashed, and adopts.
    let squashed = previous.iter().map(|m| version(m)).collect::<Vec<_>>()
        == briefrail::db::baseline::PRE_RELEASE
        && <[String]>::first(&current).map(|m| version(m)).as_deref()
            == Some(briefrail::db::baseline::BASELINE);
    assert!(
        current.starts_with(&previous) || squashed,
        "the previous release's migrations must be a strict prefix of this tree's (a release \
         only adds migrations, after the previous release's), or the pre-release ones this \
         tree's baseline squashed: previous release ({PREVIOUS_RELEASE}): {previous:?}; this \
         tree: {current:?}"
    );
    let added_dirs = if squashed {
        current.clone()
    } else {
        current[previous.len()..].to_vec()
    };
    let added: Vec<String> = added_dirs.iter().map(|m| version(m)).collect();
    (added_dirs, added)
}

/// `binary migrate` on the database at `url`, which must succeed; what it printed.
fn migrate(binary: &Path, url: &str) -> String {
    let out = Command::new(binary)
        .arg("migrate")
        .env("BRIEFRAIL__DATABASE__URL", url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run briefrail migrate");
    assert!(
        out.status.success(),
        "{} migrate: {}{}",
        binary.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Only this release's migrations are pending, and this release's binary lists each as such.
async fn assert_only_these_are_pending(
    url: &str,
    new_binary: &Path,
    added_dirs: &[String],
    added: &[String],
) {
    let pending = db::migrate::pending(url).await.unwrap();
    assert_eq!(pending, added, "only this release's migrations are pending");
    let status = migrate_status(new_binary, url);
    for m in added_dirs {
        assert!(
            status
                .lines()
                .any(|l| l.starts_with("pending") && l.contains(m.as_str())),
            "this release's binary must list {m} as pending:\n{status}"
        );
    }
}

/// (c) A node of this release starts beside the old ones; it lands 5 frames, and the old ones
/// 5 more beside it. When it started.
async fn new_node_serves_beside_the_old(
    pool: &Pool,
    fleet: &mut Fleet,
    url: &str,
    dir: &Path,
    new_binary: &Path,
) -> DateTime<Utc> {
    let new_started = db_now(pool).await;
    let phase = Instant::now();
    fleet.nodes.push(spawn_node(new_binary, url, dir, "new"));
    until_landed(
        pool,
        fleet,
        "new",
        5,
        new_started,
        "the new node to land 5 frames",
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "the old nodes to land 5 more frames beside the new one",
        || async {
            assert_no_missing_statement(pool, fleet).await;
            (landed_by(pool, "old-a", new_started).await
                + landed_by(pool, "old-b", new_started).await
                >= 5)
                .then_some(())
        },
    )
    .await;
    last_at_least(phase, Duration::from_secs(8)).await;
    new_started
}

/// The last step of a rolling upgrade: SIGTERM to the old nodes, one after the other; each
/// exits cleanly (handing its claims back).
async fn stop_the_old_nodes(fleet: &mut Fleet) {
    for id in ["old-a", "old-b"] {
        let node = fleet.get(id);
        node.signal("-TERM");
        let status = node
            .wait_exit(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{id} still running 20 s after SIGTERM"));
        assert!(status.success(), "{id} exited with {status}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits (up to 90 s) until every matter's demands are served and no claim is left running;
/// the jobs' rows then.
async fn every_demand_served(pool: &Pool, fleet: &Fleet, firm: Uuid) -> Vec<Served> {
    eventually(Duration::from_secs(90), "every demand served", || async {
        assert_no_missing_statement(pool, fleet).await;
        let rows = jobs(pool, firm).await;
        (rows.len() == MATTERS
            && rows.iter().all(|r| {
                r.landed_generation == r.requested_generation
                    && r.run_status != "running"
                    && r.running_runs == 0
            }))
        .then_some(rows)
    })
    .await
}

/// Every frame a fenced landing: exactly one run of its token landed, and it is the frame's
/// run; every landed run has its frame; tokens land in increasing order; nothing but
/// landings, and claims the old nodes handed back at SIGTERM.
async fn assert_every_frame_is_a_fenced_landing(pool: &Pool, fleet: &Fleet) {
    let unfenced = common::count(
        &mut pool.get().await.unwrap(),
        "SELECT count(*) AS n FROM ops.matter_frames f
          WHERE (SELECT count(*) FROM ops.matter_frame_runs r
                  WHERE r.firm_id = f.firm_id AND r.matter_id = f.matter_id
                    AND r.token = f.generation AND r.outcome = 'landed') <> 1
             OR NOT EXISTS (SELECT 1 FROM ops.matter_frame_runs r
                             WHERE r.run_id = f.run_id AND r.token = f.generation
                               AND r.outcome = 'landed')",
    )
    .await;
    assert_eq!(unfenced, 0, "frames that are not exactly one landed run");
    let frameless = common::count(
        &mut pool.get().await.unwrap(),
        "SELECT count(*) AS n FROM ops.matter_frame_runs r
          WHERE r.outcome = 'landed'
            AND NOT EXISTS (SELECT 1 FROM ops.matter_frames f
                             WHERE f.firm_id = r.firm_id AND f.matter_id = r.matter_id
                               AND f.generation = r.token AND f.run_id = r.run_id)",
    )
    .await;
    assert_eq!(frameless, 0, "landed runs without their frame");
    let out_of_order = common::count(
        &mut pool.get().await.unwrap(),
        "SELECT count(*) AS n FROM ops.matter_frames a JOIN ops.matter_frames b
             ON a.firm_id = b.firm_id AND a.matter_id = b.matter_id
          WHERE a.generation < b.generation AND a.created_at > b.created_at",
    )
    .await;
    assert_eq!(out_of_order, 0, "frames that landed out of token order");
    assert_no_missing_statement(pool, fleet).await;
    // Nothing but landings, and claims the old nodes handed back at SIGTERM: no lease ran out,
    // no build was fenced or failed on its own.
    let other = common::count(
        &mut pool.get().await.unwrap(),
        "SELECT count(*) AS n FROM ops.matter_frame_runs
          WHERE outcome <> 'landed'
            AND NOT (outcome IN ('failed', 'released') AND error = 'node shutting down'
                     AND node_id IN ('old-a', 'old-b'))",
    )
    .await;
    assert_eq!(other, 0, "runs neither landed nor handed back at SIGTERM");
}

/// Every uploaded document is in its matter's latest frame, which is the landed generation.
fn assert_every_document_in_its_latest_frame(
    rows: &[Served],
    documents: &BTreeMap<Uuid, BTreeSet<Uuid>>,
) {
    for r in rows {
        let body = r.latest_body.as_ref().expect("a latest frame");
        assert_eq!(r.latest_generation, Some(r.landed_generation));
        assert_eq!(body["token"], r.landed_generation, "{body}");
        let in_frame: BTreeSet<Uuid> = body["context"]["documents"]
            .as_array()
            .expect("the echoed context's documents")
            .iter()
            .map(|d| d["document_id"].as_str().unwrap().parse().unwrap())
            .collect();
        let uploaded = documents.get(&r.matter_id).cloned().unwrap_or_default();
        assert_eq!(
            in_frame, uploaded,
            "matter {}: the latest frame's documents",
            r.matter_id
        );
    }
}

/// The previous release landed builds on the migrated schema, before and beside the new node;
/// the new node landed too. Reports the runs by node and outcome.
async fn assert_both_releases_landed(
    pool: &Pool,
    migrated_at: DateTime<Utc>,
    new_started: DateTime<Utc>,
    facts_recorded: usize,
    documents: &BTreeMap<Uuid, BTreeSet<Uuid>>,
) {
    let old_after_migration =
        landed_by(pool, "old-a", migrated_at).await + landed_by(pool, "old-b", migrated_at).await;
    let old_beside_new =
        landed_by(pool, "old-a", new_started).await + landed_by(pool, "old-b", new_started).await;
    let new_landed = landed_by(pool, "new", new_started).await;
    assert!(
        old_after_migration >= 8 && old_beside_new >= 5 && new_landed >= 10,
        "{old_after_migration} {old_beside_new} {new_landed}"
    );
    let mut c = pool.get().await.unwrap();
    let outcomes: Vec<Outcomes> = diesel::sql_query(
        "SELECT node_id, outcome, count(*) AS n FROM ops.matter_frame_runs
          GROUP BY node_id, outcome ORDER BY node_id, outcome",
    )
    .load(&mut c)
    .await
    .unwrap();
    drop(c);
    let documents_uploaded: usize = documents.values().map(BTreeSet::len).sum();
    eprintln!(
        "upgrade: {facts_recorded} facts ({MATTERS} matters, {documents_uploaded} documents), \
         every demand served; the previous release landed {old_after_migration} frames after the \
         migration ({old_beside_new} beside the new node), the new node {new_landed}; runs by \
         node and outcome: {}",
        outcomes
            .iter()
            .map(|o| format!("{} {} {}", o.node_id, o.outcome, o.n))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// (b) This release's migrations, applied under the running node old-a while facts arrive;
/// this release's binary then sees none pending. The previous release's `migrate` on the newer
/// schema applies nothing and fails nothing, and its node old-b starts beside versions it does
/// not know (a supervisor restarting a node mid-upgrade); both land. When the migration ended.
async fn migrate_under_the_old_node(
    pool: &Pool,
    fleet: &mut Fleet,
    url: &str,
    dir: &Path,
    old_binary: &Path,
    added: &[String],
) -> DateTime<Utc> {
    let applied = db::migrate::run_pending(url).await.unwrap();
    let migrated_at = db_now(pool).await;
    let phase = Instant::now();
    assert_eq!(applied, added);
    briefrail::testing::plant_mutation(url).await.unwrap();
    eprintln!("upgrade: applied {applied:?} under the running node old-a");
    let status = migrate_status(Path::new(env!("CARGO_BIN_EXE_briefrail")), url);
    assert!(status.contains(" 0 pending"), "{status}");
    // The previous release's `migrate` on a newer schema applies nothing and fails nothing, and
    // its node starts beside versions it does not know (a supervisor restarting a node mid-
    // upgrade).
    migrate(old_binary, url);
    fleet.nodes.push(spawn_node(old_binary, url, dir, "old-b"));
    until_landed(
        pool,
        fleet,
        "old-a",
        5,
        migrated_at,
        "old-a to land 5 frames after the migration",
    )
    .await;
    until_landed(
        pool,
        fleet,
        "old-b",
        3,
        migrated_at,
        "old-b, started on the migrated schema, to land",
    )
    .await;
    last_at_least(phase, Duration::from_secs(4)).await;
    migrated_at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_release_keeps_serving_beside_this_one_across_the_migration() {
    // The test must really upgrade: the previous release's migrations, a strict prefix of ours.
    let (added_dirs, added) = migrations_this_release_adds();
    let old_binary = previous_release_binary();
    let new_binary = Path::new(env!("CARGO_BIN_EXE_briefrail"));

    // A database at the previous release's schema, migrated by that release's own binary.
    let database = OwnDatabase::new();
    let url = database.url.clone();
    migrate(&old_binary, &url);
    // Each binary is the release it should be: this release's sees its migrations pending.
    assert_only_these_are_pending(&url, new_binary, &added_dirs, &added).await;
    let pool = db::connect(&PoolOptions::new(url.clone()).size(4))
        .await
        .unwrap();

    let dir = scratch_dir("upgrade");
    let mut fleet = Fleet::default();
    let began = db_now(&pool).await;
    let phase = Instant::now();
    fleet
        .nodes
        .push(spawn_node(&old_binary, &url, &dir, "old-a"));

    // Facts arrive the whole time.
    let firm = Uuid::new_v4();
    let record = Arc::new(Mutex::new(Record::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let writer = tokio::spawn(write_facts(
        pool.clone(),
        firm,
        record.clone(),
        stop.clone(),
    ));

    // (a) The previous release serves alone.
    until_landed(
        &pool,
        &fleet,
        "old-a",
        5,
        began,
        "old-a to land 5 frames before the migration",
    )
    .await;
    last_at_least(phase, Duration::from_secs(4)).await;

    // (b) This release's migrations, applied under the running node while facts arrive; a
    // second node of the previous release starts on the migrated schema.
    let migrated_at =
        migrate_under_the_old_node(&pool, &mut fleet, &url, &dir, &old_binary, &added).await;

    // (c) A node of this release beside them; both releases serve.
    let new_started =
        new_node_serves_beside_the_old(&pool, &mut fleet, &url, &dir, new_binary).await;

    // (d) The last step of a rolling upgrade: SIGTERM to the old nodes, one after the other;
    // each hands its claims back, and the new node serves the rest.
    stop_the_old_nodes(&mut fleet).await;
    let old_stopped = db_now(&pool).await;
    let phase = Instant::now();
    until_landed(
        &pool,
        &fleet,
        "new",
        5,
        old_stopped,
        "the new node to serve alone",
    )
    .await;
    last_at_least(phase, Duration::from_secs(4)).await;
    stop.store(true, Ordering::SeqCst);
    writer.await.expect("the facts writer");

    // Every demand served, no claim left running.
    let (matters, documents, facts_recorded) = {
        let r = record.lock().unwrap();
        (r.matters.clone(), r.documents.clone(), r.facts)
    };
    assert_eq!(matters.len(), MATTERS);
    let rows = every_demand_served(&pool, &fleet, firm).await;

    // Every frame a fenced landing: exactly one run of its token landed, and it is the frame's
    // run; every landed run has its frame; tokens land in increasing order.
    assert_every_frame_is_a_fenced_landing(&pool, &fleet).await;

    // Every uploaded document in its matter's latest frame, which is the landed generation.
    assert_every_document_in_its_latest_frame(&rows, &documents);

    // The previous release landed builds on the migrated schema, before and beside the new
    // node; the new node landed too.
    assert_both_releases_landed(&pool, migrated_at, new_started, facts_recorded, &documents).await;
    drop(fleet);
    drop(pool);
    drop(database);
}
