//! One proxied connection's life: connecting upstream, then both directions pumped
//! concurrently until either side closes or the proxy kills the connection. The client side
//! follows statements and portals to recognise a build COMMIT and applies the armed commit mode
//! to it (hold, cut, notify); the server side spots that COMMIT's answer. Every write waits out
//! a partition first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::sync::{oneshot, watch};

use super::wire::{
    CANCEL_REQUEST, Framer, GSSENC_REQUEST, Kind, Next, Phase, SSL_REQUEST, Stmt, client_inspects,
    cstr, server_inspects, show, sqlstate,
};
use super::{ConnCtl, Registered, Shared, lock};

/// Bytes asked of one read.
const READ_CHUNK: usize = 64 * 1024;
/// How long a cut COMMIT waits for the server's answer before both sides are closed anyway.
const CUT_WAIT: Duration = Duration::from_secs(2);
/// How long connecting to the upstream may take before the client connection is dropped.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

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

pub(super) async fn serve(reg: Registered, ctl: Arc<ConnCtl>, mut client: TcpStream) {
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

/// Waits while the proxy is partitioned.
async fn unpartitioned(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|on| !*on).await;
}

// ---------------------------------------------------------------------------------------------
// Client → server

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
        if !std::mem::take(&mut self.released)
            && let Some(tx) = arms.hold.take()
        {
            lock(&shared.stats).held_commits += 1;
            trace(conn, || "build COMMIT held".to_string());
            return Verdict::Hold(tx);
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
