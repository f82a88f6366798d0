//! The `command` builder: runs `builder.command` with the build context as JSON on stdin and
//! takes the frame JSON from stdout. A non-zero exit or output that is not a JSON object fails
//! the build with (a bounded excerpt of) the program's stderr. The child is killed when the
//! build future is dropped: fenced, timed out or shut down.

use std::process::Stdio;

use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use tokio::io::AsyncWriteExt;

use super::{BuildContext, Builder};
use crate::error::{Error, Result};
use crate::ledger::Frame;

/// How much of stderr a failed run keeps.
const STDERR_EXCERPT: usize = 2000;

#[derive(Debug, Clone)]
pub struct CommandBuilder {
    argv: Vec<String>,
}

impl CommandBuilder {
    pub fn new(argv: Vec<String>) -> Self {
        Self { argv }
    }
}

impl Builder for CommandBuilder {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, Result<Frame>> {
        async move {
            let (program, args) = self.argv.split_first().ok_or_else(|| Error::Build {
                message: "builder.command is empty".into(),
                permanent: true,
            })?;
            let input = serde_json::to_vec(&ctx.to_json().await?)
                .map_err(|e| Error::internal_from("serialising the build context", e))?;
            let mut child = tokio::process::Command::new(program)
                .args(args)
                .env("BRIEFRAIL_TOKEN", ctx.token.to_string())
                .env("BRIEFRAIL_RUN_ID", ctx.run_id.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| Error::Build {
                    message: format!("cannot start {program}: {e}"),
                    permanent: false,
                })?;
            if let Some(mut stdin) = child.stdin.take() {
                // A program that does not read its stdin is allowed: ignore a broken pipe.
                let _ = stdin.write_all(&input).await;
            }
            let out = child.wait_with_output().await.map_err(|e| Error::Build {
                message: format!("{program}: {e}"),
                permanent: false,
            })?;
            let stderr = excerpt(&String::from_utf8_lossy(&out.stderr));
            if !out.status.success() {
                return Err(Error::Build {
                    message: format!("{program} exited with {}: {stderr}", out.status),
                    permanent: false,
                });
            }
            let body: serde_json::Value =
                serde_json::from_slice(&out.stdout).map_err(|e| Error::Build {
                    message: format!("{program} printed no JSON frame ({e}); stderr: {stderr}"),
                    permanent: false,
                })?;
            if !body.is_object() {
                return Err(Error::Build {
                    message: format!("{program} printed JSON that is not an object"),
                    permanent: false,
                });
            }
            Ok(Frame::new(body))
        }
        .boxed_local()
    }
}

pub(crate) fn excerpt(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() <= STDERR_EXCERPT {
        s.to_owned()
    } else {
        s.chars().take(STDERR_EXCERPT).collect::<String>() + "…"
    }
}
