//! Secrets in URLs (database and broker passwords) are carried in [`SecretUrl`], whose `Debug`
//! and `Display` redact the password, so no log line or error message can print one.

use std::fmt;

use serde::Deserialize;

/// A URL that may carry a password. Only [`SecretUrl::expose`] yields the raw string, and only
/// connection code calls it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps a URL whose password must never reach a log line.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }
    /// The URLs of a comma-separated list (the members of a broker cluster), in order; a
    /// single URL is a list of one.
    pub fn members(&self) -> Vec<SecretUrl> {
        let members: Vec<SecretUrl> = self
            .0
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(SecretUrl::new)
            .collect();
        if members.is_empty() {
            vec![self.clone()]
        } else {
            members
        }
    }
    /// The raw URL, for handing to a connection library. Never log the result.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact_urls(&self.0))
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_urls(&self.0))
    }
}

/// Replaces the password of every `scheme://user:password@` in `text` with `***`.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the first '/', whitespace or quote; credentials end at its last '@'.
        let end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'' || c == '`')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon]);
                out.push_str(":***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            redact_urls(
                "connect postgres://app:hunter2@db:5432/x failed; amqp://guest:g@rabbit/%2f"
            ),
            "connect postgres://app:***@db:5432/x failed; amqp://guest:***@rabbit/%2f"
        );
        assert_eq!(
            redact_urls("postgres://postgres@127.0.0.1/briefrail"),
            "postgres://postgres@127.0.0.1/briefrail"
        );
        assert_eq!(redact_urls("no url here"), "no url here");
        assert_eq!(redact_urls("postgres://u:p@ss@h/d"), "postgres://u:***@h/d");
        assert!(!format!("{:?}", SecretUrl::new("amqp://a:topsecret@h")).contains("topsecret"));
    }
}
