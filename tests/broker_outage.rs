//! RabbitMQ's app is stopped while events are written, then started again: every event is
//! published, consumed once in effect, and every matter served. This binary holds this one
//! test only, so it never runs beside the parallel suite (cargo runs test binaries one at a
//! time), and a guard restarts the broker's app even when the test fails.

mod common;

use briefrail::ledger::RunStatus;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use briefrail::builders::brief::BriefBuilder;
use briefrail::config::Settings;
use briefrail::ledger::{facts, reads};
use briefrail::node::Node;
use briefrail::secret::SecretUrl;
use briefrail::testing::TestDb;
use common::{BrokerScope, count, eventually};
use uuid::Uuid;

fn rabbitmqctl(args: &[&str]) -> bool {
    Command::new("rabbitmqctl")
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Starts the broker's app again when dropped, whatever happened.
struct BrokerRestorer;

impl Drop for BrokerRestorer {
    fn drop(&mut self) {
        rabbitmqctl(&["start_app"]);
        rabbitmqctl(&["await_startup"]);
    }
}

#[actix_rt::test]
async fn events_written_during_a_broker_outage_are_all_published_and_served() {
    let _restore = BrokerRestorer;
    assert!(
        rabbitmqctl(&["start_app"]),
        "rabbitmqctl must be able to control the broker"
    );
    let db = TestDb::new(16).await.unwrap();
    let scope = BrokerScope::new();
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.trigger.debounce_ms = 20;
    s.transport.prefix = scope.prefix.clone();
    s.relay.poll_ms = 100;
    s.reconcile.after_seconds = 5.0;
    let node = Node::builder(Arc::new(s), Arc::new(BriefBuilder))
        .pool(db.pool.clone())
        .start()
        .await
        .unwrap();

    assert!(rabbitmqctl(&["stop_app"]), "stop_app");
    let firm = Uuid::new_v4();
    let mut matters = Vec::new();
    let mut c = db.pool.get().await.unwrap();
    for i in 0..20 {
        let m = Uuid::new_v4();
        facts::create_matter(&mut c, firm, m, &format!("Matter {i} v. Outage"))
            .await
            .unwrap();
        for _ in 0..9 {
            facts::request_brief(&mut c, firm, m).await.unwrap();
        }
        matters.push(m);
    }
    assert_eq!(
        count(
            &mut db.pool.get().await.unwrap(),
            "SELECT count(*) AS n FROM ops.domain_event_outbox"
        )
        .await,
        200
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        count(
            &mut db.pool.get().await.unwrap(),
            "SELECT count(*) AS n FROM ops.domain_event_outbox WHERE published_at IS NOT NULL"
        )
        .await
            < 200,
        "the broker was down: not everything can have been published"
    );
    assert!(rabbitmqctl(&["start_app"]), "start_app");
    assert!(rabbitmqctl(&["await_startup"]));

    eventually(
        Duration::from_secs(90),
        "all 200 events published and consumed",
        || async {
            let published = count(
                &mut db.pool.get().await.unwrap(),
                "SELECT count(*) AS n FROM ops.domain_event_outbox WHERE published_at IS NOT NULL",
            )
            .await;
            let consumed = count(
                &mut db.pool.get().await.unwrap(),
                "SELECT count(*) AS n FROM ops.consumed_events",
            )
            .await;
            (published == 200 && consumed == 200).then_some(())
        },
    )
    .await;
    for m in &matters {
        eventually(Duration::from_secs(30), "every matter served", || async {
            let mut c = db.pool.get().await.unwrap();
            reads::job(&mut c, firm, *m)
                .await
                .unwrap()
                .filter(|j| !j.unserved() && j.run_status == RunStatus::Idle)
                .map(|_| ())
        })
        .await;
    }
    let errors = count(
        &mut db.pool.get().await.unwrap(),
        "SELECT count(*) AS n FROM ops.domain_event_outbox WHERE last_error IS NOT NULL",
    )
    .await;
    eprintln!(
        "{errors} events kept a publish error from the outage; all 200 published and consumed once"
    );
    node.shutdown_within(Duration::from_secs(1)).await;
}
