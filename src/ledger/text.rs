//! Text from outside made storable in a Postgres `text` column.
//!
//! A routing key or a header from the wire, a decoder's error that quotes the bytes it choked
//! on, a builder's stderr, a broker's reply: any of them may hold the NUL character, the one
//! character of valid UTF-8 that Postgres `text` refuses (`invalid byte sequence for encoding
//! "UTF8": 0x00`). A statement that fails on it loses what it was writing (the dead letter, the
//! run's error), and the caller that cannot record it may retry forever. So every such text
//! goes through [`storable`] on its way in: NUL is written `\u{0}`, the form the console and
//! the CLI show every control character in. Where the exact bytes are evidence (a message's
//! body, its routing key) a `bytea` column keeps them beside the text.
//!
//! Input a person typed (a title, a search) is refused instead, naming the field
//! ([`refuse_nul`]): there is no evidence to keep, and the person can fix it.

use std::borrow::Cow;

use crate::error::{Error, Result};

/// `s` with every NUL written `\u{0}`; borrowed when it has none.
pub fn storable(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', NUL))
    } else {
        Cow::Borrowed(s)
    }
}

/// [`storable`], cut to at most `max` bytes on a character boundary, never inside an escape:
/// error text kept on a row stays bounded however much a builder or a broker said.
pub fn storable_within(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max));
    for c in s.chars() {
        let len = if c == '\0' { NUL.len() } else { c.len_utf8() };
        if out.len() + len > max {
            break;
        }
        if c == '\0' {
            out.push_str(NUL);
        } else {
            out.push(c);
        }
    }
    out
}

/// How a NUL is written.
const NUL: &str = "\\u{0}";

/// Refuses `s` when it holds a NUL, naming `what`: for input a person typed.
pub fn refuse_nul(what: &str, s: &str) -> Result<()> {
    if s.contains('\0') {
        Err(Error::InvalidInput(format!(
            "{what} contains a NUL character, which cannot be stored"
        )))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_escaped_and_nothing_else_changes() {
        assert!(matches!(storable("document.uploaded"), Cow::Borrowed(_)));
        assert_eq!(storable("a\0b\0"), "a\\u{0}b\\u{0}");
        assert_eq!(storable("ünïcode \\ kept"), "ünïcode \\ kept");
        assert_eq!(
            storable_within("\0\0\0", 9),
            "\\u{0}",
            "never half an escape"
        );
        assert_eq!(storable_within("ab\0", 7), "ab\\u{0}");
        assert_eq!(
            storable_within("é\0", 3),
            "é",
            "cut on a character boundary"
        );
    }

    #[test]
    fn typed_input_with_nul_is_refused_by_name() {
        assert!(refuse_nul("title", "Acme v. Globex").is_ok());
        let e = refuse_nul("title", "Acme\0").unwrap_err().to_string();
        assert!(e.contains("title") && e.contains("NUL"), "{e}");
    }
}
