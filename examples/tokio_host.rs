//! A tokio application (an axum or tonic service is the same) hosting a briefrail node, and
//! recording facts with a driver of its own instead of briefrail's.
//!
//! A node runs on an actix system: its actors live on single-threaded arbiters, so it is
//! started inside `actix_rt::System` on a thread of its own, and the application talks to it
//! through channels. The application records each fact in its own transaction, written in
//! plain SQL through tokio-postgres: its record row and briefrail's outbox row commit together
//! (docs/embedding.md gives the statement).
//!
//! Run it against the local Postgres (it creates the database `briefrail_tokio_host`; the
//! `BRIEFRAIL__…` environment variables apply, as for `briefrail run`):
//!
//! ```sh
//! cargo run --example tokio_host
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use briefrail::config::{Settings, TransportKind};
use briefrail::{BriefBuilder, Node, SecretUrl};
use tokio::sync::oneshot;
use tokio_postgres::NoTls;
use uuid::Uuid;

type AppResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The node's side: an actix system on its own thread, started, then stopped when the
/// application says so. `ready` carries the start's outcome back to the application.
fn host_node(
    settings: Settings,
    ready: oneshot::Sender<briefrail::Result<()>>,
    stop: oneshot::Receiver<()>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let node = match Node::builder(Arc::new(settings), Arc::new(BriefBuilder))
                .start()
                .await
            {
                Ok(node) => node,
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return;
                }
            };
            let _ = ready.send(Ok(()));
            // Dropped or sent: either way the application is done with the node.
            let _ = stop.await;
            node.shutdown().await;
        });
    })
}

/// One fact in the application's own transaction: its record row and the outbox row that
/// tells briefrail, both or neither. UUIDs travel as text, so no driver feature is needed.
async fn record(
    client: &mut tokio_postgres::Client,
    record_sql: &str,
    record_params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    firm: &str,
    matter: &str,
    event_name: &str,
    payload: &str,
) -> AppResult<()> {
    let tx = client.transaction().await?;
    tx.execute(record_sql, record_params).await?;
    tx.execute(
        "INSERT INTO ops.domain_event_outbox (event_id, firm_id, matter_id, event_name, payload)
         VALUES ($1::text::uuid, $2::text::uuid, $3::text::uuid, $4, $5::text::jsonb)",
        &[
            &Uuid::new_v4().to_string(),
            &firm,
            &matter,
            &event_name,
            &payload,
        ],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> AppResult<()> {
    let mut settings = Settings::load(None)?;
    let url = briefrail::with_database(settings.database.url.expose(), "briefrail_tokio_host")?;
    briefrail::create_database_if_missing(&url).await?;
    briefrail::migrate(&url).await?;
    settings.database.url = SecretUrl::new(url.clone());
    // No broker: nudges ride on Postgres LISTEN/NOTIFY, which the outbox row's trigger sends.
    settings.transport.kind = TransportKind::Postgres;

    let (ready_tx, ready_rx) = oneshot::channel();
    let (stop_tx, stop_rx) = oneshot::channel();
    let node = host_node(settings, ready_tx, stop_rx);
    ready_rx.await??;

    // The application's own connection, on its own driver.
    let (mut client, connection) = tokio_postgres::connect(&url, NoTls).await?;
    tokio::spawn(connection);

    let (firm, matter, document) = (
        Uuid::new_v4().to_string(),
        Uuid::new_v4().to_string(),
        Uuid::new_v4().to_string(),
    );
    record(
        &mut client,
        "INSERT INTO record.matters (firm_id, matter_id, title) VALUES ($1::text::uuid, $2::text::uuid, $3)",
        &[&firm, &matter, &"Initech v. Chotchkie's"],
        &firm,
        &matter,
        "matter.created",
        "{}",
    )
    .await?;
    record(
        &mut client,
        "INSERT INTO record.documents (document_id, firm_id, matter_id, title, body)
         VALUES ($1::text::uuid, $2::text::uuid, $3::text::uuid, $4, $5)",
        &[
            &document,
            &firm,
            &matter,
            &"Deposition of the witness",
            &"The witness saw the stapler taken at noon.",
        ],
        &firm,
        &matter,
        "document.uploaded",
        &format!(r#"{{"document_id": "{document}"}}"#),
    )
    .await?;

    // The Brief that reads the document: its newest frame names it among its sources.
    let deadline = Instant::now() + Duration::from_secs(20);
    let outcome = loop {
        let row = client
            .query_opt(
                "SELECT generation, body::text FROM ops.matter_frames
                  WHERE firm_id = $1::text::uuid AND matter_id = $2::text::uuid
                    AND body::text LIKE '%' || $3 || '%'
                  ORDER BY generation DESC LIMIT 1",
                &[&firm, &matter, &document],
            )
            .await?;
        if let Some(row) = row {
            let generation: i64 = row.get(0);
            println!("the Brief of generation {generation} reads the document {document}");
            break Ok(());
        }
        if Instant::now() > deadline {
            break Err("no Brief read the document within 20 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let _ = stop_tx.send(());
    node.join().map_err(|_| "the node's thread panicked")?;
    outcome
}
