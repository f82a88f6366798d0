//! Which commits wait for the disk (`docs/protocol.md` "What waits for the disk"): a claim and
//! a frame's commit always do, since a token handed out must never be handed out again after a
//! crash; the embedded transport's drain, the relay's lease and mark, and the broker
//! consumer's apply do not, since a crash that loses one loses all of it and what it wrote is
//! done again. Each transition is run inside a transaction of the test's, whose
//! `synchronous_commit` is then read before it commits. Against a real Postgres, one database
//! per test.

use crate::common;

use std::time::Duration;

use briefrail::ledger::inbox::{self, BRIEF_RAIL};
use briefrail::ledger::transitions as t;
use briefrail::ledger::{facts, outbox};
use briefrail::testing::TestDb;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

#[derive(diesel::QueryableByName)]
struct Setting {
    #[diesel(sql_type = diesel::sql_types::Text)]
    value: String,
}

/// `synchronous_commit` as the transaction of `c` stands now.
async fn setting(c: &mut AsyncPgConnection) -> String {
    let s: Setting = diesel::sql_query("SELECT current_setting('synchronous_commit') AS value")
        .get_result(c)
        .await
        .expect("read synchronous_commit");
    s.value
}

/// `synchronous_commit` as a transaction stands after `$step` ran inside it: on a new session
/// of `$db`, in a transaction that is never committed (the library's own transactions become
/// savepoints in it), so each step sees what the test committed before it and nothing of the
/// other steps.
macro_rules! flush_after {
    ($db:expr, |$tx:ident| $step:expr) => {{
        let mut $tx = $db.connection().await.expect("a session");
        $tx.begin_test_transaction().await.expect("begin");
        $step;
        setting(&mut $tx).await
    }};
}

/// Every transition that hands out a token waits for the disk; every one whose work is redone
/// when a crash loses it does not (and leaves its connection's setting as it found it once its
/// transaction ends). A frame's commit is held to it by
/// [`no_other_transition_turns_the_flush_off`]: no live function but the three redone ones
/// names the setting.
#[tokio::test]
async fn claims_and_commits_wait_for_the_disk_and_redone_work_does_not() {
    let db = TestDb::new(2).await.unwrap();
    let mut c = db.pool.get().await.unwrap();
    let firm = Uuid::new_v4();
    let matters: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    let mut ids = Vec::new();
    for m in &matters {
        ids.push(
            facts::create_matter(&mut c, firm, *m, "Flush v. Crash")
                .await
                .unwrap(),
        );
    }
    let req = |m: Uuid| common::claim_request("durability", firm, m);
    let events = outbox::events(&mut c, &ids).await.unwrap();
    let wires: Vec<_> = events.iter().map(|e| e.envelope()).collect();

    // What waits.
    let claimed = flush_after!(db, |tx| t::claim(&mut tx, &req(matters[0]))
        .await
        .unwrap()
        .expect("claimed"));
    assert_eq!(claimed, "on", "a claim waits for the disk");
    let batch = flush_after!(db, |tx| {
        let won = t::claim_batch(&mut tx, &[req(matters[1]), req(matters[2])])
            .await
            .unwrap();
        assert!(won.iter().all(Option::is_some), "{won:?}");
    });
    assert_eq!(batch, "on", "a claim batch waits for the disk");
    let replayed = flush_after!(db, |tx| inbox::apply_batch(&mut tx, BRIEF_RAIL, &wires)
        .await
        .unwrap());
    assert_eq!(
        replayed, "on",
        "the trigger outside the consumer (a dead letter's replay, which an operator is told \
         has landed) waits for the disk"
    );

    // What is redone if lost.
    let leased = flush_after!(db, |tx| {
        let rows = outbox::lease_unpublished(&mut tx, 10, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(rows.len(), ids.len(), "the matters' events are publishable");
    });
    assert_eq!(leased, "off", "the relay's lease is redone if lost");
    let marked = flush_after!(db, |tx| outbox::mark_published(&mut tx, &ids)
        .await
        .unwrap());
    assert_eq!(marked, "off", "the relay's mark is redone if lost");
    let delivered = flush_after!(db, |tx| inbox::apply_delivered(&mut tx, BRIEF_RAIL, &wires)
        .await
        .unwrap());
    assert_eq!(delivered, "off", "the consumer's apply is redone if lost");
    let drained = flush_after!(db, |tx| {
        let rows = inbox::drain_outbox(&mut tx, BRIEF_RAIL, 100).await.unwrap();
        assert_eq!(rows.len(), ids.len(), "the drain took every event");
    });
    assert_eq!(
        drained, "off",
        "the embedded transport's drain is redone if lost"
    );

    // The setting ends with its transaction: a session that drained waits again after it.
    let rows = inbox::drain_outbox(&mut c, BRIEF_RAIL, 100).await.unwrap();
    assert_eq!(
        rows.len(),
        ids.len(),
        "the drain, in a transaction of its own"
    );
    assert_eq!(
        setting(&mut c).await,
        "on",
        "the drain's session waits again"
    );
}

/// Only the four redone transitions' live SQL turns the flush off: a claim or a commit that
/// did (a copied line) could hand out a token a crash then hands out again.
#[test]
fn no_other_transition_turns_the_flush_off() {
    let live = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ledger/live");
    let mut off: Vec<String> = std::fs::read_dir(&live)
        .unwrap_or_else(|e| panic!("{}: {e}", live.display()))
        .map(|e| e.expect("a live file").path())
        .filter(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
                .contains("synchronous_commit")
        })
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    off.sort();
    assert_eq!(
        off,
        [
            "consume_events",
            "drain_outbox",
            "lease_events",
            "mark_published"
        ]
    );
}

/// The mutation controls (`tests/common/mutations.rs`) whose killers are in this module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_bug_fails_a_guarantee_test() {
    common::mutations::assert_caught(module_path!()).await;
}
