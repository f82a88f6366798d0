//! The `http` builder: POSTs the build context as JSON to `builder.url` and takes the frame
//! from a 2xx JSON response. A 429, or a 503 with `Retry-After`, says the endpoint is
//! overloaded (`super::backpressure`): the claim goes back without spending a retry. Other
//! statuses fail the build with the status and a bounded excerpt of the body. Dropping the build future aborts the request (fenced, timed out,
//! shutting down).
//!
//! `https://` URLs are spoken with rustls, trusting the system's certificate authorities and
//! those in `builder.ca_file` (an on-prem firm's own CA); the TLS settings are read once, at
//! start, so a bad CA file fails the node's start, not its first build. One client (and its
//! connection pool) is kept per actor thread and reused by every build: awc's client is not
//! `Send`, and builds run on the node's actor threads.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use awc::http::StatusCode;
use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::backpressure::{backpressure, parse_retry_after};
use super::command::excerpt;
use super::{BuildContext, Builder};
use crate::config::BuilderSettings;
use crate::error::{Error, Result};
use crate::ledger::Frame;
use crate::secret::SecretUrl;

/// Largest response body accepted as a frame.
const MAX_BODY: usize = 16 * 1024 * 1024;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The client of each `HttpBuilder` (by id) on this thread.
    static CLIENTS: RefCell<HashMap<u64, awc::Client>> = RefCell::new(HashMap::new());
}

pub struct HttpBuilder {
    id: u64,
    url: SecretUrl,
    tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for HttpBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBuilder")
            .field("url", &self.url)
            .finish()
    }
}

impl HttpBuilder {
    /// A builder for `url` trusting the system's certificate authorities and `extra_roots`.
    pub fn new(url: SecretUrl, extra_roots: Vec<CertificateDer<'static>>) -> Result<Self> {
        Ok(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            url,
            tls: Arc::new(tls_config(extra_roots)?),
        })
    }

    /// From `builder.url` and `builder.ca_file`.
    pub fn from_settings(s: &BuilderSettings) -> Result<Self> {
        let extra = if s.ca_file.is_empty() {
            Vec::new()
        } else {
            read_pem(&s.ca_file)?
        };
        Self::new(s.url.clone(), extra)
    }

    /// This thread's client, made on first use.
    fn client(&self) -> awc::Client {
        CLIENTS.with(|c| {
            c.borrow_mut()
                .entry(self.id)
                .or_insert_with(|| {
                    awc::Client::builder()
                        .connector(awc::Connector::new().rustls_0_23(self.tls.clone()))
                        // The build's own timeout (builder.timeout_seconds) bounds the request;
                        // awc's default 5 s would cut a slow model panel short.
                        .timeout(std::time::Duration::from_secs(24 * 3600))
                        .finish()
                })
                .clone()
        })
    }
}

/// Certificates of a PEM file (`builder.ca_file`).
fn read_pem(path: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| Error::InvalidInput(format!("builder.ca_file {path}: {e}")))?;
    if certs.is_empty() {
        return Err(Error::InvalidInput(format!(
            "builder.ca_file {path}: no certificate in it"
        )));
    }
    Ok(certs)
}

/// The TLS settings of an awc client: the system's roots plus `extra_roots` (also the OTLP
/// exporter's).
pub(crate) fn tls_config(
    extra_roots: Vec<CertificateDer<'static>>,
) -> Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    // A system without a CA bundle still works with builder.ca_file alone.
    let native = rustls_native_certs::load_native_certs();
    let (_added, _ignored) = roots.add_parsable_certificates(native.certs);
    for cert in extra_roots {
        roots
            .add(cert)
            .map_err(|e| Error::InvalidInput(format!("builder.ca_file: {e}")))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal_from("TLS protocol versions", e))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn failed(message: String) -> Error {
    Error::Build {
        message,
        permanent: false,
    }
}

impl Builder for HttpBuilder {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, Result<Frame>> {
        async move {
            let body = ctx.to_json().await?;
            let mut resp = self
                .client()
                .post(self.url.expose())
                .insert_header(("x-briefrail-token", ctx.token.to_string()))
                .insert_header(("x-briefrail-run-id", ctx.run_id.to_string()))
                .send_json(&body)
                .await
                .map_err(|e| failed(format!("POST {}: {e}", self.url)))?;
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get(awc::http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
            let bytes = resp
                .body()
                .limit(MAX_BODY)
                .await
                .map_err(|e| failed(format!("{} answered {status}; body: {e}", self.url)))?;
            let overloaded = status == StatusCode::TOO_MANY_REQUESTS
                || (status == StatusCode::SERVICE_UNAVAILABLE && retry_after.is_some());
            if overloaded {
                let text = String::from_utf8_lossy(&bytes);
                return Err(backpressure(
                    retry_after,
                    format!("{} answered {status}: {}", self.url, excerpt(&text)),
                ));
            }
            if !status.is_success() {
                let text = String::from_utf8_lossy(&bytes);
                return Err(failed(format!(
                    "{} answered {status}: {}",
                    self.url,
                    excerpt(&text)
                )));
            }
            let frame: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
                failed(format!(
                    "{} answered {status} without a JSON frame: {e}",
                    self.url
                ))
            })?;
            Ok(Frame::new(frame))
        }
        .boxed_local()
    }

    /// The record is posted to the builder's URL.
    fn reads_record(&self) -> bool {
        true
    }
}
