//! A Postgres-wire-aware TCP proxy between one briefrail node and its Postgres server, so the
//! suite can inject network and commit faults at exact protocol points.
//!
//! Every accepted client connection gets its own upstream connection. Bytes are forwarded as
//! soon as they are read; only the few messages the proxy must look at (client `Q`, `P`, `B`,
//! `E`; server `C`, `E`) are buffered, and only up to their first [`INSPECT_CAP`] bytes, the rest
//! streams. Anything the proxy cannot frame (a malformed length, TLS or GSS encryption after an
//! accepted `SSLRequest`/`GSSENCRequest`, a `CancelRequest`) passes through unparsed from then
//! on, for that direction of that connection.
//!
//! Per connection, the client side tracks statement name → what the statement is (BEGIN,
//! COMMIT, ROLLBACK, other; whether its text contains `commit_claim`), and portal → statement.
//! A transaction is a *build commit* if a statement executed since its BEGIN (simple `Q`, or
//! extended `Execute` of a bound portal) had `commit_claim` in its text; its COMMIT (simple or
//! extended) is what the commit modes act on. The answer to a forwarded build COMMIT is the next
//! server `CommandComplete` tagged COMMIT/ROLLBACK, or the next `ErrorResponse`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot, watch};

/// At most this many bytes of an inspected message's body are buffered before it is looked at;
/// the rest of a longer message streams through (its inspection sees the prefix only).
const INSPECT_CAP: usize = 64 * 1024;
/// Bytes asked of one read.
const READ_CHUNK: usize = 64 * 1024;
/// How long a cut COMMIT waits for the server's answer before both sides are closed anyway.
const CUT_WAIT: Duration = Duration::from_secs(2);
/// How long connecting to the upstream may take before the client connection is dropped.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

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

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn port(&self) -> u16 {
        self.shared.port
    }

    /// `127.0.0.1:port`, to put in a node's database URL.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.shared.port))
    }

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
        tokio::spawn(serve(guard, ctl, client));
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

/// State both directions of one connection share.
struct Conn {
    shared: Arc<Shared>,
    ctl: Arc<ConnCtl>,
    id: u64,
    /// TLS/GSS encryption was accepted (or a direction gave up framing): no parsing any more.
    opaque: AtomicBool,
    state: Mutex<ConnState>,
}

#[derive(Default)]
struct ConnState {
    /// One-byte untyped answers the server owes (to SSLRequest / GSSENCRequest).
    untyped_replies: u32,
    /// A build COMMIT was forwarded; its answer is awaited.
    pending: Option<Pending>,
}

enum Pending {
    /// Let the answer through; a CommandComplete "COMMIT" fires an armed notify.
    Watch,
    /// Swallow everything from the server, then close, then fire.
    Cut(oneshot::Sender<bool>),
}

enum Exit {
    Closed,
    Cut(oneshot::Sender<bool>, bool),
    CutTimeout,
}

async fn serve(reg: Registered, ctl: Arc<ConnCtl>, mut client: TcpStream) {
    let shared = reg.shared.clone();
    let upstream = *lock(&shared.upstream);
    let connect = tokio::time::timeout(CONNECT_WAIT, TcpStream::connect(upstream));
    let mut server = tokio::select! {
        _ = ctl.kill.notified() => return,
        r = connect => match r {
            Ok(Ok(server)) => server,
            _ => return,
        },
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let conn = Conn {
        shared,
        ctl: ctl.clone(),
        id: reg.id,
        opaque: AtomicBool::new(false),
        state: Mutex::new(ConnState::default()),
    };
    let exit = {
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        tokio::select! {
            _ = ctl.kill.notified() => Exit::Closed,
            _ = client_to_server(&conn, cr, sw) => Exit::Closed,
            exit = server_to_client(&conn, sr, cw) => exit,
            _ = async {
                ctl.cut_started.notified().await;
                tokio::time::sleep(CUT_WAIT).await;
            } => Exit::CutTimeout,
        }
    };
    // Both sides are closed before anyone hears about it.
    drop(client);
    drop(server);
    match exit {
        Exit::Closed => {}
        Exit::Cut(tx, committed) => {
            lock(&conn.shared.stats).cut_commits += 1;
            let _ = tx.send(committed);
        }
        Exit::CutTimeout => {
            let pending = lock(&conn.state).pending.take();
            if let Some(Pending::Cut(tx)) = pending {
                lock(&conn.shared.stats).cut_commits += 1;
                let _ = tx.send(false);
            }
        }
    }
    drop(reg);
}

// ---------------------------------------------------------------------------------------------
// Framing

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Client start: untyped messages (int32 length, int32 code, ...).
    Untyped,
    /// Type byte, int32 length (including itself), body.
    Typed,
    /// No framing any more: everything passes through.
    Opaque,
}

enum Next {
    /// Wait for more bytes.
    More,
    /// These many bytes pass through unlooked-at.
    Pass(usize),
    /// An untyped message (start-up phase) starts here: `total` bytes in all, this `code`.
    Untyped { total: usize, code: u32 },
    /// A typed message starts here: `ty`, `total` bytes in all (header included), of
    /// which the first `head` are in the buffer: the whole message, or its first `INSPECT_CAP`
    /// bytes of body, for a type `inspect` wants; just the header otherwise.
    Message { ty: u8, total: usize, head: usize },
}

struct Framer {
    phase: Phase,
    /// Bytes of the current message still to pass through.
    left: usize,
}

impl Framer {
    fn at_boundary(&self) -> bool {
        self.left == 0
    }

    /// The rest of the current message (of `total` bytes, starting at the cursor) passes through.
    fn pass_message(&mut self, total: usize) {
        self.left = total;
    }

    fn next(&mut self, buf: &[u8], inspect: fn(u8) -> bool) -> Next {
        if buf.is_empty() {
            return Next::More;
        }
        if self.left > 0 {
            let n = self.left.min(buf.len());
            self.left -= n;
            return Next::Pass(n);
        }
        match self.phase {
            Phase::Opaque => Next::Pass(buf.len()),
            Phase::Untyped => {
                if buf.len() < 8 {
                    return Next::More;
                }
                let len = be32(&buf[0..4]) as usize;
                if len < 8 {
                    self.phase = Phase::Opaque;
                    return Next::Pass(buf.len());
                }
                Next::Untyped {
                    total: len,
                    code: be32(&buf[4..8]),
                }
            }
            Phase::Typed => {
                if buf.len() < 5 {
                    return Next::More;
                }
                let ty = buf[0];
                let len = be32(&buf[1..5]) as usize;
                if len < 4 {
                    self.phase = Phase::Opaque;
                    return Next::Pass(buf.len());
                }
                let total = len + 1;
                let head = if inspect(ty) {
                    total.min(5 + INSPECT_CAP)
                } else {
                    5
                };
                if buf.len() < head {
                    return Next::More;
                }
                Next::Message { ty, total, head }
            }
        }
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// The NUL-terminated string at the start of `b` (all of `b` if there is no NUL: a truncated
/// prefix), and what follows its NUL.
fn cstr(b: &[u8]) -> (&[u8], &[u8]) {
    match b.iter().position(|&c| c == 0) {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &[]),
    }
}

fn show(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s: String = s.chars().take(120).collect();
    s.replace('\n', " ")
}

/// Waits while the proxy is partitioned.
async fn unpartitioned(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|on| !*on).await;
}

// ---------------------------------------------------------------------------------------------
// Client → server

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
enum Kind {
    Begin,
    Commit,
    Rollback,
    #[default]
    Other,
}

/// What the proxy knows of one statement's text.
#[derive(Clone, Copy, Debug, Default)]
struct Stmt {
    kind: Kind,
    claim: bool,
}

impl Stmt {
    fn of(text: &[u8]) -> Self {
        let claim = text
            .windows(b"commit_claim".len())
            .any(|w| w.eq_ignore_ascii_case(b"commit_claim"));
        let mut words = text
            .split(|c| c.is_ascii_whitespace() || *c == b';')
            .filter(|w| !w.is_empty());
        let first = words.next().unwrap_or_default();
        let second = words.next().unwrap_or_default();
        let is = |w: &[u8], s: &str| w.eq_ignore_ascii_case(s.as_bytes());
        let kind = if is(first, "BEGIN") || (is(first, "START") && is(second, "TRANSACTION")) {
            Kind::Begin
        } else if (is(first, "COMMIT") || is(first, "END")) && !is(second, "PREPARED") {
            Kind::Commit
        } else if (is(first, "ROLLBACK") || is(first, "ABORT"))
            && !is(second, "TO")
            && !is(second, "PREPARED")
        {
            Kind::Rollback
        } else {
            Kind::Other
        };
        Stmt { kind, claim }
    }
}

fn client_inspects(ty: u8) -> bool {
    matches!(ty, b'Q' | b'P' | b'B' | b'E')
}

#[derive(Default)]
struct ClientSide {
    statements: HashMap<Vec<u8>, Stmt>,
    portals: HashMap<Vec<u8>, Stmt>,
    /// A statement with `commit_claim` ran since the last BEGIN.
    in_build: bool,
    /// The held COMMIT was released: let it through once.
    released: bool,
}

enum Verdict {
    Forward,
    /// Do not forward this message (nor anything after it).
    Hold(oneshot::Sender<()>),
}

/// After the bytes are written.
#[derive(Default)]
struct AfterWrite {
    cut_started: bool,
    hold: Option<oneshot::Sender<()>>,
}

impl ClientSide {
    fn on_untyped(&mut self, conn: &Conn, code: u32, framer: &mut Framer) {
        trace(conn, || format!("c>s untyped code {code}"));
        match code {
            SSL_REQUEST | GSSENC_REQUEST => lock(&conn.state).untyped_replies += 1,
            CANCEL_REQUEST => framer.phase = Phase::Opaque,
            _ => framer.phase = Phase::Typed,
        }
    }

    fn on_message(&mut self, conn: &Conn, ty: u8, body: &[u8], after: &mut AfterWrite) -> Verdict {
        match ty {
            b'Q' => {
                let (text, _) = cstr(body);
                trace(conn, || format!("c>s Q {:?}", show(text)));
                self.executed(conn, Stmt::of(text), after)
            }
            b'P' => {
                let (name, rest) = cstr(body);
                let (text, _) = cstr(rest);
                trace(conn, || {
                    format!("c>s Parse {:?} {:?}", show(name), show(text))
                });
                self.statements.insert(name.to_vec(), Stmt::of(text));
                Verdict::Forward
            }
            b'B' => {
                let (portal, rest) = cstr(body);
                let (name, _) = cstr(rest);
                let stmt = self.statements.get(name).copied().unwrap_or_default();
                self.portals.insert(portal.to_vec(), stmt);
                Verdict::Forward
            }
            b'E' => {
                let (portal, _) = cstr(body);
                let stmt = self.portals.get(portal).copied().unwrap_or_default();
                trace(conn, || format!("c>s Execute {:?} {stmt:?}", show(portal)));
                self.executed(conn, stmt, after)
            }
            _ => Verdict::Forward,
        }
    }

    fn executed(&mut self, conn: &Conn, stmt: Stmt, after: &mut AfterWrite) -> Verdict {
        match stmt.kind {
            Kind::Begin | Kind::Rollback => self.in_build = false,
            Kind::Commit if self.in_build => return self.build_commit(conn, after),
            Kind::Commit => {}
            Kind::Other => {}
        }
        if stmt.claim {
            self.in_build = true;
        }
        Verdict::Forward
    }

    fn build_commit(&mut self, conn: &Conn, after: &mut AfterWrite) -> Verdict {
        let shared = &conn.shared;
        let mut arms = lock(&shared.arms);
        if !std::mem::take(&mut self.released) {
            if let Some(tx) = arms.hold.take() {
                lock(&shared.stats).held_commits += 1;
                trace(conn, || "build COMMIT held".to_string());
                return Verdict::Hold(tx);
            }
        }
        self.in_build = false;
        let pending = match arms.cut.take() {
            Some(tx) => {
                after.cut_started = true;
                Pending::Cut(tx)
            }
            None => Pending::Watch,
        };
        drop(arms);
        lock(&conn.state).pending = Some(pending);
        lock(&shared.stats).build_commits_seen += 1;
        Verdict::Forward
    }
}

async fn client_to_server(conn: &Conn, mut from: ReadHalf<'_>, mut to: WriteHalf<'_>) {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut out: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut framer = Framer {
        phase: Phase::Untyped,
        left: 0,
    };
    let mut side = ClientSide::default();
    let mut partition = conn.shared.partition.subscribe();
    loop {
        let mut pos = 0;
        let mut after = AfterWrite::default();
        loop {
            if framer.at_boundary() && conn.opaque.load(Ordering::SeqCst) {
                framer.phase = Phase::Opaque;
            }
            match framer.next(&buf[pos..], client_inspects) {
                Next::More => break,
                Next::Pass(n) => {
                    out.extend_from_slice(&buf[pos..pos + n]);
                    pos += n;
                }
                Next::Untyped { total, code } => {
                    side.on_untyped(conn, code, &mut framer);
                    framer.pass_message(total);
                }
                Next::Message { ty, total, head } => {
                    let body = &buf[pos + 5..pos + head];
                    match side.on_message(conn, ty, body, &mut after) {
                        Verdict::Forward => framer.pass_message(total),
                        Verdict::Hold(tx) => {
                            after.hold = Some(tx);
                            break;
                        }
                    }
                }
            }
        }
        buf.drain(..pos);
        if !out.is_empty() {
            unpartitioned(&mut partition).await;
            if to.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if after.cut_started {
            conn.ctl.cut_started.notify_one();
        }
        if let Some(tx) = after.hold {
            let _ = tx.send(());
            // Held: read on (to notice the client going away), forward nothing, until released.
            let mut release = conn.shared.release.subscribe();
            release.borrow_and_update();
            conn.ctl.held.store(true, Ordering::SeqCst);
            loop {
                buf.reserve(READ_CHUNK);
                tokio::select! {
                    r = from.read_buf(&mut buf) => match r {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    },
                    r = release.changed() => match r {
                        Ok(()) => break,
                        Err(_) => return,
                    },
                }
            }
            conn.ctl.held.store(false, Ordering::SeqCst);
            side.released = true;
            trace(conn, || "held COMMIT released".to_string());
            continue;
        }
        buf.reserve(READ_CHUNK);
        match from.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Server → client

fn server_inspects(ty: u8) -> bool {
    matches!(ty, b'C' | b'E')
}

/// The SQLSTATE of an ErrorResponse body.
fn sqlstate(body: &[u8]) -> Option<&[u8]> {
    let mut rest = body;
    while let Some((&field, tail)) = rest.split_first() {
        if field == 0 {
            return None;
        }
        let (value, tail) = cstr(tail);
        if field == b'C' {
            return Some(value);
        }
        rest = tail;
    }
    None
}

enum Answer {
    Forward,
    /// Forward, then fire this (an armed notify).
    Notify(oneshot::Sender<()>),
    /// The cut COMMIT's answer: close, then fire with whether it committed.
    Cut(oneshot::Sender<bool>, bool),
}

fn on_server_message(conn: &Conn, ty: u8, body: &[u8]) -> Answer {
    let answer = match ty {
        b'E' => {
            if sqlstate(body) == Some(b"25P03") {
                lock(&conn.shared.stats).idle_in_transaction_kills += 1;
            }
            Some(false)
        }
        b'C' => match cstr(body).0 {
            b"COMMIT" => Some(true),
            b"ROLLBACK" => Some(false),
            _ => None,
        },
        _ => None,
    };
    let Some(committed) = answer else {
        return Answer::Forward;
    };
    let pending = lock(&conn.state).pending.take();
    if pending.is_some() {
        trace(conn, || {
            format!("s>c answer to build COMMIT: {ty:?} committed={committed}")
        });
    }
    match pending {
        None => Answer::Forward,
        Some(Pending::Watch) if committed => match lock(&conn.shared.arms).notify.take() {
            Some(tx) => Answer::Notify(tx),
            None => Answer::Forward,
        },
        Some(Pending::Watch) => Answer::Forward,
        Some(Pending::Cut(tx)) => Answer::Cut(tx, committed),
    }
}

async fn server_to_client(conn: &Conn, mut from: ReadHalf<'_>, mut to: WriteHalf<'_>) -> Exit {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut out: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut framer = Framer {
        phase: Phase::Typed,
        left: 0,
    };
    let mut partition = conn.shared.partition.subscribe();
    // A cut COMMIT is pending: nothing from the server reaches the client any more.
    let mut swallowing = false;
    loop {
        let mut pos = 0;
        let mut notify = None;
        let mut cut = None;
        loop {
            if framer.at_boundary() && framer.phase != Phase::Opaque {
                let mut state = lock(&conn.state);
                if state.untyped_replies > 0 {
                    let Some(&byte) = buf.get(pos) else { break };
                    match byte {
                        b'N' => {
                            state.untyped_replies -= 1;
                            out.push(byte);
                            pos += 1;
                            continue;
                        }
                        b'S' | b'G' => {
                            // Encrypted from here on, both ways (set before the byte reaches
                            // the client, which only then sends its handshake).
                            conn.opaque.store(true, Ordering::SeqCst);
                            framer.phase = Phase::Opaque;
                        }
                        // Not an answer to the request (an ErrorResponse from an old server).
                        _ => state.untyped_replies = 0,
                    }
                }
                if matches!(state.pending, Some(Pending::Cut(_))) {
                    swallowing = true;
                }
            }
            match framer.next(&buf[pos..], server_inspects) {
                Next::More => break,
                Next::Pass(n) => {
                    if !swallowing {
                        out.extend_from_slice(&buf[pos..pos + n]);
                    }
                    pos += n;
                }
                // The server never starts untyped; pass it through if it ever did.
                Next::Untyped { total, .. } => framer.pass_message(total),
                Next::Message { ty, total, head } => {
                    let body = &buf[pos + 5..pos + head];
                    framer.pass_message(total);
                    match on_server_message(conn, ty, body) {
                        Answer::Forward => {}
                        Answer::Notify(tx) => notify = Some(tx),
                        Answer::Cut(tx, committed) => {
                            cut = Some((tx, committed));
                            break;
                        }
                    }
                }
            }
        }
        buf.drain(..pos);
        if !out.is_empty() {
            unpartitioned(&mut partition).await;
            if to.write_all(&out).await.is_err() {
                return Exit::Closed;
            }
            out.clear();
        }
        if let Some((tx, committed)) = cut {
            return Exit::Cut(tx, committed);
        }
        if let Some(tx) = notify {
            let _ = tx.send(());
        }
        buf.reserve(READ_CHUNK);
        match from.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return Exit::Closed,
            Ok(_) => {}
        }
    }
}

fn trace(conn: &Conn, line: impl FnOnce() -> String) {
    if conn.shared.trace.load(Ordering::Relaxed) {
        eprintln!("[proxy {} #{}] {}", conn.shared.name, conn.id, line());
    }
}
