//! The export queue and the background task that empties it.
//!
//! Finished spans go into a bounded channel (`Queue::push`: never waits; a full queue drops
//! the span and counts it). One thread of its own, with its own single-threaded runtime, takes
//! them off in batches (full at [`MAX_BATCH`], or `otel.batch_delay_ms` after a batch's first
//! span) and POSTs each batch to the collector, one request at a time. A thread of its own
//! because awc's client is not `Send` and because an export must never share an arbiter with
//! builds or with the ledger's connections (a busy arbiter stalls every connection it drives).
//!
//! A collector that is away costs its batches, not the node: a failed request is counted and
//! warned about at most once a minute (with how many spans were lost meanwhile); dropped spans
//! likewise. [`OtelHandle::flush`] exports whatever is queued and waits for it: what a clean
//! shutdown calls last.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::otlp::{self, FinishedSpan, Resource};
use crate::config::OtelSettings;
use crate::error::{Error, Result};
use crate::secret::SecretUrl;

/// Spans per export request at most.
pub const MAX_BATCH: usize = 512;
/// At most one warning per this long about failed exports, and one about dropped spans.
pub const WARN_EVERY: Duration = Duration::from_secs(60);
/// The part of a collector's answer that is read (and then ignored).
const MAX_ANSWER: usize = 64 * 1024;

/// What goes down the channel to the export thread.
pub(crate) enum Command {
    Span(Box<FinishedSpan>),
    /// Export everything sent before this, then answer.
    Flush(oneshot::Sender<()>),
}

/// Counters of the exporter's life, shared by the layer, the thread and the handle.
#[derive(Debug, Default)]
struct Counters {
    exported: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
}

/// A snapshot of what the exporter did since it started.
#[cfg(feature = "testing")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExportStats {
    /// Spans the collector accepted (a 2xx answer).
    pub exported: u64,
    /// Spans dropped because the queue (`otel.queue_size`) was full.
    pub dropped: u64,
    /// Spans lost with a failed request (unreachable collector, timeout, non-2xx answer).
    pub failed: u64,
}

/// The sending side of the export queue: what the layer holds.
#[derive(Clone)]
pub(crate) struct Queue {
    tx: mpsc::Sender<Command>,
    counters: Arc<Counters>,
}

impl Queue {
    /// A queue of `capacity` spans and its receiving end.
    pub(crate) fn new(capacity: usize) -> (Self, mpsc::Receiver<Command>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            Self {
                tx,
                counters: Arc::default(),
            },
            rx,
        )
    }

    /// Hands a finished span to the exporter; drops it (counted) when the queue is full.
    /// Never waits: this runs on the thread that closed the span (a build's).
    pub(crate) fn push(&self, span: FinishedSpan) {
        if self.tx.try_send(Command::Span(Box::new(span))).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[cfg(feature = "testing")]
    pub(crate) fn stats(&self) -> ExportStats {
        ExportStats {
            exported: self.counters.exported.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
        }
    }
}

/// The application's handle on the exporter: flush at shutdown, read its counters.
#[derive(Clone)]
pub struct OtelHandle {
    queue: Queue,
    timeout: Duration,
    /// Where spans go, without credentials (for a log line).
    endpoint: String,
}

impl OtelHandle {
    /// Exports every span finished so far and waits for the collector's answer (or for the
    /// export timeout, twice: a request in flight, then this one). Returns whether the queue
    /// was emptied in time; it never fails otherwise (a failed export is a warning).
    pub async fn flush(&self) -> bool {
        let (done, answered) = oneshot::channel();
        let wait = async {
            self.queue.tx.send(Command::Flush(done)).await.ok()?;
            answered.await.ok()
        };
        matches!(
            tokio::time::timeout(self.timeout * 2 + Duration::from_secs(1), wait).await,
            Ok(Some(()))
        )
    }

    /// What the exporter did so far.
    #[cfg(feature = "testing")]
    pub fn stats(&self) -> ExportStats {
        self.queue.stats()
    }

    /// The URL spans are POSTed to, without credentials: safe to log.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

/// Where and how batches are sent.
struct Target {
    /// `{endpoint}/v1/traces`, without credentials.
    url: String,
    /// The same without its query (which might carry a key), as logs show it.
    shown: String,
    basic_auth: Option<(String, String)>,
}

impl Target {
    fn from_endpoint(endpoint: &SecretUrl) -> Result<Self> {
        let bad = |problem: String| {
            Error::from(crate::config::ConfigError {
                key: "otel.endpoint".into(),
                problem: crate::secret::redact_urls(&problem),
            })
        };
        let mut url = url::Url::parse(endpoint.expose().trim())
            .map_err(|e| bad(format!("{endpoint} is not a URL: {e}")))?;
        let basic_auth = (!url.username().is_empty()).then(|| {
            (
                percent_decode(url.username()),
                percent_decode(url.password().unwrap_or("")),
            )
        });
        url.set_username("")
            .and_then(|()| url.set_password(None))
            .map_err(|()| bad(format!("{endpoint} cannot carry credentials")))?;
        if !url.path().ends_with("/v1/traces") {
            let path = format!("{}/v1/traces", url.path().trim_end_matches('/'));
            url.set_path(&path);
        }
        let mut shown = url.clone();
        shown.set_query(None);
        Ok(Self {
            shown: shown.to_string(),
            url: url.to_string(),
            basic_auth,
        })
    }
}

/// `%XX` escapes of a URL's user or password decoded (anything malformed kept as it is).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Starts the export thread; returns the queue the layer feeds and the handle.
pub(crate) fn start(settings: &OtelSettings, resource: Resource) -> Result<(Queue, OtelHandle)> {
    let target = Target::from_endpoint(&settings.endpoint)?;
    let endpoint = target.shown.clone();
    let tls = Arc::new(crate::builders::http::tls_config(Vec::new())?);
    let (queue, rx) = Queue::new(settings.queue_size);
    let timeout = settings.timeout();
    let delay = Duration::from_millis(settings.batch_delay_ms);
    let counters = queue.counters.clone();
    std::thread::Builder::new()
        .name("briefrail-otel".into())
        .spawn(move || {
            let client = move || {
                awc::Client::builder()
                    .connector(
                        awc::Connector::new()
                            .rustls_0_23(tls)
                            .timeout(timeout.min(Duration::from_secs(5))),
                    )
                    .timeout(timeout)
                    .finish()
            };
            actix_rt::System::new().block_on(async move {
                let mut exporter = Exporter {
                    client: client(),
                    target,
                    resource,
                    counters,
                    failures: Rate::default(),
                    drops: Rate::default(),
                    failing: false,
                };
                exporter.run(rx, delay).await;
            });
        })
        .map_err(|source| Error::Io {
            what: "start the OTLP export thread".into(),
            source,
        })?;
    Ok((
        queue.clone(),
        OtelHandle {
            queue,
            timeout,
            endpoint,
        },
    ))
}

/// A warning's rate limit: what happened since the last warning, and when that was.
#[derive(Default)]
struct Rate {
    last: Option<Instant>,
    /// Count already reported (for drops) or lost since the last warning (for failures).
    seen: u64,
}

impl Rate {
    fn due(&self) -> bool {
        self.last.is_none_or(|t| t.elapsed() >= WARN_EVERY)
    }
}

struct Exporter {
    client: awc::Client,
    target: Target,
    resource: Resource,
    counters: Arc<Counters>,
    failures: Rate,
    drops: Rate,
    /// The last request failed: the next success says the collector is back.
    failing: bool,
}

impl Exporter {
    /// Batches until every sender is gone (the process ends first, in the binary).
    async fn run(&mut self, mut rx: mpsc::Receiver<Command>, delay: Duration) {
        let mut batch: Vec<FinishedSpan> = Vec::new();
        let mut deadline: Option<Instant> = None;
        loop {
            let command = match deadline {
                Some(d) => match tokio::time::timeout_at(d, rx.recv()).await {
                    Ok(c) => c,
                    Err(_elapsed) => {
                        self.export(std::mem::take(&mut batch)).await;
                        deadline = None;
                        continue;
                    }
                },
                None => rx.recv().await,
            };
            match command {
                Some(Command::Span(span)) => {
                    batch.push(*span);
                    deadline.get_or_insert_with(|| Instant::now() + delay);
                    if batch.len() >= MAX_BATCH {
                        self.export(std::mem::take(&mut batch)).await;
                        deadline = None;
                    }
                }
                Some(Command::Flush(done)) => {
                    self.export(std::mem::take(&mut batch)).await;
                    deadline = None;
                    self.report_drops();
                    let _ = done.send(());
                }
                None => {
                    self.export(std::mem::take(&mut batch)).await;
                    return;
                }
            }
            self.report_drops();
        }
    }

    async fn export(&mut self, batch: Vec<FinishedSpan>) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len() as u64;
        let body = match serde_json::to_vec(&otlp::encode(&self.resource, &batch)) {
            Ok(b) => b,
            Err(e) => return self.failed(n, &format!("cannot encode the spans: {e}")),
        };
        let mut request = self
            .client
            .post(&self.target.url)
            .insert_header(("content-type", "application/json"));
        if let Some((user, password)) = &self.target.basic_auth {
            request = request.basic_auth(user, password);
        }
        match request.send_body(body).await {
            Ok(mut answer) if answer.status().is_success() => {
                // Read the (small) answer so the connection can be reused.
                let _ = answer.body().limit(MAX_ANSWER).await;
                self.counters.exported.fetch_add(n, Ordering::Relaxed);
                if self.failing {
                    self.failing = false;
                    tracing::info!(endpoint = %self.target.shown, "the OTLP collector answers again");
                }
            }
            Ok(answer) => {
                let status = answer.status();
                self.failed(n, &format!("{} answered {status}", self.target.shown));
            }
            Err(e) => self.failed(n, &format!("POST {}: {e}", self.target.shown)),
        }
    }

    /// Counts a lost batch; warns at once the first time, then at most once a minute.
    fn failed(&mut self, n: u64, why: &str) {
        self.counters.failed.fetch_add(n, Ordering::Relaxed);
        self.failing = true;
        self.failures.seen += n;
        if self.failures.due() {
            tracing::warn!(error = %crate::secret::redact_urls(why), spans_lost = self.failures.seen,
                           "OTLP export failed; spans are lost until the collector answers (the node keeps serving; next warning in a minute at the earliest)");
            self.failures = Rate {
                last: Some(Instant::now()),
                seen: 0,
            };
        }
    }

    /// Warns about spans the full queue dropped, at most once a minute.
    fn report_drops(&mut self) {
        let dropped = self.counters.dropped.load(Ordering::Relaxed);
        if dropped > self.drops.seen && self.drops.due() {
            tracing::warn!(
                dropped = dropped - self.drops.seen,
                total = dropped,
                "OTLP export queue full (otel.queue_size): spans dropped"
            );
            self.drops = Rate {
                last: Some(Instant::now()),
                seen: dropped,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::otel::otlp::SpanStatus;

    fn span() -> FinishedSpan {
        FinishedSpan {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_span_id: None,
            name: "build".into(),
            start: SystemTime::now(),
            end: SystemTime::now(),
            attributes: vec![],
            events: vec![],
            links: vec![],
            status: SpanStatus::Unset,
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let (queue, mut rx) = Queue::new(2);
        for _ in 0..5 {
            queue.push(span());
        }
        assert_eq!(queue.stats().dropped, 3);
        let mut queued = 0;
        while rx.try_recv().is_ok() {
            queued += 1;
        }
        assert_eq!(queued, 2);
        drop(rx);
        queue.push(span());
        assert_eq!(queue.stats().dropped, 4, "a closed queue drops too");
    }

    #[test]
    fn the_endpoint_gets_the_traces_path_and_loses_its_credentials() {
        let t = Target::from_endpoint(&SecretUrl::new("http://jaeger:4318")).expect("valid");
        assert_eq!(t.url, "http://jaeger:4318/v1/traces");
        assert!(t.basic_auth.is_none());
        let t = Target::from_endpoint(&SecretUrl::new("https://ops:p%40ss+1@tempo/otlp/"))
            .expect("valid");
        assert_eq!(t.url, "https://tempo/otlp/v1/traces");
        assert_eq!(t.basic_auth, Some(("ops".into(), "p@ss+1".into())));
        assert!(!t.shown.contains("p%40ss"));
        let t = Target::from_endpoint(&SecretUrl::new("http://c:4318/v1/traces")).expect("valid");
        assert_eq!(t.url, "http://c:4318/v1/traces");
    }
}
