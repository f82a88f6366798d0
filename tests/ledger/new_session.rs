//! What a fact's transaction runs on a new server session (`docs/protocol.md`, "What a new
//! session pays"): counsel's wait starts at the transaction's start, and a session's first call
//! of a PL/pgSQL function loads the language and compiles the function inside it. No fact of
//! the library calls one: the ledger clock's offset is read in SQL, and the outbox's
//! notification is sent by its trigger's condition. The notification still reaches a listener
//! when the fact commits. Against a real Postgres, one database per test.

use std::time::Duration;

use briefrail::ledger::facts::{self, NewDocument};
use briefrail::testing::TestDb;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use futures_util::StreamExt;
use uuid::Uuid;

#[derive(diesel::QueryableByName)]
struct Called {
    #[diesel(sql_type = diesel::sql_types::Text)]
    name: String,
}

/// The PL/pgSQL functions the transaction of `c` has called so far (`track_functions = 'pl'`
/// must be on for the session).
async fn plpgsql_called(c: &mut AsyncPgConnection) -> Vec<String> {
    diesel::sql_query(
        "SELECT p.oid::regproc::text AS name
           FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
          WHERE l.lanname = 'plpgsql' AND pg_stat_get_xact_function_calls(p.oid) > 0",
    )
    .load::<Called>(c)
    .await
    .expect("read the transaction's function calls")
    .into_iter()
    .map(|c| c.name)
    .collect()
}

fn document(firm: Uuid, matter: Uuid) -> NewDocument {
    NewDocument {
        document_id: Uuid::new_v4(),
        firm_id: firm,
        matter_id: matter,
        title: "Deposition of the witness".into(),
        dated: None,
        body: "The witness saw the truck at noon.".into(),
    }
}

/// Each kind of fact, recorded on a new session in a transaction that is never committed,
/// calls no PL/pgSQL function. With the PL/pgSQL trigger function or clock offset back
/// (`outbox_notified_by_plpgsql`, `clock_offset_in_plpgsql`), the calls are named.
#[tokio::test]
async fn a_fact_on_a_new_session_runs_no_plpgsql() {
    let db = TestDb::new(1).await.unwrap();
    let firm = Uuid::new_v4();
    let served = Uuid::new_v4();
    let mut setup = db.pool.get().await.unwrap();
    facts::create_matter(&mut setup, firm, served, "Served v. Before")
        .await
        .unwrap();
    drop(setup);

    for fact in ["matter.created", "document.uploaded", "brief.requested"] {
        let mut c = db.connection().await.expect("a new session");
        c.batch_execute("SET track_functions = 'pl'").await.unwrap();
        c.begin_test_transaction().await.expect("begin");
        match fact {
            "matter.created" => {
                facts::create_matter(&mut c, firm, Uuid::new_v4(), "New v. Session")
                    .await
                    .map(|_| ())
            }
            "document.uploaded" => facts::add_document(&mut c, document(firm, served))
                .await
                .map(|_| ()),
            _ => facts::request_brief(&mut c, firm, served).await.map(|_| ()),
        }
        .unwrap_or_else(|e| panic!("{fact}: {e}"));
        let called = plpgsql_called(&mut c).await;
        assert!(
            called.is_empty(),
            "{fact} on a new session ran PL/pgSQL, which loads the language inside the wait: {called:?}"
        );
    }
}

/// An upload committed on a new session notifies the postgres transport's channel: the
/// trigger's condition sends it, at commit.
#[tokio::test]
async fn an_upload_on_a_new_session_notifies_at_commit() {
    let db = TestDb::new(1).await.unwrap();
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut setup = db.pool.get().await.unwrap();
    facts::create_matter(&mut setup, firm, matter, "Heard v. Unheard")
        .await
        .unwrap();
    drop(setup);
    let mut listener = db.connection().await.unwrap();
    listener
        .batch_execute(&format!(
            "LISTEN {}",
            briefrail::transport::postgres::CHANNEL
        ))
        .await
        .unwrap();
    let mut uploader = db.connection().await.unwrap();
    facts::add_document(&mut uploader, document(firm, matter))
        .await
        .unwrap();
    let mut heard = std::pin::pin!(listener.notifications_stream());
    let n = tokio::time::timeout(Duration::from_secs(5), heard.next())
        .await
        .expect("no notification within 5 s of the upload's commit")
        .expect("the listener's stream ended")
        .expect("a notification");
    assert_eq!(n.channel, briefrail::transport::postgres::CHANNEL);
}

/// The mutation controls (`tests/common/mutations.rs`) whose killers are in this module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_bug_fails_a_guarantee_test() {
    crate::common::mutations::assert_caught(module_path!()).await;
}
