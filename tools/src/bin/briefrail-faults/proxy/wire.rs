//! The Postgres wire protocol, as far as the proxy needs it. Message boundaries do not align
//! with TCP reads, so a [`Framer`] per direction tracks where each message starts while bytes
//! stream through; only the few message types the commit modes depend on are inspected (and
//! classified here: statement texts, command tags, SQLSTATEs), everything else is passed on
//! unparsed.

/// At most this many bytes of an inspected message's body are buffered before it is looked at;
/// the rest of a longer message streams through (its inspection sees the prefix only).
const INSPECT_CAP: usize = 64 * 1024;

pub(super) const SSL_REQUEST: u32 = 80_877_103;
pub(super) const GSSENC_REQUEST: u32 = 80_877_104;
pub(super) const CANCEL_REQUEST: u32 = 80_877_102;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Phase {
    /// Client start: untyped messages (int32 length, int32 code, ...).
    Untyped,
    /// Type byte, int32 length (including itself), body.
    Typed,
    /// No framing any more: everything passes through.
    Opaque,
}

pub(super) enum Next {
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

pub(super) struct Framer {
    pub(super) phase: Phase,
    /// Bytes of the current message still to pass through.
    pub(super) left: usize,
}

impl Framer {
    pub(super) fn at_boundary(&self) -> bool {
        self.left == 0
    }

    /// The rest of the current message (of `total` bytes, starting at the cursor) passes through.
    pub(super) fn pass_message(&mut self, total: usize) {
        self.left = total;
    }

    pub(super) fn next(&mut self, buf: &[u8], inspect: fn(u8) -> bool) -> Next {
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
pub(super) fn cstr(b: &[u8]) -> (&[u8], &[u8]) {
    match b.iter().position(|&c| c == 0) {
        Some(i) => (&b[..i], &b[i + 1..]),
        None => (b, &[]),
    }
}

pub(super) fn show(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s: String = s.chars().take(120).collect();
    s.replace('\n', " ")
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(super) enum Kind {
    Begin,
    Commit,
    Rollback,
    #[default]
    Other,
}

/// What the proxy knows of one statement's text.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Stmt {
    pub(super) kind: Kind,
    pub(super) claim: bool,
}

impl Stmt {
    pub(super) fn of(text: &[u8]) -> Self {
        // The build's compare-and-swap: `ops.commit_claim`, or `ops.commit_frame` (which calls it).
        let claim = [&b"commit_claim"[..], b"commit_frame"].iter().any(|name| {
            text.windows(name.len())
                .any(|w| w.eq_ignore_ascii_case(name))
        });
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

pub(super) fn client_inspects(ty: u8) -> bool {
    matches!(ty, b'Q' | b'P' | b'B' | b'E')
}

pub(super) fn server_inspects(ty: u8) -> bool {
    matches!(ty, b'C' | b'E')
}

/// The SQLSTATE of an ErrorResponse body.
pub(super) fn sqlstate(body: &[u8]) -> Option<&[u8]> {
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
