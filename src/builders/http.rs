//! The `http` builder: POSTs the build context as JSON to `builder.url` and takes the frame
//! from a 2xx JSON response. Other statuses fail the build with the status and a bounded
//! excerpt of the body. Dropping the build future aborts the request (fenced, timed out,
//! shutting down).

use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;

use super::command::excerpt;
use super::{BuildContext, Builder};
use crate::error::{Error, Result};
use crate::ledger::Frame;
use crate::secret::SecretUrl;

/// Largest response body accepted as a frame.
const MAX_BODY: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct HttpBuilder {
    url: SecretUrl,
}

impl HttpBuilder {
    pub fn new(url: SecretUrl) -> Self {
        Self { url }
    }
}

impl Builder for HttpBuilder {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, Result<Frame>> {
        async move {
            let body = ctx.to_json().await?;
            // The build's own timeout (builder.timeout_seconds) bounds the request; awc's
            // default 5 s would cut a slow model panel short.
            let client = awc::Client::builder()
                .timeout(std::time::Duration::from_secs(24 * 3600))
                .finish();
            let mut resp = client
                .post(self.url.expose())
                .insert_header(("x-briefrail-token", ctx.token.to_string()))
                .insert_header(("x-briefrail-run-id", ctx.run_id.to_string()))
                .send_json(&body)
                .await
                .map_err(|e| Error::Build {
                    message: format!("POST {}: {e}", self.url),
                    permanent: false,
                })?;
            let status = resp.status();
            let bytes = resp
                .body()
                .limit(MAX_BODY)
                .await
                .map_err(|e| Error::Build {
                    message: format!("{} answered {status}; body: {e}", self.url),
                    permanent: false,
                })?;
            if !status.is_success() {
                return Err(Error::Build {
                    message: format!(
                        "{} answered {status}: {}",
                        self.url,
                        excerpt(&String::from_utf8_lossy(&bytes))
                    ),
                    permanent: false,
                });
            }
            let frame: serde_json::Value =
                serde_json::from_slice(&bytes).map_err(|e| Error::Build {
                    message: format!("{} answered {status} without a JSON frame: {e}", self.url),
                    permanent: false,
                })?;
            Ok(Frame::new(frame))
        }
        .boxed_local()
    }
}
