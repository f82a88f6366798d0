//! The command line as an operator uses it: real binary, real database, exit codes.

use std::process::{Command, Output};

use briefrail::db::admin;
use briefrail::testing::{TestDb, server_url};
use uuid::Uuid;

fn briefrail(db_url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_briefrail"))
        .args(args)
        .env("BRIEFRAIL__DATABASE__URL", db_url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run briefrail")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

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

    // The newest migration's row gone: it is pending, and `--status` does not apply it.
    let newest = names.last().unwrap();
    let version: String = newest.split('_').next().unwrap().replace('-', "");
    let mut c = db.connection().await.unwrap();
    use diesel_async::SimpleAsyncConnection;
    c.batch_execute(&format!(
        "DELETE FROM __diesel_schema_migrations WHERE version = '{version}';
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
    assert!(
        stderr.contains(&format!("database {name} does not exist")),
        "{stderr}"
    );
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
