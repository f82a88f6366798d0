//! Console sessions (`ops.console_sessions`, migration 000010). A browser cannot send the
//! admin bearer token, so `POST /login` trades it for a session: the cookie carries the
//! session id, and every form that changes state carries the session's CSRF token.
//!
//! Sessions live in the ledger, not in one process: any node behind a load balancer knows a
//! session, logout revokes it on every node at once, and expiry is the ledger clock's. The
//! ledger keeps only the SHA-256 of a session id (Postgres's own `sha256`), so a copy of the
//! database opens no session.

use diesel::sql_types::{Double, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

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

/// **open** a session valid for `ttl_seconds`; expired sessions are removed in the same
/// statement.
pub async fn open(conn: &mut AsyncPgConnection, ttl_seconds: f64) -> Result<Session> {
    let s = Session {
        session_id: secret(),
        csrf_token: secret(),
    };
    diesel::sql_query(
        "WITH expired AS (DELETE FROM ops.console_sessions WHERE expires_at < ops.now())
         INSERT INTO ops.console_sessions (session_hash, csrf_token, created_at, expires_at)
         VALUES (sha256(convert_to($1, 'UTF8')), $2, ops.now(), ops.now() + make_interval(secs => $3))",
    )
    .bind::<Text, _>(&s.session_id)
    .bind::<Text, _>(&s.csrf_token)
    .bind::<Double, _>(ttl_seconds)
    .execute(conn)
    .await?;
    Ok(s)
}

/// The session a cookie names, if it is open and has not expired.
pub async fn find(conn: &mut AsyncPgConnection, session_id: &str) -> Result<Option<Session>> {
    #[derive(diesel::QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        csrf_token: String,
    }
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT csrf_token FROM ops.console_sessions
          WHERE session_hash = sha256(convert_to($1, 'UTF8')) AND expires_at > ops.now()",
    )
    .bind::<Text, _>(session_id)
    .load(conn)
    .await?;
    Ok(rows.into_iter().next().map(|r| Session {
        session_id: session_id.to_owned(),
        csrf_token: r.csrf_token,
    }))
}

/// **close** (logout): the session is gone on every node.
pub async fn close(conn: &mut AsyncPgConnection, session_id: &str) -> Result<()> {
    diesel::sql_query(
        "DELETE FROM ops.console_sessions WHERE session_hash = sha256(convert_to($1, 'UTF8'))",
    )
    .bind::<Text, _>(session_id)
    .execute(conn)
    .await?;
    Ok(())
}
