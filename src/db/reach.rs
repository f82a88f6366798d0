//! A first connection to the ledger's database, whose failure names its cause.
//!
//! diesel's `ConnectionError` flattens the driver's error to text, so a refused connection, a
//! wrong password and a missing database all reach an operator as the same opaque line. Every
//! entry point that needs the database (`briefrail run`, `migrate`, the ledger commands, a
//! [`crate::node::Node`]) first opens one connection here, with tokio-postgres directly, and
//! classifies a failure by what the server or the operating system said: the SQLSTATE
//! (`28P01`, `28000`, `3D000`) or the OS error (`ECONNREFUSED`), never by matching text. The
//! error names the server (`host:port`), the database and the user, never the password.

use std::time::Duration;

pub use crate::error::unreachable::{Reason, Unreachable};
use crate::error::{Error, Result};

/// How long a first connection may take: a checkout of the pool waits as long.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Opens one connection to `url` and closes it. `Ok` when the server accepts it; otherwise
/// [`Error::Unreachable`] with the cause, or [`Error::InvalidInput`] for a URL the driver
/// cannot read.
pub async fn reach(url: &str, timeout: Duration) -> Result<()> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
        Error::InvalidInput(crate::secret::redact_urls(&format!("database.url: {e}")))
    })?;
    config.connect_timeout(timeout);
    let unreachable = |reason| {
        Error::Unreachable(Unreachable {
            server: server_of(&config),
            database: config
                .get_dbname()
                .or(config.get_user())
                .unwrap_or("")
                .to_owned(),
            user: config.get_user().unwrap_or("").to_owned(),
            reason,
        })
    };
    // connect_timeout bounds the TCP connect; this bounds the start-up exchange too (a server
    // that accepts and never answers).
    let connected = tokio::time::timeout(
        timeout + Duration::from_secs(1),
        config.connect(tokio_postgres::NoTls),
    )
    .await;
    match connected {
        Err(_) => Err(unreachable(Reason::TimedOut(timeout))),
        Ok(Err(e)) => Err(unreachable(classify(&e, timeout))),
        Ok(Ok((client, connection))) => {
            // Dropping the client makes the connection send Terminate and finish.
            drop(client);
            let _ = connection.await;
            Ok(())
        }
    }
}

/// Which database `url` names, for an error to say: `(database, server, user)`, the server as
/// `host:port` (as [`Unreachable`] names it). Never the password.
pub fn identify(url: &str) -> Result<(String, String, String)> {
    let config: tokio_postgres::Config = url.parse().map_err(|e| {
        Error::InvalidInput(crate::secret::redact_urls(&format!("database.url: {e}")))
    })?;
    let user = config.get_user().unwrap_or("").to_owned();
    let database = config.get_dbname().unwrap_or(&user).to_owned();
    Ok((database, server_of(&config), user))
}

/// As [`reach`], for `briefrail migrate`: a missing database is fine (it creates it).
pub async fn reach_server(url: &str, timeout: Duration) -> Result<()> {
    match reach(url, timeout).await {
        Err(Error::Unreachable(Unreachable {
            reason: Reason::NoSuchDatabase,
            ..
        })) => Ok(()),
        other => other,
    }
}

/// What the server (its SQLSTATE) or the operating system (the I/O error's kind) said;
/// `timeout` is the connect timeout the driver was given (its timeouts report that).
pub fn classify(e: &tokio_postgres::Error, timeout: Duration) -> Reason {
    use tokio_postgres::error::SqlState;
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        return if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
        {
            Reason::Authentication {
                sqlstate: code.code().to_owned(),
                message: db.message().to_owned(),
            }
        } else if *code == SqlState::INVALID_CATALOG_NAME {
            Reason::NoSuchDatabase
        } else {
            Reason::Other(format!("SQLSTATE {}: {}", code.code(), db.message()))
        };
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => Reason::Refused,
                std::io::ErrorKind::TimedOut => Reason::TimedOut(timeout),
                _ => Reason::Other(io.to_string()),
            };
        }
        source = s.source();
    }
    // The client's own refusal (e.g. the server asks for a password the URL does not carry).
    Reason::Other(crate::secret::redact_urls(&e.to_string()))
}

/// `host:port` of every host the URL lists.
fn server_of(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match h {
                tokio_postgres::config::Host::Tcp(host) if host.contains(':') => {
                    format!("[{host}]:{port}")
                }
                tokio_postgres::config::Host::Tcp(host) => format!("{host}:{port}"),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(dir) => {
                    format!("{}/.s.PGSQL.{port}", dir.display())
                }
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_names_the_address_and_not_the_password() {
        let e = reach(
            "postgres://app:hunter2@127.0.0.1:1/ledger",
            Duration::from_secs(5),
        )
        .await
        .expect_err("nothing listens on port 1");
        let Error::Unreachable(u) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(u.reason, Reason::Refused);
        assert_eq!(u.server, "127.0.0.1:1");
        let text = crate::error::report(&e);
        assert!(
            text.contains("127.0.0.1:1") && text.contains("connection refused"),
            "{text}"
        );
        assert!(
            text.contains("\"ledger\"") && text.contains("\"app\""),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[test]
    fn every_listed_host_is_named() {
        let c: tokio_postgres::Config = "postgres://u@a:1,b:2/x".parse().unwrap();
        assert_eq!(server_of(&c), "a:1,b:2");
        let c: tokio_postgres::Config = "postgres://u@db/x".parse().unwrap();
        assert_eq!(server_of(&c), "db:5432");
    }
}
