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

/// The statements a connection sends, as its instrumentation sees them (BEGIN and COMMIT
/// included).
fn statements_of(c: &mut AsyncPgConnection) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use diesel::connection::InstrumentationEvent;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let count = move |event: InstrumentationEvent<'_>| {
        if let InstrumentationEvent::StartQuery { query, .. } = event {
            log.lock().unwrap().push(query.to_string());
        }
    };
    c.set_instrumentation(count);
    seen
}

/// Counsel's wait starts when the fact's transaction does, so each common fact, called alone,
/// is one statement: no BEGIN, no read before the write, no COMMIT of its own. With the facts
/// written as a transaction of several statements, each call sent four or five.
#[tokio::test]
async fn each_common_fact_called_alone_is_one_statement() {
    let db = TestDb::new(1).await.unwrap();
    let firm = Uuid::new_v4();
    let matter = Uuid::new_v4();
    let mut c = db.connection().await.expect("a session");
    let seen = statements_of(&mut c);
    for fact in ["matter.created", "document.uploaded", "brief.requested"] {
        seen.lock().unwrap().clear();
        match fact {
            "matter.created" => facts::create_matter(&mut c, firm, matter, "One v. Statement")
                .await
                .map(|_| ()),
            "document.uploaded" => facts::add_document(&mut c, document(firm, matter))
                .await
                .map(|_| ()),
            _ => facts::request_brief(&mut c, firm, matter).await.map(|_| ()),
        }
        .unwrap_or_else(|e| panic!("{fact}: {e}"));
        let sent = seen.lock().unwrap().clone();
        assert_eq!(
            sent.len(),
            1,
            "{fact} sent {} statements: {sent:#?}",
            sent.len()
        );
    }
    let events: i64 = diesel::dsl::sql::<diesel::sql_types::BigInt>(
        "SELECT count(*) FROM ops.domain_event_outbox",
    )
    .get_result(&mut c)
    .await
    .unwrap();
    assert_eq!(events, 3, "each fact recorded its event");
}

#[derive(diesel::QueryableByName)]
struct Written {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    documents: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    events: i64,
}

async fn written(c: &mut AsyncPgConnection) -> (i64, i64) {
    let w: Written = diesel::sql_query(
        "SELECT (SELECT count(*) FROM record.documents) AS documents,
                (SELECT count(*) FROM ops.domain_event_outbox) AS events",
    )
    .get_result(c)
    .await
    .unwrap();
    (w.documents, w.events)
}

/// A fact the record refuses writes nothing, and says why: a matter the firm does not have, an
/// archived one, a matter id taken, a document id taken. Inside the caller's transaction, a
/// fact that rolls back with it leaves nothing either.
#[tokio::test]
async fn a_refused_fact_writes_nothing_and_says_why() {
    use briefrail::Error;
    let db = TestDb::new(1).await.unwrap();
    let (firm, live, gone) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let mut c = db.connection().await.unwrap();
    facts::create_matter(&mut c, firm, live, "Live v. Refused")
        .await
        .unwrap();
    facts::create_matter(&mut c, firm, gone, "Gone v. Refused")
        .await
        .unwrap();
    facts::archive_matter(&mut c, firm, gone).await.unwrap();
    let taken = document(firm, live);
    facts::add_document(&mut c, taken.clone()).await.unwrap();
    let before = written(&mut c).await;

    let unknown = facts::add_document(&mut c, document(firm, Uuid::new_v4())).await;
    assert!(
        matches!(&unknown, Err(Error::NotFound(m)) if m.contains("matter")),
        "{unknown:?}"
    );
    let other_firm = facts::request_brief(&mut c, Uuid::new_v4(), live).await;
    assert!(
        matches!(&other_firm, Err(Error::NotFound(_))),
        "{other_firm:?}"
    );
    let archived = facts::add_document(&mut c, document(firm, gone)).await;
    assert!(
        matches!(&archived, Err(Error::Conflict(m)) if m.contains("archived")),
        "{archived:?}"
    );
    let archived = facts::request_brief(&mut c, firm, gone).await;
    assert!(
        matches!(&archived, Err(Error::Conflict(m)) if m.contains("archived")),
        "{archived:?}"
    );
    let twice = facts::create_matter(&mut c, firm, live, "Live v. Again").await;
    assert!(
        matches!(&twice, Err(Error::InvalidInput(m)) if m.contains("already exists")),
        "{twice:?}"
    );
    let copy = facts::add_document(&mut c, taken).await;
    assert!(copy.is_err(), "a document id taken is refused: {copy:?}");
    assert_eq!(
        written(&mut c).await,
        before,
        "a refused fact wrote something"
    );

    let rolled_back = c
        .transaction(async |tx| {
            facts::add_document(tx, document(firm, live)).await?;
            facts::request_brief(tx, firm, live).await?;
            Err::<(), _>(Error::internal("the application changed its mind"))
        })
        .await;
    assert!(rolled_back.is_err());
    assert_eq!(
        written(&mut c).await,
        before,
        "a fact outlived its caller's rollback"
    );
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
