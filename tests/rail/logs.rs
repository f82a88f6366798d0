//! What `briefrail run` writes to its log, as users run it (the release defaults: JSON at
//! info level): each line carries its own span chain and no other delivery's, and a served
//! matter costs a bounded number of bytes however many matters came before it. A span that
//! leaked across deliveries made every line longer than the one before (20-80 KB at a few
//! thousand matters); these tests fail on that.

use std::time::Duration;

use crate::common::{self, BrokerScope, eventually, scratch_dir, spawn_node};
use briefrail::ledger::facts::{self, NewDocument};
use briefrail::testing::TestDb;

use uuid::Uuid;

/// At info level a served matter may cost this many bytes of log (issue 17's budget).
const BYTES_PER_MATTER: usize = 2048;

/// The spans a line may carry, innermost last: none, or one of the rail's own spans.
fn check_chain(line: &serde_json::Value, raw: &str) {
    let spans = line
        .get("spans")
        .and_then(|s| s.as_array())
        .cloned()
        .unwrap_or_default();
    let names: Vec<&str> = spans
        .iter()
        .filter_map(|s| s.get("name").and_then(|n| n.as_str()))
        .collect();
    assert!(
        line.get("span").is_none(),
        "the current span is written twice (`span` and the last of `spans`): {}",
        &raw[..raw.len().min(400)]
    );
    assert!(
        names.len() <= 1,
        "a log line carries a chain of {} spans ({:?}...); each line must carry only its own: {}",
        names.len(),
        &names[..names.len().min(5)],
        &raw[..raw.len().min(400)]
    );
}

/// `n` matters with one document each, recorded while no node runs, then one node with the
/// brief builder and JSON logs at info serves them all over `transport`.
async fn serve_and_read_the_log(transport: &str, n: usize) -> (String, usize) {
    let db = TestDb::new(4).await.unwrap();
    let broker = BrokerScope::new();
    let dir = scratch_dir("logs");
    let firm = Uuid::new_v4();
    {
        let mut c = db.pool.get().await.unwrap();
        for i in 0..n {
            let m = Uuid::new_v4();
            facts::create_matter(&mut c, firm, m, &format!("Log {i} v. Size"))
                .await
                .unwrap();
            facts::add_document(
                &mut c,
                NewDocument {
                    document_id: Uuid::new_v4(),
                    firm_id: firm,
                    matter_id: m,
                    title: "Deposition".into(),
                    dated: None,
                    body: "The witness saw the truck. It was red.".into(),
                },
            )
            .await
            .unwrap();
        }
    }
    let node = spawn_node(
        &db,
        &dir,
        "logs-1",
        &[
            ("BRIEFRAIL__TRANSPORT__KIND", transport),
            ("BRIEFRAIL__TRANSPORT__PREFIX", &broker.prefix),
            ("BRIEFRAIL__BUILDER__KIND", "brief"),
            ("BRIEFRAIL__BUILDERS__CONCURRENCY", "8"),
            ("BRIEFRAIL__DATABASE__POOL_SIZE", "16"),
            ("BRIEFRAIL__LOG__FORMAT", "json"),
            ("BRIEFRAIL__LOG__LEVEL", "info"),
        ],
    );
    eventually(Duration::from_secs(120), "every matter served", || async {
        (common::count(
            &mut db.pool.get().await.unwrap(),
            &format!(
                "SELECT count(DISTINCT matter_id) AS n FROM ops.matter_frames WHERE firm_id = '{firm}'"
            ),
        )
        .await
            == n as i64).then_some(())
    })
    .await;
    node.signal("-TERM");
    let mut node = node;
    node.wait_exit(Duration::from_secs(30));
    let text = node.log_text();
    let _ = std::fs::remove_dir_all(&dir);
    (text, n)
}

fn assert_lines(text: &str, n: usize, transport: &str) {
    let mut lines = 0;
    for raw in text.lines() {
        let line: serde_json::Value = serde_json::from_str(raw)
            .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {raw}"));
        check_chain(&line, raw);
        lines += 1;
    }
    assert!(lines > 0, "the node wrote no log");
    let per = text.len() / n;
    assert!(
        per <= BYTES_PER_MATTER,
        "{transport}: {per} bytes of log per served matter (budget {BYTES_PER_MATTER}); {} lines for {n} matters",
        lines
    );
}

#[actix_rt::test]
async fn over_amqp_each_log_line_carries_only_its_own_span_and_a_matter_costs_at_most_2_kib() {
    let (text, n) = serve_and_read_the_log("amqp", 400).await;
    assert_lines(&text, n, "amqp");
}

#[actix_rt::test]
async fn over_postgres_each_log_line_carries_only_its_own_span_and_a_matter_costs_at_most_2_kib() {
    let (text, n) = serve_and_read_the_log("postgres", 400).await;
    assert_lines(&text, n, "postgres");
}

#[actix_rt::test]
async fn pretty_logs_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    let db = TestDb::new(4).await.unwrap();
    let dir = scratch_dir("logs-pretty");
    let mut node = spawn_node(
        &db,
        &dir,
        "pretty-1",
        &[("BRIEFRAIL__LOG__FORMAT", "pretty")],
    );
    eventually(
        Duration::from_secs(30),
        "the node's first log lines",
        || async { (node.log_text().lines().count() >= 2).then_some(()) },
    )
    .await;
    node.signal("-TERM");
    node.wait_exit(Duration::from_secs(30));
    let text = node.log_text();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        !text.contains('\u{1b}'),
        "stderr is a file, yet the log carries ANSI escape codes: {:?}",
        &text[..text.len().min(600)]
    );
}
