//! The `command` builder: runs `builder.command` with the build context as JSON on stdin and
//! takes the frame JSON from stdout. A non-zero exit or output that is not a JSON object fails
//! the build with (a bounded excerpt of) the program's stderr; exit code 75 says the model is
//! overloaded (`super::backpressure`): the claim goes back without spending a retry.
//!
//! * **Streams, never deadlocks.** stdin is written while stdout and stderr are read, so a
//!   program that writes as it reads (`cat`, any streaming tool) cannot fill its stdout pipe
//!   while the node is still blocked filling its stdin. A program that stops reading early (it
//!   exited, or needs no context) is not an error by itself: its exit status and output decide.
//! * **Bounded.** stdout is read up to [`MAX_STDOUT`]: more fails the build naming the limit
//!   (a frame is a Brief, not a dump). stderr is drained to its end, so the child never blocks
//!   on it, but only its first [`STDERR_KEPT`] bytes are kept for the error.
//! * **Nothing outlives the build.** The program runs in a process group of its own, so a
//!   wrapper script's children (the real model process) belong to the build too. When the build
//!   ends, however it ends (done, timed out, fenced, the node shutting down: the build's future
//!   is dropped), the whole group gets SIGTERM and, [`GROUP_GRACE`] later, SIGKILL: no work of
//!   a fenced build goes on beside its successor, and a node never runs more than
//!   `builders.concurrency` builds' processes.

use std::process::Stdio;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::backpressure::{EXIT_BACKPRESSURE, backpressure, wait_from_stderr};
use super::{BuildContext, Builder};
use crate::error::{Error, Result};
use crate::ledger::Frame;

/// How much of stderr a failed run's error quotes.
const STDERR_EXCERPT: usize = 2000;
/// How much of stderr is kept while it is drained.
pub const STDERR_KEPT: usize = 64 * 1024;
/// The most stdout a build may print: its frame.
pub const MAX_STDOUT: usize = 16 * 1024 * 1024;
/// Between SIGTERM to a finished build's process group and SIGKILL: time for a model client to
/// close its connections and remove its temporary files.
pub const GROUP_GRACE: Duration = Duration::from_secs(2);

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
            let failed = |message: String| Error::Build {
                message,
                permanent: false,
            };
            let mut child = tokio::process::Command::new(program)
                .args(args)
                .env("BRIEFRAIL_TOKEN", ctx.token.to_string())
                .env("BRIEFRAIL_RUN_ID", ctx.run_id.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0)
                .spawn()
                .map_err(|e| failed(format!("cannot start {program}: {e}")))?;
            // From here on, however this future ends, the group ends with it.
            let _group = child.id().map(Group);
            let (stdin, stdout, stderr) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take());
            let write = async {
                if let Some(mut stdin) = stdin {
                    // A program that stops reading (or never reads) closes the pipe: its exit
                    // status and output say whether that was a failure.
                    let _ = stdin.write_all(&input).await;
                }
                Ok(())
            };
            let (_, out, err) =
                tokio::try_join!(write, read_bounded(stdout, program), read_kept(stderr))?;
            let status = child
                .wait()
                .await
                .map_err(|e| failed(format!("{program}: {e}")))?;
            let stderr = excerpt(&String::from_utf8_lossy(&err));
            if status.code() == Some(EXIT_BACKPRESSURE) {
                return Err(backpressure(
                    wait_from_stderr(&stderr),
                    format!("{program} exited with {EXIT_BACKPRESSURE} (overloaded): {stderr}"),
                ));
            }
            if !status.success() {
                return Err(failed(format!("{program} exited with {status}: {stderr}")));
            }
            let body: serde_json::Value = serde_json::from_slice(&out).map_err(|e| {
                failed(format!(
                    "{program} printed no JSON frame ({e}); stderr: {stderr}"
                ))
            })?;
            if !body.is_object() {
                return Err(failed(format!(
                    "{program} printed JSON that is not an object"
                )));
            }
            Ok(Frame::new(body))
        }
        .boxed_local()
    }

    /// The record goes to the program on its stdin.
    fn reads_record(&self) -> bool {
        true
    }
}

/// stdout to its end, failing past [`MAX_STDOUT`] (the group is then ended by its guard, so
/// a child blocked writing more does not hold the build).
async fn read_bounded(pipe: Option<impl AsyncRead + Unpin>, program: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    if let Some(pipe) = pipe {
        pipe.take(MAX_STDOUT as u64 + 1)
            .read_to_end(&mut out)
            .await
            .map_err(|e| Error::Build {
                message: format!("{program}: reading its stdout: {e}"),
                permanent: false,
            })?;
    }
    if out.len() > MAX_STDOUT {
        return Err(Error::Build {
            message: format!(
                "{program} printed more than {} MiB on stdout (the most a frame may be)",
                MAX_STDOUT >> 20
            ),
            permanent: false,
        });
    }
    Ok(out)
}

/// stderr drained to its end, its first [`STDERR_KEPT`] bytes kept. A read error only ends
/// what is kept: stderr is for the operator, the exit status decides.
async fn read_kept(pipe: Option<impl AsyncRead + Unpin>) -> Result<Vec<u8>> {
    let mut kept = Vec::new();
    let Some(mut pipe) = pipe else {
        return Ok(kept);
    };
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = pipe.read(&mut buf).await {
        let room = STDERR_KEPT.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    Ok(kept)
}

/// A build's process group (its id is the child's pid: `process_group(0)`). Dropped, it sends
/// the group SIGTERM, then SIGKILL after [`GROUP_GRACE`] from a thread of its own: a drop
/// cannot wait, and the node's runtime must not.
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let Ok(pgid) = libc::pid_t::try_from(self.0) else {
            return;
        };
        if signal_group(pgid, libc::SIGTERM) {
            std::thread::spawn(move || {
                std::thread::sleep(GROUP_GRACE);
                signal_group(pgid, libc::SIGKILL);
            });
        }
    }
}

/// Sends `signal` to process group `pgid`; whether any member was there to receive it.
fn signal_group(pgid: libc::pid_t, signal: libc::c_int) -> bool {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a negative pid names
    // the process group, which `process_group(0)` made this build's own.
    unsafe { libc::kill(-pgid, signal) == 0 }
}

pub(crate) fn excerpt(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() <= STDERR_EXCERPT {
        s.to_owned()
    } else {
        s.chars().take(STDERR_EXCERPT).collect::<String>() + "…"
    }
}
