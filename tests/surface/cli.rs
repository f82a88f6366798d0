//! The command line as an operator uses it: real binary, real database, exit codes.

use crate::common::{self, free_port};

use std::process::Command;

use crate::common::shell::{briefrail, ok};

use briefrail::db::admin;
use briefrail::testing::{TestDb, server_url};
use uuid::Uuid;

#[tokio::test]
async fn migrate_creates_the_database_and_is_idempotent() {
    let name = format!("br_cli_{}", &Uuid::new_v4().simple().to_string()[..12]);
    let url = admin::with_database(&server_url(), &name).unwrap();
    let migrations = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    let first = ok(&briefrail(&url, &["migrate"]));
    assert!(
        first.contains("created") && first.contains(&format!("{migrations} migration(s) applied")),
        "{first}"
    );
    let second = ok(&briefrail(&url, &["migrate"]));
    assert!(
        second.contains("exists") && second.contains("0 migration(s) applied"),
        "{second}"
    );
    admin::drop_database(&server_url(), &name).await.unwrap();
}

/// The migration directories of this tree, in order (their names are what `--status` prints).
fn migration_names() -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
    names.sort();
    names
}

/// The line of `migrate --status` that names `needle`.
fn line_of<'a>(text: &'a str, needle: &str) -> &'a str {
    text.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line names {needle}:\n{text}"))
}

#[tokio::test]
async fn migrate_status_lists_applied_pending_and_newer_migrations_and_changes_nothing() {
    let db = TestDb::new(1).await.unwrap();
    let names = migration_names();
    let text = ok(&briefrail(&db.url, &["migrate", "--status"]));
    assert!(
        text.contains(&format!("{} applied, 0 pending", names.len())),
        "{text}"
    );
    for name in &names {
        let line = line_of(&text, name);
        assert!(
            line.starts_with("applied") && line.contains("run on 20"),
            "{line}"
        );
    }

    // The newest migration undone (its row and what it built: the baseline's schemas when it
    // is the only one): it is pending, and `--status` does not apply it.
    let newest = names.last().unwrap();
    let version: String = newest.split('_').next().unwrap().replace('-', "");
    let down = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(newest)
            .join("down.sql"),
    )
    .unwrap();
    let mut c = db.connection().await.unwrap();
    use diesel_async::SimpleAsyncConnection;
    c.batch_execute(&format!(
        "{down};
         DELETE FROM __diesel_schema_migrations WHERE version = '{version}';
         INSERT INTO __diesel_schema_migrations (version) VALUES ('99991231000001')"
    ))
    .await
    .unwrap();
    for _ in 0..2 {
        let text = ok(&briefrail(&db.url, &["migrate", "--status"]));
        assert!(
            text.contains(&format!(
                "{} applied, 1 pending, 1 applied by a newer release",
                names.len() - 1
            )),
            "{text}"
        );
        assert!(line_of(&text, newest).starts_with("pending"), "{text}");
        for name in &names[..names.len() - 1] {
            assert!(line_of(&text, name).starts_with("applied"), "{text}");
        }
        // A version this binary does not know (a newer release migrated) is listed, not fatal.
        let newer = line_of(&text, "99991231000001");
        assert!(
            newer.starts_with("newer") && newer.contains("newer release"),
            "{newer}"
        );
    }
    // Plain `migrate` applies the pending one and accepts the unknown version.
    let applied = ok(&briefrail(&db.url, &["migrate"]));
    assert!(applied.contains("1 migration(s) applied"), "{applied}");
    let text = ok(&briefrail(&db.url, &["migrate", "--status"]));
    assert!(line_of(&text, newest).starts_with("applied"), "{text}");

    // A database that does not exist: a clear error, and `--status` does not create it.
    let name = format!("br_cli_{}", &Uuid::new_v4().simple().to_string()[..12]);
    let url = admin::with_database(&server_url(), &name).unwrap();
    let out = briefrail(&url, &["migrate", "--status"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // Which database, on which server, as whom.
    let parsed = url::Url::parse(&url).unwrap();
    let which = format!(
        "database \"{name}\" at {}:{} as user \"{}\" does not exist",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(5432),
        parsed.username()
    );
    assert!(stderr.contains(&which), "{stderr}");
    assert!(!admin::database_exists(&url).await.unwrap());
}

#[tokio::test]
async fn an_operator_records_facts_and_reads_status() {
    let db = TestDb::new(1).await.unwrap();
    let (firm, matter) = (Uuid::new_v4().to_string(), Uuid::new_v4().to_string());
    let m = ["--firm", firm.as_str(), "--matter", matter.as_str()];
    ok(&briefrail(
        &db.url,
        &[
            &["matter", "create"][..],
            &m,
            &["--title", "Acme v. Globex"],
        ]
        .concat(),
    ));
    let file = std::env::temp_dir().join(format!("complaint-{matter}.txt"));
    std::fs::write(
        &file,
        "Acme alleges Globex breached the supply agreement. Damages exceed $2M.",
    )
    .unwrap();
    let path = file.to_string_lossy().into_owned();
    ok(&briefrail(
        &db.url,
        &[
            &["document", "add"][..],
            &m,
            &[
                "--title",
                "Complaint",
                "--dated",
                "2025-03-01",
                "--file",
                &path,
            ],
        ]
        .concat(),
    ));
    ok(&briefrail(
        &db.url,
        &[&["brief", "request"][..], &m].concat(),
    ));
    let all = ok(&briefrail(
        &db.url,
        &["brief", "request", "--firm", &firm, "--all"],
    ));
    assert!(all.contains("1 live matter"), "{all}");

    let status: serde_json::Value = serde_json::from_str(&ok(&briefrail(
        &db.url,
        &[&["status", "--json"][..], &m].concat(),
    )))
    .expect("json");
    assert_eq!(status["unserved"], false);
    assert!(status["runs"].as_array().unwrap().is_empty());
    let text = ok(&briefrail(&db.url, &[&["status"][..], &m].concat()));
    assert!(text.contains("unserved demand: no"), "{text}");

    let mut c = db.pool.get().await.unwrap();
    use briefrail::schema::ops::domain_event_outbox::dsl as o;
    use diesel::prelude::*;
    use diesel_async::RunQueryDsl;
    let names: Vec<String> = o::domain_event_outbox
        .order(o::seq)
        .select(o::event_name)
        .load(&mut c)
        .await
        .unwrap();
    assert_eq!(
        names,
        [
            "matter.created",
            "document.uploaded",
            "brief.requested",
            "brief.requested"
        ]
    );
    // A stranded event (republished to the cap, never consumed) is made publishable again.
    diesel_async::SimpleAsyncConnection::batch_execute(
        &mut c,
        &format!(
            "UPDATE ops.domain_event_outbox SET published_at = ops.now(), republish_count = {}
              WHERE event_name = 'matter.created'",
            briefrail::ledger::outbox::REPUBLISH_CAP
        ),
    )
    .await
    .unwrap();
    let text = ok(&briefrail(&db.url, &["outbox", "republish-stranded"]));
    assert!(
        text.contains("1 stranded event(s) made publishable again"),
        "{text}"
    );
    let text = ok(&briefrail(&db.url, &["outbox", "republish-stranded"]));
    assert!(text.contains("0 stranded event(s)"), "{text}");
    std::fs::remove_file(file).ok();
}

#[tokio::test]
async fn bad_input_exits_2_and_runtime_failures_exit_1_with_one_line() {
    let db = TestDb::new(1).await.unwrap();
    let firm = Uuid::new_v4().to_string();
    let unknown = Uuid::new_v4().to_string();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            vec!["status", "--firm", "nope", "--matter", &unknown],
            2,
            "invalid value",
        ),
        (
            vec![
                "document", "add", "--firm", &firm, "--matter", &unknown, "--title", "t", "--text",
                "x",
            ],
            2,
            "not found",
        ),
        (
            vec![
                "matter", "create", "--firm", &firm, "--matter", &unknown, "--title", "  ",
            ],
            2,
            "title must not be empty",
        ),
        (
            vec![
                "document",
                "add",
                "--firm",
                &firm,
                "--matter",
                &unknown,
                "--title",
                "t",
                "--file",
                "/no/such/file",
            ],
            2,
            "/no/such/file",
        ),
        (vec!["--config", "/no/such.toml", "migrate"], 2, "--config"),
    ];
    for (args, code, needle) in cases {
        let out = briefrail(&db.url, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_briefrail"))
        .args(["status", "--firm", &firm, "--matter", &unknown])
        .env("BRIEFRAIL__LEASE__SECONDS", "-3")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lease.seconds"));

    // Unreachable database: a runtime failure, and the password never printed.
    let out = briefrail(
        "postgres://app:hunter2@127.0.0.1:1/x",
        &["status", "--firm", &firm, "--matter", &unknown],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
}

/// `briefrail ARGS` with `env`, and its exit code and stderr; the test's own config only.
fn briefrail_env(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_briefrail"));
    cmd.args(args).env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run briefrail");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The env of a `run` that needs no broker and no fixed port.
fn run_env(db_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("BRIEFRAIL__DATABASE__URL", db_url.to_owned()),
        ("BRIEFRAIL__TRANSPORT__KIND", "postgres".into()),
        (
            "BRIEFRAIL__HTTP__BIND",
            format!("127.0.0.1:{}", free_port()),
        ),
    ]
}

fn as_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// One line on stderr, with every `needle`, and never `secret`.
fn says(stderr: &str, needles: &[&str], secret: &str) {
    for n in needles {
        assert!(stderr.contains(n), "{n:?} missing from: {stderr}");
    }
    assert!(!stderr.contains(secret), "the password leaked: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
}

#[tokio::test]
async fn an_unreachable_database_names_its_server_and_the_cause() {
    let firm = Uuid::new_v4().to_string();
    let status = ["status", "--firm", &firm, "--matter", &firm];
    // Nothing listens (ECONNREFUSED): status, migrate, migrate --status and run alike.
    let refused = "postgres://app:hunter2@127.0.0.1:1/ledger";
    for args in [
        &status[..],
        &["migrate"],
        &["migrate", "--status"],
        &["run"],
    ] {
        let env = run_env(refused);
        let (code, stderr) = briefrail_env(args, &as_refs(&env));
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        says(
            &stderr,
            &[
                "127.0.0.1:1",
                "connection refused",
                "database \"ledger\"",
                "user \"app\"",
            ],
            "hunter2",
        );
    }

    // No such database (3D000): the remedy named; `migrate --status` keeps its own message.
    let name = format!("br_cli_{}", &Uuid::new_v4().simple().to_string()[..12]);
    let missing = admin::with_database(&server_url(), &name).unwrap();
    for args in [&status[..], &["run"]] {
        let env = run_env(&missing);
        let (code, stderr) = briefrail_env(args, &as_refs(&env));
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        says(
            &stderr,
            &["no such database", "3D000", "briefrail migrate", &name],
            "\u{0}",
        );
    }
    assert!(!admin::database_exists(&missing).await.unwrap());

    // A role that does not exist (28000), its password never printed.
    let mut nobody = url::Url::parse(&server_url()).unwrap();
    nobody.set_username("br_no_such_role").unwrap();
    nobody.set_password(Some("s3cr3t-pw")).unwrap();
    let (code, stderr) = briefrail_env(&status, &[("BRIEFRAIL__DATABASE__URL", nobody.as_str())]);
    assert_eq!(code, Some(1), "{stderr}");
    says(
        &stderr,
        &[
            "authentication failed",
            "SQLSTATE 28000",
            "br_no_such_role",
            "127.0.0.1:",
        ],
        "s3cr3t-pw",
    );
}

/// A wrong password (28P01) needs a server that asks for one: a private cluster of its own.
#[tokio::test]
async fn a_wrong_password_is_named_as_such_and_never_printed() {
    let cluster = common::cluster::PrivateCluster::start("cli-auth");
    cluster.require_password("app", "right-pw");
    let wrong = format!(
        "postgres://app:wr0ng-pw@127.0.0.1:{}/postgres",
        cluster.port
    );
    let firm = Uuid::new_v4().to_string();
    // The reload is asynchronous: wait until the server asks for passwords.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (code, stderr) = loop {
        let (code, stderr) = briefrail_env(
            &["status", "--firm", &firm, "--matter", &firm],
            &[("BRIEFRAIL__DATABASE__URL", &wrong)],
        );
        if stderr.contains("28P01") || std::time::Instant::now() > deadline {
            break (code, stderr);
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(code, Some(1), "{stderr}");
    says(
        &stderr,
        &[
            "authentication failed",
            "SQLSTATE 28P01",
            "password authentication failed for user \"app\"",
            &format!("127.0.0.1:{}", cluster.port),
        ],
        "wr0ng-pw",
    );
    // The right password gets past the first connection (to the unmigrated database's error).
    let right = format!(
        "postgres://app:right-pw@127.0.0.1:{}/postgres",
        cluster.port
    );
    let (code, stderr) = briefrail_env(
        &["status", "--firm", &firm, "--matter", &firm],
        &[("BRIEFRAIL__DATABASE__URL", &right)],
    );
    assert_eq!(code, Some(1), "{stderr}");
    says(&stderr, &["not migrated", "briefrail migrate"], "right-pw");
}

#[tokio::test]
async fn an_unmigrated_database_says_to_run_migrate() {
    // Nothing applied: a bare database.
    let name = format!("br_cli_{}", &Uuid::new_v4().simple().to_string()[..12]);
    let url = admin::with_database(&server_url(), &name).unwrap();
    assert!(admin::create_database_if_missing(&url).await.unwrap());
    let firm = Uuid::new_v4().to_string();
    let ledger_commands: [&[&str]; 4] = [
        &["status", "--firm", &firm, "--matter", &firm],
        &[
            "matter", "create", "--firm", &firm, "--matter", &firm, "--title", "t",
        ],
        &["brief", "request", "--firm", &firm, "--all"],
        &["run"],
    ];
    let total = migration_names().len().to_string();
    // Which database: its server and user too (never a password).
    let parsed = url::Url::parse(&url).unwrap();
    let server = format!(
        "{}:{}",
        parsed.host_str().unwrap(),
        parsed.port().unwrap_or(5432)
    );
    let user = format!("user \"{}\"", parsed.username());
    for args in ledger_commands {
        let env = run_env(&url);
        let (code, stderr) = briefrail_env(args, &as_refs(&env));
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        says(
            &stderr,
            &[
                &format!("database \"{name}\" at {server} as {user} is not migrated"),
                &format!("{total} of this binary's migrations pending"),
                "run `briefrail migrate` first",
            ],
            "\u{0}",
        );
        assert!(!stderr.contains("relation"), "{stderr}");
    }
    // Reading changed nothing: no migrations table was created.
    let text = ok(&briefrail(&url, &["migrate", "--status"]));
    assert!(
        text.contains(&format!("0 applied, {total} pending")),
        "{text}"
    );
    admin::drop_database(&server_url(), &name).await.unwrap();

    // Partially migrated: the newest migration's row gone.
    let db = TestDb::new(1).await.unwrap();
    let newest = migration_names().pop().unwrap();
    let version = newest.split('_').next().unwrap().replace('-', "");
    let mut c = db.connection().await.unwrap();
    use diesel_async::SimpleAsyncConnection;
    c.batch_execute(&format!(
        "DELETE FROM __diesel_schema_migrations WHERE version = '{version}'"
    ))
    .await
    .unwrap();
    let (code, stderr) = briefrail_env(
        &["status", "--firm", &firm, "--matter", &firm],
        &[("BRIEFRAIL__DATABASE__URL", &db.url)],
    );
    assert_eq!(code, Some(1), "{stderr}");
    says(
        &stderr,
        &[
            &format!("at {server} as {user} is not migrated"),
            "1 of this binary's migrations pending",
            &version,
            "briefrail migrate",
        ],
        "\u{0}",
    );
}

#[tokio::test]
async fn unknown_keys_and_invalid_names_are_refused_with_what_is_valid() {
    let dir = std::env::temp_dir().join(format!("briefrail-cli-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("node.toml");
    let path = file.to_string_lossy().into_owned();
    let cases: [(&str, &[&str]); 4] = [
        (
            "[lease]\nsecond = 30\n",
            &[
                "config lease.second: unknown key in",
                &path,
                "[lease] has: seconds",
            ],
        ),
        (
            "[databse]\nurl = \"postgres://u@h/d\"\n",
            &["config databse: unknown section in", &path, "database"],
        ),
        (
            "[transport]\nkind = \"kafka\"\n",
            &[
                "config transport.kind",
                "\"kafka\" is not one of: amqp, postgres",
            ],
        ),
        (
            "[log]\nformat = \"xml\"\n",
            &["config log.format", "\"xml\" is not one of: pretty, json"],
        ),
    ];
    for (text, needles) in cases {
        std::fs::write(&file, text).unwrap();
        let (code, stderr) = briefrail_env(&["--config", &path, "migrate", "--status"], &[]);
        assert_eq!(code, Some(2), "{text}: {stderr}");
        says(&stderr, needles, "\u{0}");
    }
    let (code, stderr) = briefrail_env(
        &["migrate", "--status"],
        &[("BRIEFRAIL__LEASE__SECOND", "30")],
    );
    assert_eq!(code, Some(2), "{stderr}");
    says(
        &stderr,
        &[
            "config lease.second",
            "environment variable BRIEFRAIL__LEASE__SECOND",
        ],
        "\u{0}",
    );
    let (code, stderr) = briefrail_env(
        &["migrate", "--status"],
        &[("BRIEFRAIL__BUILDER__KIND", "magic")],
    );
    assert_eq!(code, Some(2), "{stderr}");
    says(
        &stderr,
        &["\"magic\" is not one of: brief, command, http"],
        "\u{0}",
    );

    // Every TOML file shipped under config/ loads as a --config file.
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/config")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") {
            briefrail::config::Settings::load_with_env(Some(&p), std::iter::empty())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn a_busy_http_port_exits_1_naming_the_address() {
    let db = TestDb::new(1).await.unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) = briefrail_env(
        &["run"],
        &[
            ("BRIEFRAIL__DATABASE__URL", &db.url),
            ("BRIEFRAIL__TRANSPORT__KIND", "postgres"),
            ("BRIEFRAIL__HTTP__BIND", &addr),
            ("BRIEFRAIL__SHUTDOWN__GRACE_SECONDS", "1"),
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    let last = stderr.trim().lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!("http.bind {addr}")) && last.contains("in use"),
        "{stderr}"
    );
    drop(taken);
}

/// `briefrail status … | head -1`: the reader is gone before the command writes. It must end
/// quietly (no panic, no backtrace), as a Unix tool does: by SIGPIPE, or 0.
#[tokio::test]
async fn a_closed_stdout_ends_a_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let db = TestDb::new(1).await.unwrap();
    let (firm, matter) = (Uuid::new_v4().to_string(), Uuid::new_v4().to_string());
    let m = ["--firm", firm.as_str(), "--matter", matter.as_str()];
    ok(&briefrail(
        &db.url,
        &[
            &["matter", "create"][..],
            &m,
            &["--title", "Acme v. Globex"],
        ]
        .concat(),
    ));
    for args in [
        [&["status"][..], &m].concat(),
        vec!["matter", "list", "--firm", firm.as_str()],
        vec!["migrate", "--status"],
    ] {
        // The read end is closed before the child starts: its first write meets EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_briefrail"))
            .args(&args)
            .env("BRIEFRAIL__DATABASE__URL", &db.url)
            .env("RUST_LOG", "warn")
            .env("RUST_BACKTRACE", "1")
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || out.status.signal() == Some(libc_sigpipe()),
            "{args:?}: {:?}\n{stderr}",
            out.status
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
    }
}

/// SIGPIPE's number on Linux (13), spelled here to keep libc out of the tests.
fn libc_sigpipe() -> i32 {
    13
}

/// `rail limits` sets what is given, keeps the rest, `none` lifts one; `rail status` shows a
/// builder's hold until `rail release-builder`; a bad limit exits 2 naming it.
async fn the_rail_limits_from_the_shell(db: &TestDb) {
    let set = ok(&briefrail(
        &db.url,
        &[
            "rail",
            "limits",
            "--max-running",
            "8",
            "--starts-per-minute",
            "120",
        ],
    ));
    assert!(
        set.contains("max_running 8; starts_per_minute 120"),
        "{set}"
    );
    let lifted = ok(&briefrail(
        &db.url,
        &["rail", "limits", "--starts-per-minute", "none"],
    ));
    assert!(
        lifted.contains("max_running 8; starts_per_minute none"),
        "{lifted}"
    );
    let mut c = db.pool.get().await.unwrap();
    briefrail::ledger::limits::hold_builder(
        &mut c,
        std::time::Duration::from_secs(600),
        "429 from the model",
    )
    .await
    .unwrap();
    let status = ok(&briefrail(&db.url, &["rail", "status"]));
    assert!(
        status.contains("builder held for") && status.contains("429 from the model"),
        "{status}"
    );
    ok(&briefrail(&db.url, &["rail", "release-builder"]));
    assert!(ok(&briefrail(&db.url, &["rail", "status"])).contains("builder not held"));
    for (args, named) in [
        (vec!["rail", "limits", "--max-running", "0"], "at least 1"),
        (vec!["rail", "limits", "--max-running", "many"], "many"),
        (
            vec!["rail", "limits", "--max-running", "100001"],
            "max_running",
        ),
    ] {
        let out = briefrail(&db.url, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
}

/// `firm` and `rail`: an operator names and weighs a firm by its id, then pauses it by its
/// name; `firm list` shows it; a bulk request is background work; bad input is named.
#[tokio::test]
async fn an_operator_names_weighs_and_pauses_a_firm() {
    let db = TestDb::new(1).await.unwrap();
    let (firm, matter) = (Uuid::new_v4().to_string(), Uuid::new_v4().to_string());
    let m = ["--firm", firm.as_str(), "--matter", matter.as_str()];
    ok(&briefrail(
        &db.url,
        &[
            &["matter", "create"][..],
            &m,
            &["--title", "Acme v. Globex"],
        ]
        .concat(),
    ));
    ok(&briefrail(
        &db.url,
        &[
            "firm", "set", "--firm", &firm, "--name", "Acme LLP", "--weight", "3",
        ],
    ));
    ok(&briefrail(
        &db.url,
        &["firm", "pause", "--firm", "acme llp"],
    ));
    let list = ok(&briefrail(&db.url, &["firm", "list"]));
    let row = list
        .lines()
        .find(|l| l.contains(&firm))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        row.contains("Acme LLP") && row.contains("paused") && row.contains(" 3 "),
        "{list}"
    );
    assert!(list.starts_with("FIRM"), "a header row: {list}");
    let all = ok(&briefrail(
        &db.url,
        &["brief", "request", "--firm", &firm, "--all"],
    ));
    assert!(all.contains("(background)"), "{all}");
    let one = ok(&briefrail(
        &db.url,
        &[&["brief", "request"][..], &m].concat(),
    ));
    assert!(one.contains("interactive"), "{one}");
    for (args, named) in [
        (
            vec!["firm", "set", "--firm", firm.as_str(), "--weight", "0"],
            "out of range",
        ),
        (vec!["firm", "pause", "--firm", "Globex"], "Globex"),
        (
            [&["brief", "request"][..], &m, &["--class", "urgent"]].concat(),
            "urgent",
        ),
    ] {
        let out = briefrail(&db.url, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?}: {stderr}");
    }
    ok(&briefrail(&db.url, &["rail", "pause"]));
    assert!(ok(&briefrail(&db.url, &["rail", "status"])).contains("rail paused"));
    ok(&briefrail(&db.url, &["rail", "resume"]));

    // The limits toward the builder: set what is given, keep the rest, `none` lifts one.
    the_rail_limits_from_the_shell(&db).await;
}

/// A config file with a database nothing listens on, named so its error shows it was read.
fn unreachable_config(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("briefrail-cfg-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("briefrail.toml");
    std::fs::write(
        &path,
        format!("[database]\nurl = \"postgres://cfg_user:cfg-pw@127.0.0.1:1/{tag}\"\n"),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn the_config_file_is_given_by_briefrail_config_or_dash_c() {
    let firm = Uuid::new_v4().to_string();
    let status = ["status", "--firm", &firm, "--matter", &firm];
    let from_env = unreachable_config("from_the_env_file");
    let (code, stderr) =
        briefrail_env(&status, &[("BRIEFRAIL_CONFIG", from_env.to_str().unwrap())]);
    assert_eq!(code, Some(1), "{stderr}");
    says(
        &stderr,
        &[
            "database \"from_the_env_file\"",
            "127.0.0.1:1",
            "user \"cfg_user\"",
        ],
        "cfg-pw",
    );

    // `-c` before or after the subcommand; it wins over BRIEFRAIL_CONFIG.
    let short = unreachable_config("from_dash_c");
    for args in [
        [&["-c", short.to_str().unwrap()][..], &status].concat(),
        [&status[..], &["-c", short.to_str().unwrap()]].concat(),
    ] {
        let (code, stderr) =
            briefrail_env(&args, &[("BRIEFRAIL_CONFIG", from_env.to_str().unwrap())]);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        says(
            &stderr,
            &["database \"from_dash_c\"", "user \"cfg_user\""],
            "cfg-pw",
        );
    }

    // A BRIEFRAIL_CONFIG naming no file is refused like `--config` would be (exit 2).
    let (code, stderr) = briefrail_env(
        &status,
        &[("BRIEFRAIL_CONFIG", "/nonexistent/briefrail.toml")],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/briefrail.toml"), "{stderr}");

    let help = help_of(&["--help"]);
    assert!(
        help.contains("-c, --config <FILE>") && help.contains("BRIEFRAIL_CONFIG"),
        "{help}"
    );
}

/// `briefrail ARGS --help`'s text.
fn help_of(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_briefrail"))
        .args(args)
        .output()
        .expect("run briefrail");
    ok(&out)
}

/// The help of `flag` (e.g. `--firm`, `<ID>`) in a `--help` text: the rest of its line after
/// the flag and its value name, or the indented line below it. Empty when it has none.
fn help_for(help: &str, flag: &str) -> String {
    let lines: Vec<&str> = help.lines().collect();
    let i = lines
        .iter()
        .position(|l| {
            let t = l.trim_start();
            t.starts_with(flag) || t.split(", ").nth(1).is_some_and(|r| r.starts_with(flag))
        })
        .unwrap_or_else(|| panic!("{flag} not in:\n{help}"));
    let after = lines[i].trim_start();
    let after = after.split_once(flag).map_or("", |(_, r)| r).trim_start();
    // Skip the value name (`<UUID>`, `[ID]`).
    let after = match after.strip_prefix('<') {
        Some(r) => r.split_once('>').map_or("", |(_, r)| r),
        None => after,
    }
    .trim();
    if !after.is_empty() {
        return after.to_owned();
    }
    match lines.get(i + 1) {
        Some(next) if !next.trim().is_empty() && !next.trim_start().starts_with('-') => {
            next.trim().to_owned()
        }
        _ => String::new(),
    }
}

#[test]
fn every_option_of_the_operator_commands_has_help() {
    let cases: [(&[&str], &[&str]); 7] = [
        (&["matter", "create"], &["--firm", "--matter", "--title"]),
        (&["matter", "list"], &["--firm"]),
        (&["status"], &["--firm", "--matter"]),
        (
            &["document", "add"],
            &["--firm", "--matter", "--title", "--file", "--text"],
        ),
        (&["brief", "request"], &["--firm", "--matter", "--all"]),
        (&["dead-letters", "list"], &["--all", "--limit"]),
        (&["dead-letters", "replay"], &["<ID>"]),
    ];
    for (command, flags) in cases {
        let help = help_of(&[command, &["--help"]].concat());
        for flag in flags {
            assert!(
                !help_for(&help, flag).is_empty(),
                "{command:?} {flag} has no help:\n{help}"
            );
        }
    }
    let discard = help_of(&["dead-letters", "discard", "--help"]);
    assert!(!help_for(&discard, "<ID>").is_empty(), "{discard}");
}

#[test]
fn document_add_without_a_body_names_both_ways_to_give_one() {
    let firm = Uuid::new_v4().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_briefrail"))
        .args([
            "document", "add", "--firm", &firm, "--matter", &firm, "--title", "t",
        ])
        .output()
        .unwrap();
    let stderr = common::shell::fails(&out, 2);
    assert!(
        stderr.contains("--file") && stderr.contains("--text"),
        "{stderr}"
    );
}

#[tokio::test]
async fn matter_list_has_a_header_and_human_state_names() {
    let db = TestDb::new(1).await.unwrap();
    let (firm, matter) = (Uuid::new_v4().to_string(), Uuid::new_v4());
    let m = matter.to_string();
    ok(&briefrail(
        &db.url,
        &[
            "matter",
            "create",
            "--firm",
            &firm,
            "--matter",
            &m,
            "--title",
            "Acme v. Globex",
        ],
    ));
    // Out of retries: failed more times in a row than retry.max_attempts allows.
    {
        use diesel_async::RunQueryDsl;
        let mut c = db.pool.get().await.unwrap();
        diesel::sql_query(
            "INSERT INTO ops.matter_frame_jobs
                    (firm_id, matter_id, run_status, requested_generation, consecutive_failures)
             VALUES ($1, $2, 'failed', 1, 100)",
        )
        .bind::<diesel::sql_types::Uuid, _>(firm.parse::<Uuid>().unwrap())
        .bind::<diesel::sql_types::Uuid, _>(matter)
        .execute(&mut c)
        .await
        .unwrap();
    }
    let text = ok(&briefrail(&db.url, &["matter", "list", "--firm", &firm]));
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    for column in ["MATTER", "STATE", "REQUESTED", "LANDED", "TITLE"] {
        assert!(header.contains(column), "{column}: {text}");
    }
    let row = lines.next().unwrap();
    assert!(
        row.contains(&m) && row.contains("retries exhausted") && row.contains("Acme v. Globex"),
        "{text}"
    );
    // --json keeps the machine name.
    let json: serde_json::Value = serde_json::from_str(&ok(&briefrail(
        &db.url,
        &["matter", "list", "--firm", &firm, "--json"],
    )))
    .unwrap();
    assert_eq!(json[0]["state"], "retries_exhausted");
}

#[tokio::test]
async fn an_unreachable_broker_names_its_server_and_user_not_the_password() {
    let db = TestDb::new(1).await.unwrap();
    let mut env = run_env(&db.url);
    env.retain(|(k, _)| *k != "BRIEFRAIL__TRANSPORT__KIND");
    env.push(("BRIEFRAIL__TRANSPORT__KIND", "amqp".into()));
    env.push((
        "BRIEFRAIL__TRANSPORT__AMQP_URL",
        "amqp://guest:secretpw@127.0.0.1:1/%2f".into(),
    ));
    let (code, stderr) = briefrail_env(&["run"], &as_refs(&env));
    assert_eq!(code, Some(1), "{stderr}");
    let last = stderr.trim().lines().last().unwrap_or_default();
    for needle in ["broker", "127.0.0.1:1", "user \"guest\"", "refused"] {
        assert!(last.contains(needle), "{needle:?} missing from: {stderr}");
    }
    assert!(
        !stderr.contains("secretpw"),
        "the password leaked: {stderr}"
    );
}
