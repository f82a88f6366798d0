//! Console sessions (`ops.console_sessions`). A browser cannot send the
//! admin bearer token, so `POST /login` trades it for a session: the cookie carries the
//! session id, and every form that changes state carries the session's CSRF token.
//!
//! Sessions live in the ledger, not in one process: any node behind a load balancer knows a
//! session, logout revokes it on every node at once, and expiry is the ledger clock's.
//!
//! A session is good only under the credential it was opened with ([`Credential`]): the
//! ledger's key is the SHA-256 of the session id *and* the admin token the node had (none, for
//! a token-less node), computed here. So a session a token-less node opened by itself opens no
//! node that has a token, a token change revokes every session opened under the old one on
//! every node at once, and nodes of one fleet sharing a token share its sessions. Neither the
//! id nor the token ever reaches the database (a statement log, a copy of the database): only
//! the hash does, and without the 244-bit id it says nothing about the token.

use diesel::sql_types::{Bytea, Double, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use sha2::{Digest, Sha256};

use crate::error::Result;

/// An open session: the cookie's value and the token its forms carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub session_id: String,
    pub csrf_token: String,
}

/// 244 random bits (two v4 UUIDs, from the OS's generator), as 64 hex characters.
fn secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// What a node lets a session in with: its admin token (`http.token`), or none. Never printed,
/// never stored: only its key (a SHA-256 of the session id and the token) leaves the process.
#[derive(Clone)]
pub struct Credential {
    token: String,
}

impl Credential {
    /// The credential of a node whose `http.token` is `token` (blank: a token-less node).
    pub fn of(token: &str) -> Self {
        Self {
            token: token.trim().to_owned(),
        }
    }

    /// The ledger's key for a session id under this credential: SHA-256 over a domain label,
    /// the token's length and bytes, then the id. The length prefix keeps every (token, id)
    /// pair apart, the token-less one (length 0) included.
    fn key(&self, session_id: &str) -> Vec<u8> {
        let mut h = Sha256::new();
        h.update(b"briefrail console session\0");
        h.update((self.token.len() as u64).to_be_bytes());
        h.update(self.token.as_bytes());
        h.update(session_id.as_bytes());
        h.finalize().to_vec()
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.token.is_empty() {
            "none"
        } else {
            "token"
        };
        write!(f, "Credential({kind})")
    }
}

/// **open** a session valid for `ttl_seconds` under `credential`; expired sessions are removed
/// in the same statement.
pub async fn open(
    conn: &mut AsyncPgConnection,
    credential: &Credential,
    ttl_seconds: f64,
) -> Result<Session> {
    let s = Session {
        session_id: secret(),
        csrf_token: secret(),
    };
    diesel::sql_query(
        "WITH expired AS (DELETE FROM ops.console_sessions WHERE expires_at < ops.now())
         INSERT INTO ops.console_sessions (session_hash, csrf_token, created_at, expires_at)
         VALUES ($1, $2, ops.now(), ops.now() + make_interval(secs => $3))",
    )
    .bind::<Bytea, _>(credential.key(&s.session_id))
    .bind::<Text, _>(&s.csrf_token)
    .bind::<Double, _>(ttl_seconds)
    .execute(conn)
    .await?;
    Ok(s)
}

/// The session a cookie names, if it was opened under `credential`, is open and has not
/// expired.
pub async fn find(
    conn: &mut AsyncPgConnection,
    credential: &Credential,
    session_id: &str,
) -> Result<Option<Session>> {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        csrf_token: String,
    }
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT csrf_token FROM ops.console_sessions
          WHERE session_hash = $1 AND expires_at > ops.now()",
    )
    .bind::<Bytea, _>(credential.key(session_id))
    .load(conn)
    .await?;
    Ok(rows.into_iter().next().map(|r| Session {
        session_id: session_id.to_owned(),
        csrf_token: r.csrf_token,
    }))
}

/// **close** (logout): the session is gone on every node.
pub async fn close(
    conn: &mut AsyncPgConnection,
    credential: &Credential,
    session_id: &str,
) -> Result<()> {
    diesel::sql_query("DELETE FROM ops.console_sessions WHERE session_hash = $1")
        .bind::<Bytea, _>(credential.key(session_id))
        .execute(conn)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Credential;

    #[test]
    fn a_session_key_differs_under_every_credential() {
        let id = "0123456789abcdef";
        let none = Credential::of("").key(id);
        let a = Credential::of("token-a").key(id);
        assert_ne!(none, a);
        assert_ne!(a, Credential::of("token-b").key(id));
        assert_eq!(
            a,
            Credential::of(" token-a ").key(id),
            "trimmed as config is"
        );
        // The length prefix: ("ab", "c…") and ("a", "bc…") are different pairs.
        assert_ne!(
            Credential::of("ab").key("cd"),
            Credential::of("a").key("bcd")
        );
        assert_eq!(
            format!("{:?}", Credential::of("secret")),
            "Credential(token)"
        );
    }
}
