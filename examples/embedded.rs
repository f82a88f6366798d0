//! A monolith embedding briefrail as a library.
//!
//! The application has its own table (`app_brief_index`), its own builder (a one-line summary
//! instead of a full Brief), its own transaction that records a fact through briefrail's
//! outbox, and its own write inside the fenced commit: the index row lands only if the token is
//! current, in the same transaction as the frame.
//!
//! Run it against the local Postgres (it creates the database `briefrail_embedded`):
//!
//! ```sh
//! cargo run --example embedded
//! ```

use std::sync::Arc;
use std::time::Duration;

use briefrail::config::{Settings, TransportKind};
use briefrail::{
    BuildContext, Builder, EventName, ExtraWrites, Frame, NewEvent, Node, SecretUrl, record_event,
};
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use uuid::Uuid;

/// The application's builder: reads the record through the context, returns a frame and an
/// extra write that briefrail runs inside the fenced commit.
struct SummaryBuilder;

impl Builder for SummaryBuilder {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, briefrail::Result<Frame>> {
        async move {
            let (matter, documents) = ctx.record().await?;
            let title = matter.map(|m| m.title).unwrap_or_default();
            let summary = format!("{title}: {} document(s)", documents.len());
            let extra: ExtraWrites = Box::new(move |conn, claim| {
                let summary = summary.clone();
                Box::pin(async move {
                    diesel::sql_query(
                        "INSERT INTO app_brief_index (matter_id, token, summary) VALUES ($1, $2, $3)
                         ON CONFLICT (matter_id) DO UPDATE SET token = EXCLUDED.token, summary = EXCLUDED.summary",
                    )
                    .bind::<diesel::sql_types::Uuid, _>(claim.matter_id)
                    .bind::<diesel::sql_types::BigInt, _>(claim.token)
                    .bind::<diesel::sql_types::Text, _>(summary)
                    .execute(conn)
                    .await?;
                    Ok(())
                })
            });
            Ok(Frame::new(serde_json::json!({ "summary": format!("{title}: {} document(s)", documents.len()) })).with_extra(extra))
        }
        .boxed_local()
    }
}

#[actix_rt::main]
async fn main() -> briefrail::Result<()> {
    // The application's settings for briefrail: its database, no broker (nudges ride on
    // Postgres LISTEN/NOTIFY), a short debounce.
    let mut settings = Settings::defaults();
    let url = briefrail::with_database(settings.database.url.expose(), "briefrail_embedded")?;
    briefrail::create_database_if_missing(&url).await?;
    briefrail::migrate(&url).await?;
    settings.database.url = SecretUrl::new(url.clone());
    settings.transport.kind = TransportKind::Postgres;
    settings.trigger.debounce_ms = 50;

    // briefrail's whole start-up: a node with the application's builder and its transport.
    let node = Node::builder(Arc::new(settings), Arc::new(SummaryBuilder))
        .start()
        .await?;
    let pool = node.pool().clone();

    // The application's own schema.
    pool.get()
        .await?
        .batch_execute("CREATE TABLE IF NOT EXISTS app_brief_index (matter_id uuid PRIMARY KEY, token bigint NOT NULL, summary text NOT NULL)")
        .await?;

    // The application's own transaction: its write and briefrail's outbox row commit together.
    let (firm, matter) = (Uuid::new_v4(), Uuid::new_v4());
    let mut conn = pool.get().await?;
    briefrail::create_matter(&mut conn, firm, matter, "Initech v. Chotchkie's").await?;
    let event = NewEvent::new(firm, matter, EventName::BRIEF_REQUESTED)?;
    conn.transaction(async move |tx| {
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS app_audit (at timestamptz DEFAULT now(), what text)",
        )
        .await?;
        diesel::sql_query(
            "INSERT INTO app_audit (what) VALUES ('counsel asked for a fresh Brief')",
        )
        .execute(tx)
        .await?;
        record_event(tx, &event).await?;
        Ok::<_, briefrail::Error>(())
    })
    .await?;

    // Wait until the frame (and, with it, the application's index row) has landed.
    for _ in 0..200 {
        if let Some(job) = briefrail::job(&mut conn, firm, matter).await?
            && !job.unserved()
            && job.landed_generation > 0
        {
            #[derive(diesel::QueryableByName)]
            struct Row {
                #[diesel(sql_type = diesel::sql_types::Text)]
                summary: String,
                #[diesel(sql_type = diesel::sql_types::BigInt)]
                token: i64,
            }
            let row: Row = diesel::sql_query(
                "SELECT summary, token FROM app_brief_index WHERE matter_id = $1",
            )
            .bind::<diesel::sql_types::Uuid, _>(matter)
            .get_result(&mut conn)
            .await?;
            println!(
                "landed token {} with the application's index row: {:?} (token {})",
                job.landed_generation, row.summary, row.token
            );
            node.shutdown().await;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(briefrail::Error::internal(
        "the Brief did not land within 10 s",
    ))
}
