//! The console's reads and actions on the command line, as an operator runs them: `matter
//! list`, `matter retry`, `brief show`, `dead-letters list|replay|discard`, `nodes`, and
//! `status` of an unknown matter; real binary, real node, real ledger.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use crate::common::shell::{briefrail, fails, ok};
use briefrail::builders::brief::BriefBuilder;
use briefrail::config::{Settings, TransportKind};
use briefrail::ledger::matters::MatterState;
use briefrail::ledger::{dead_letters, facts};
use briefrail::node::Node;
use briefrail::secret::SecretUrl;
use briefrail::testing::TestDb;
use uuid::Uuid;

/// A node `shell-node` with the Brief builder and the embedded transport.
async fn shell_node(db: &TestDb) -> Node {
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.transport.kind = TransportKind::Postgres;
    s.trigger.debounce_ms = 5;
    s.relay.poll_ms = 50;
    s.node.id = "shell-node".into();
    Node::builder(Arc::new(s), Arc::new(BriefBuilder))
        .pool(db.pool.clone())
        .start()
        .await
        .unwrap()
}

/// Matters `a` ("Acme v. Globex", with two dated documents) and `o` ("Wayne v. Kord") of firm
/// `f`, recorded with the command line.
fn record_from_the_shell(url: &str, f: &str, a: &str, o: &str) {
    ok(&briefrail(
        url,
        &[
            "matter",
            "create",
            "--firm",
            f,
            "--matter",
            a,
            "--title",
            "Acme v. Globex",
        ],
    ));
    ok(&briefrail(
        url,
        &[
            "matter",
            "create",
            "--firm",
            f,
            "--matter",
            o,
            "--title",
            "Wayne v. Kord",
        ],
    ));
    for (title, dated) in [
        ("Notice of breach", "2024-03-20"),
        ("Purchase order", "2024-01-15"),
    ] {
        ok(&briefrail(
            url,
            &[
                "document",
                "add",
                "--firm",
                f,
                "--matter",
                a,
                "--title",
                title,
                "--dated",
                dated,
                "--text",
                "The valves arrived cracked. Acme wants a refund.",
            ],
        ));
    }
}

/// Waits (up to 20 s) until both matters are fresh.
async fn both_fresh(db: &TestDb, firm: Uuid, acme: Uuid, other: Uuid) {
    common::eventually(Duration::from_secs(20), "both Briefs", || async {
        let mut c = db.pool.get().await.unwrap();
        let mut fresh = 0;
        for m in [acme, other] {
            if briefrail::ledger::matters::state_of(&mut c, firm, m, 5)
                .await
                .unwrap()
                == Some(MatterState::Fresh)
            {
                fresh += 1;
            }
        }
        (fresh == 2).then_some(())
    })
    .await;
}

/// `matter list`: by title, by state, as JSON; an invalid state names the valid ones.
fn assert_matter_list(url: &str, f: &str, a: &str, o: &str) {
    let all = ok(&briefrail(url, &["matter", "list", "--firm", f]));
    assert!(
        all.contains("Acme v. Globex") && all.contains("Wayne v. Kord") && all.contains("fresh"),
        "{all}"
    );
    let acme_only = ok(&briefrail(
        url,
        &["matter", "list", "--firm", f, "--query", "GLOBEX"],
    ));
    assert!(
        acme_only.contains(a) && !acme_only.contains(o),
        "{acme_only}"
    );
    let none = ok(&briefrail(
        url,
        &["matter", "list", "--firm", f, "--state", "running"],
    ));
    assert!(none.contains("no matter matches"), "{none}");
    let json: serde_json::Value = serde_json::from_str(&ok(&briefrail(
        url,
        &["matter", "list", "--firm", f, "--json"],
    )))
    .unwrap();
    assert_eq!(json.as_array().unwrap().len(), 2);
    assert_eq!(json[0]["state"], "fresh");
    let bad = fails(
        &briefrail(url, &["matter", "list", "--firm", f, "--state", "stuck"]),
        2,
    );
    assert!(
        bad.contains("fresh, owed, unserved, running, failed, retries_exhausted, archived"),
        "{bad}"
    );
}

/// `brief show`: the Brief for a person (chronology in date order), or its JSON.
fn assert_brief_show(url: &str, f: &str, a: &str) {
    let brief = ok(&briefrail(
        url,
        &["brief", "show", "--firm", f, "--matter", a],
    ));
    assert!(
        brief.contains("Parties: Acme; Globex") || brief.contains("parties: Acme; Globex"),
        "{brief}"
    );
    let (po, nb) = (
        brief.find("Purchase order").unwrap(),
        brief.find("Notice of breach").unwrap(),
    );
    assert!(po < nb, "{brief}");
    let body: serde_json::Value = serde_json::from_str(&ok(&briefrail(
        url,
        &["brief", "show", "--firm", f, "--matter", a, "--json"],
    )))
    .unwrap();
    assert_eq!(body["kind"], "brief");
    assert_eq!(body["chronology"].as_array().unwrap().len(), 2);
}

/// `dead-letters`: listed, replayed (refused again: stays), discarded; an unknown one is not
/// found.
async fn assert_dead_letters_from_the_shell(db: &TestDb, url: &str) {
    let id = {
        let mut c = db.pool.get().await.unwrap();
        dead_letters::record(
            &mut c,
            &dead_letters::Refusal {
                consumer: briefrail::ledger::inbox::BRIEF_RAIL,
                event_id: None,
                routing_key: "document.uploaded",
                body: b"{not json",
                traceparent: None,
                reason: "not a nudge: expected ident",
                node_id: "amqp-node",
            },
        )
        .await
        .unwrap()
        .to_string()
    };
    let list = ok(&briefrail(url, &["dead-letters", "list"]));
    assert!(list.contains(&id) && list.contains("not a nudge"), "{list}");
    let again = ok(&briefrail(url, &["dead-letters", "replay", &id]));
    assert!(
        again.contains("refused again") && again.contains("stays open"),
        "{again}"
    );
    ok(&briefrail(url, &["dead-letters", "discard", &id]));
    assert!(ok(&briefrail(url, &["dead-letters", "list"])).contains("no dead letters"));
    assert!(ok(&briefrail(url, &["dead-letters", "list", "--all"])).contains("[discarded]"));
    let err = fails(
        &briefrail(
            url,
            &["dead-letters", "discard", &Uuid::new_v4().to_string()],
        ),
        2,
    );
    assert!(err.contains("not found"), "{err}");
}

#[actix_rt::test]
async fn an_operator_lists_reads_retries_and_handles_dead_letters_from_the_shell() {
    let db = TestDb::new(6).await.unwrap();
    let node = shell_node(&db).await;
    let url = db.url.clone();
    let firm = Uuid::new_v4();
    let (acme, other) = (Uuid::new_v4(), Uuid::new_v4());
    let (f, a, o) = (firm.to_string(), acme.to_string(), other.to_string());
    record_from_the_shell(&url, &f, &a, &o);
    both_fresh(&db, firm, acme, other).await;

    // matter list: by title, by state; an invalid state names the valid ones.
    assert_matter_list(&url, &f, &a, &o);

    // brief show: the Brief for a person (chronology in date order), or its JSON.
    assert_brief_show(&url, &f, &a);

    // Unknown matters exit 2, for status as for every other command.
    let ghost = Uuid::new_v4().to_string();
    for args in [
        vec!["status", "--firm", &f, "--matter", &ghost],
        vec!["brief", "show", "--firm", &f, "--matter", &ghost],
        vec!["matter", "retry", "--firm", &f, "--matter", &ghost],
    ] {
        let err = fails(&briefrail(&url, &args), 2);
        assert!(
            err.contains("not found") && err.contains(&ghost),
            "{args:?}: {err}"
        );
    }
    // Retry of a fresh matter: refused (exit 1, a conflict), saying why.
    let err = fails(
        &briefrail(&url, &["matter", "retry", "--firm", &f, "--matter", &a]),
        1,
    );
    assert!(err.contains("nothing to retry"), "{err}");
    // A matter out of retries: status says so and what to do; retry restarts it.
    {
        use diesel_async::RunQueryDsl;
        let mut c = db.pool.get().await.unwrap();
        diesel::sql_query(
            "UPDATE ops.matter_frame_jobs SET run_status = 'failed', consecutive_failures = 5,
                    requested_generation = requested_generation + 1 WHERE matter_id = $1",
        )
        .bind::<diesel::sql_types::Uuid, _>(other)
        .execute(&mut c)
        .await
        .unwrap();
    }
    let st = ok(&briefrail(&url, &["status", "--firm", &f, "--matter", &o]));
    assert!(
        st.contains("state: retries exhausted") && st.contains("briefrail matter retry"),
        "{st}"
    );
    let retried = ok(&briefrail(
        &url,
        &["matter", "retry", "--firm", &f, "--matter", &o],
    ));
    assert!(retried.contains("retry recorded"), "{retried}");
    common::eventually(
        Duration::from_secs(20),
        "the retried matter fresh",
        || async {
            let mut c = db.pool.get().await.unwrap();
            (briefrail::ledger::matters::state_of(&mut c, firm, other, 5)
                .await
                .unwrap()
                == Some(MatterState::Fresh))
            .then_some(())
        },
    )
    .await;

    // dead-letters: listed, replayed (refused again: stays), discarded.
    assert_dead_letters_from_the_shell(&db, &url).await;

    // nodes: this node alive, then gone once it stopped.
    let nodes = ok(&briefrail(&url, &["nodes"]));
    assert!(
        nodes.contains("shell-node") && nodes.contains("alive"),
        "{nodes}"
    );
    node.shutdown_within(Duration::from_secs(2)).await;
    let nodes: serde_json::Value =
        serde_json::from_str(&ok(&briefrail(&url, &["nodes", "--json"]))).unwrap();
    assert_eq!(nodes[0]["node_id"], "shell-node");
    assert_eq!(nodes[0]["alive"], false);
    assert!(nodes[0]["stopped_at"].is_string());
    // The records are untouched by all of it.
    let mut c = db.pool.get().await.unwrap();
    assert!(facts::matter(&mut c, firm, acme).await.unwrap().is_some());
}

#[actix_rt::test]
async fn a_matter_out_of_retries_says_so_in_the_log_with_what_to_do() {
    let db = TestDb::new(4).await.unwrap();
    let dir = common::scratch_dir("exhausted");
    let failing = dir.join("fail.sh");
    std::fs::write(
        &failing,
        "#!/bin/sh\ncat >/dev/null\necho 'model panel down' >&2\nexit 3\n",
    )
    .unwrap();
    let command = format!("/bin/sh {}", failing.display());
    let mut node = common::spawn_node(
        &db,
        &dir,
        "exhausting-node",
        &[
            ("BRIEFRAIL__BUILDER__COMMAND", command.as_str()),
            ("BRIEFRAIL__RETRY__MAX_ATTEMPTS", "2"),
            ("BRIEFRAIL__RETRY__BACKOFF_BASE_SECONDS", "0.05"),
            ("BRIEFRAIL__RETRY__BACKOFF_MAX_SECONDS", "0.1"),
        ],
    );
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    {
        let mut c = db.pool.get().await.unwrap();
        facts::create_matter(&mut c, firm, matter, "Doomed v. Retry")
            .await
            .unwrap();
    }
    let line = common::eventually(
        Duration::from_secs(30),
        "the retries-exhausted warning",
        || {
            let text = node.log_text();
            async move {
                text.lines()
                    .find(|l| l.contains("retries exhausted") && l.contains(&matter.to_string()))
                    .map(str::to_owned)
            }
        },
    )
    .await;
    assert!(
        line.contains("briefrail matter retry --firm") && line.contains("WARN"),
        "{line}"
    );
    let st = ok(&briefrail(
        &db.url,
        &[
            "status",
            "--firm",
            &firm.to_string(),
            "--matter",
            &matter.to_string(),
            "--json",
        ],
    ));
    let st: serde_json::Value = serde_json::from_str(&st).unwrap();
    // The node's retry.max_attempts is 2; this reader's default is 5, and says "failed": the
    // judgement of a reader is its own settings', stated in docs/configuration.md.
    assert!(
        st["state"] == "failed" || st["state"] == "retries_exhausted",
        "{st}"
    );
    assert_eq!(st["job"]["consecutive_failures"], 2);
    node.signal("-TERM");
    node.wait_exit(Duration::from_secs(10));
}
