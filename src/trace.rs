//! W3C trace context (`traceparent`), carried from the span that records a fact, through the
//! outbox row and the message, to the run that built the frame. Kept dependency-free: a
//! traceparent is 55 characters of hex and dashes.

use std::fmt;

/// `00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traceparent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl Traceparent {
    /// A new trace with a fresh root span.
    pub fn new_root() -> Self {
        let t = uuid::Uuid::new_v4();
        let s = uuid::Uuid::new_v4();
        let mut span_id = [0u8; 8];
        span_id.copy_from_slice(&s.as_bytes()[..8]);
        Self {
            trace_id: *t.as_bytes(),
            span_id,
            sampled: true,
        }
    }

    /// A child span in the same trace.
    pub fn child(&self) -> Self {
        let mut c = Self::new_root();
        c.trace_id = self.trace_id;
        c.sampled = self.sampled;
        c
    }

    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// Parses a header value; `None` for anything that is not a valid version-00 traceparent.
    pub fn parse(s: &str) -> Option<Self> {
        let parts: Vec<&str> = s.trim().split('-').collect();
        if parts.len() != 4
            || parts[0] != "00"
            || parts[1].len() != 32
            || parts[2].len() != 16
            || parts[3].len() != 2
        {
            return None;
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        unhex(parts[1], &mut trace_id)?;
        unhex(parts[2], &mut span_id)?;
        let mut flags = [0u8; 1];
        unhex(parts[3], &mut flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Self {
            trace_id,
            span_id,
            sampled: flags[0] & 1 == 1,
        })
    }
}

impl fmt::Display for Traceparent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.span_id),
            self.sampled as u8
        )
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str, out: &mut [u8]) -> Option<()> {
    if !s
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let t = Traceparent::new_root();
        let s = t.to_string();
        assert_eq!(s.len(), 55);
        assert_eq!(Traceparent::parse(&s), Some(t));
        assert_eq!(t.child().trace_id, t.trace_id);
        for bad in [
            "",
            "00-xyz",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(Traceparent::parse(bad), None, "{bad}");
        }
    }
}
