//! A Postgres-wire-aware TCP proxy between one briefrail node and its Postgres server, so the
//! suite can inject network and commit faults at exact protocol points.
//!
//! Every accepted client connection gets its own upstream connection. Bytes are forwarded as
//! soon as they are read; only the few messages the proxy must look at (client `Q`, `P`, `B`,
//! `E`; server `C`, `E`) are buffered, and only up to their first
//! [`INSPECT_CAP`](wire::INSPECT_CAP) bytes, the rest streams. Anything the proxy cannot frame
//! (a malformed length, TLS or GSS encryption after an accepted `SSLRequest`/`GSSENCRequest`, a
//! `CancelRequest`) passes through unparsed from then on, for that direction of that connection.
//!
//! Per connection, the client side tracks statement name → what the statement is (BEGIN,
//! COMMIT, ROLLBACK, other; whether its text contains `commit_claim` or `commit_frame`), and
//! portal → statement.
//! A transaction is a *build commit* if a statement executed since its BEGIN (simple `Q`, or
//! extended `Execute` of a bound portal) had `commit_claim` or `commit_frame` in its text; its COMMIT (simple or
//! extended) is what the commit modes act on. The answer to a forwarded build COMMIT is the next
//! server `CommandComplete` tagged COMMIT/ROLLBACK, or the next `ErrorResponse`.

mod pump;
mod wire;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Notify, oneshot, watch};

#[derive(Debug, Clone, Default)]
pub struct ProxyStats {
    pub connections_now: usize,
    pub connections_max: usize,
    pub connections_total: u64,
    /// Build-commit COMMITs forwarded to the server (held ones count once released).
    pub build_commits_seen: u64,
    /// Build COMMITs held by `arm_hold_commit`.
    pub held_commits: u64,
    /// Build COMMITs whose answer was cut by `arm_cut_commit`.
    pub cut_commits: u64,
    /// Server ErrorResponses with SQLSTATE 25P03 (idle_in_transaction_session_timeout) seen.
    pub idle_in_transaction_kills: u64,
    /// Connections closed by `reset_all` / `switch_upstream`.
    pub resets: u64,
}

/// The proxy. Cheap to clone; it listens as long as one clone lives (dropping the last one
/// stops accepting and closes every live connection).
#[derive(Clone)]
pub struct DbProxy {
    shared: Arc<Shared>,
    _owner: Arc<Owner>,
}

struct Shared {
    name: String,
    port: u16,
    upstream: Mutex<SocketAddr>,
    partition: watch::Sender<bool>,
    /// Bumped by `release_held`: every held COMMIT goes on.
    release: watch::Sender<u64>,
    trace: AtomicBool,
    arms: Mutex<Arms>,
    conns: Mutex<Conns>,
    stats: Mutex<ProxyStats>,
}

#[derive(Default)]
struct Arms {
    hold: Option<oneshot::Sender<()>>,
    cut: Option<oneshot::Sender<bool>>,
    notify: Option<oneshot::Sender<()>>,
}

#[derive(Default)]
struct Conns {
    next_id: u64,
    live: HashMap<u64, Arc<ConnCtl>>,
}

/// What the proxy's handle can do to one live connection.
#[derive(Default)]
struct ConnCtl {
    kill: Notify,
    killed: AtomicBool,
    /// Set once a cut COMMIT was written to the server: its answer has `CUT_WAIT` to come.
    cut_started: Notify,
    held: AtomicBool,
}

/// Stops the accept loop and closes the live connections when the last `DbProxy` goes.
struct Owner {
    shared: Arc<Shared>,
    accept: tokio::task::AbortHandle,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.accept.abort();
        for ctl in lock(&self.shared.conns).live.values() {
            ctl.killed.store(true, Ordering::SeqCst);
            ctl.kill.notify_one();
        }
    }
}

impl fmt::Debug for DbProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbProxy")
            .field("name", &self.shared.name)
            .field("port", &self.shared.port)
            .field("upstream", &*lock(&self.shared.upstream))
            .finish()
    }
}

/// A poisoned lock only means another task panicked while holding it; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl DbProxy {
    /// Listens on 127.0.0.1:0 and forwards each accepted connection to `upstream` (connect per
    /// client connection).
    pub async fn start(name: &str, upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            name: name.to_string(),
            port,
            upstream: Mutex::new(upstream),
            partition: watch::channel(false).0,
            release: watch::channel(0).0,
            trace: AtomicBool::new(false),
            arms: Mutex::new(Arms::default()),
            conns: Mutex::new(Conns::default()),
            stats: Mutex::new(ProxyStats::default()),
        });
        let accept = tokio::spawn(accept_loop(shared.clone(), listener)).abort_handle();
        let owner = Arc::new(Owner {
            shared: shared.clone(),
            accept,
        });
        Ok(DbProxy {
            shared,
            _owner: owner,
        })
    }

    // Unused by the suite; kept for investigating a run.
    #[allow(dead_code)]
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn port(&self) -> u16 {
        self.shared.port
    }

    /// `127.0.0.1:port`, to put in a node's database URL.
    // Unused by the suite; kept for investigating a run.
    #[allow(dead_code)]
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.shared.port))
    }

    // Unused by the suite; kept for investigating a run.
    #[allow(dead_code)]
    pub fn upstream(&self) -> SocketAddr {
        *lock(&self.shared.upstream)
    }

    pub fn stats(&self) -> ProxyStats {
        lock(&self.shared.stats).clone()
    }

    /// New connections go to `upstream`; every live connection is closed at once (both sides),
    /// counted in `resets`. Returns how many were closed.
    pub fn switch_upstream(&self, upstream: SocketAddr) -> usize {
        *lock(&self.shared.upstream) = upstream;
        self.reset_all()
    }

    /// Closes every live connection (both sides) now; returns how many. The closing itself
    /// happens on the connections' tasks, microseconds later (`connections_now` follows).
    pub fn reset_all(&self) -> usize {
        let n = lock(&self.shared.conns)
            .live
            .values()
            .filter(|ctl| {
                let fresh = !ctl.killed.swap(true, Ordering::SeqCst);
                ctl.kill.notify_one();
                fresh
            })
            .count();
        lock(&self.shared.stats).resets += n as u64;
        n
    }

    /// While on: no byte is forwarded in either direction on any connection of this proxy
    /// (held, not dropped; new connections are accepted and connected upstream, but silent);
    /// off: everything held flows on, in order.
    pub fn partition(&self, on: bool) {
        self.shared.partition.send_replace(on);
    }

    /// Arms: the next build-commit COMMIT from the client is not forwarded (the transaction stays
    /// open on the server, holding its row locks). The connection stays open; whatever the
    /// server sends later is forwarded to the client. Fires when the COMMIT was caught.
    pub fn arm_hold_commit(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.arms).hold = Some(tx);
        rx
    }

    /// Arms: the next build-commit COMMIT is forwarded, the server's answer is swallowed and,
    /// once the server's answer was seen (or after 2 s), both sides are closed. Fires, after the
    /// close, with `true` if the server's answer was CommandComplete "COMMIT".
    pub fn arm_cut_commit(&self) -> oneshot::Receiver<bool> {
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.arms).cut = Some(tx);
        rx
    }

    /// Arms: fires (without interfering) right after the server's CommandComplete "COMMIT" of the
    /// next build-commit transaction has been written to the client. A build COMMIT answered
    /// otherwise (ROLLBACK, error) does not fire it: it stays armed.
    pub fn arm_notify_commit(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.arms).notify = Some(tx);
        rx
    }

    /// Disarms every armed mode (their receivers then see a closed channel). A COMMIT already
    /// held stays held (see `release_held`).
    pub fn disarm(&self) {
        *lock(&self.shared.arms) = Arms::default();
    }

    /// Lets every COMMIT held by `arm_hold_commit` go on to the server (like SIGCONT of the
    /// stopped process); returns how many connections were holding one. A session the server
    /// already killed is gone: nothing to release there.
    // Unused by the suite; kept for investigating a run.
    #[allow(dead_code)]
    pub fn release_held(&self) -> usize {
        let n = lock(&self.shared.conns)
            .live
            .values()
            .filter(|ctl| ctl.held.load(Ordering::SeqCst))
            .count();
        self.shared.release.send_modify(|g| *g += 1);
        n
    }

    /// Logs to stderr every message the client sends that the proxy inspects (BEGIN/COMMIT/…
    /// and statement texts, cut to 120 characters), the startup codes, and server answers to
    /// build COMMITs. For investigating; off by default.
    // Unused by the suite; kept for investigating a run.
    #[allow(dead_code)]
    pub fn set_trace(&self, on: bool) {
        self.shared.trace.store(on, Ordering::SeqCst);
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // EMFILE and friends: wait instead of spinning.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let ctl = Arc::new(ConnCtl::default());
        let id = {
            let mut conns = lock(&shared.conns);
            let id = conns.next_id;
            conns.next_id += 1;
            conns.live.insert(id, ctl.clone());
            id
        };
        {
            let mut stats = lock(&shared.stats);
            stats.connections_now += 1;
            stats.connections_max = stats.connections_max.max(stats.connections_now);
            stats.connections_total += 1;
        }
        let guard = Registered {
            shared: shared.clone(),
            id,
        };
        tokio::spawn(pump::serve(guard, ctl, client));
    }
}

/// A live connection's registration; dropping it (however the connection's task ends)
/// unregisters it and decrements `connections_now`.
struct Registered {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.shared.conns).live.remove(&self.id);
        let mut stats = lock(&self.shared.stats);
        stats.connections_now = stats.connections_now.saturating_sub(1);
    }
}
