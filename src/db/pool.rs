//! The bb8 pool of diesel-async connections.
//!
//! Every connection sets `lock_timeout` and `idle_in_transaction_session_timeout`
//! (docs/protocol.md, principle 5): a process that stalls while holding a row lock (a SIGSTOPped
//! node, a commit that hangs) is cut off by Postgres instead of freezing its matter.
//! Connections are not pinged on checkout (a round trip per statement). A checkout does look,
//! without a round trip, at whether a connection is already closed ([`Manager`]): its driver
//! task runs on the runtime that opened it, so a connection first opened inside an actix-web
//! worker closes when that worker's runtime ends (the HTTP server stops, a worker restarts),
//! and one whose server ended it closes when its driver reads the end of the socket. Such a
//! connection is dropped at checkout instead of failing the statement it was handed out for
//! (a drain on shutdown, an embedder's own work after a node stopped). A connection that breaks
//! while in use surfaces as an error on that use and is then discarded by the pool.
//!
//! A checkout takes the connection returned last (a LIFO queue, not bb8's default FIFO): a
//! session compiles each PL/pgSQL transition on its first call and keeps its plans and catalog
//! caches, so a node's statements are best served by the fewest sessions. With FIFO every
//! session of the pool took every kind of statement in turn, and each compiled them all
//! (CHANGELOG.md, "Performance"; `tests/ledger/ledger.rs`
//! `the_pool_hands_out_the_session_returned_last`).
//! The sessions at the bottom of the stack then sit idle until bb8's idle timeout closes them
//! (10 minutes); one that closed meanwhile is dropped at its next checkout (see above).

use std::time::Duration;

use diesel::ConnectionError;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, PoolError, PoolableConnection,
};
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use futures_util::FutureExt;

use crate::config::DatabaseSettings;
use crate::error::{Error, Redacted, Result};
use crate::secret::{SecretUrl, redact_urls};

/// The node's connection pool: every connection has the session timeouts of
/// [`PoolOptions`].
pub type Pool = bb8::Pool<Manager>;
/// A connection checked out of a [`Pool`]; it goes back when dropped.
pub type Conn<'a> = bb8::PooledConnection<'a, Manager>;

/// diesel-async's bb8 manager, with a checkout check that costs no round trip: a connection
/// that is closed, or whose transaction state is broken, is not handed out (see the module's
/// doc for how a pooled connection closes while idle).
pub struct Manager(AsyncDieselConnectionManager<AsyncPgConnection>);

impl bb8::ManageConnection for Manager {
    type Connection = AsyncPgConnection;
    type Error = PoolError;

    async fn connect(&self) -> std::result::Result<AsyncPgConnection, PoolError> {
        self.0.connect().await
    }

    async fn is_valid(&self, conn: &mut AsyncPgConnection) -> std::result::Result<(), PoolError> {
        if PoolableConnection::is_broken(conn) {
            Err(PoolError::QueryError(
                diesel::result::Error::BrokenTransactionManager,
            ))
        } else {
            Ok(())
        }
    }

    fn has_broken(&self, conn: &mut AsyncPgConnection) -> bool {
        self.0.has_broken(conn)
    }
}

/// How to build a [`Pool`]; [`PoolOptions::from`] a [`DatabaseSettings`].
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// The database.
    pub url: SecretUrl,
    /// The most connections open at once.
    pub size: u32,
    /// `lock_timeout` of every connection: a stalled lock holder is cut off by Postgres.
    pub lock_timeout: Duration,
    /// `idle_in_transaction_timeout` of every connection: a transaction left open is ended.
    pub idle_in_transaction_timeout: Duration,
    /// How long a checkout waits for a free connection before failing.
    pub connection_timeout: Duration,
}

impl From<&DatabaseSettings> for PoolOptions {
    fn from(s: &DatabaseSettings) -> Self {
        Self {
            url: s.url.clone(),
            size: s.pool_size,
            lock_timeout: Duration::from_millis(s.lock_timeout_ms),
            idle_in_transaction_timeout: Duration::from_millis(s.idle_in_transaction_timeout_ms),
            connection_timeout: Duration::from_secs(10),
        }
    }
}

impl PoolOptions {
    /// The defaults of `[database]`, for the database at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        let mut o = Self::from(&crate::config::Settings::defaults().database);
        o.url = SecretUrl::new(url);
        o
    }

    /// At most `size` connections.
    pub fn size(mut self, size: u32) -> Self {
        self.size = size;
        self
    }
}

/// Opens one connection with the session settings every briefrail connection carries. `jit`
/// is off: every ledger statement is a short index lookup, yet a statement over a large table
/// can be costed past `jit_above_cost`, and compiling it then takes far longer than running it
/// (reconcile over a large ledger, for one).
pub async fn establish(
    url: &str,
    lock_timeout: Duration,
    idle_in_transaction_timeout: Duration,
) -> diesel::ConnectionResult<AsyncPgConnection> {
    let mut conn = AsyncPgConnection::establish(url).await?;
    let setup = format!(
        "SET lock_timeout = {}; SET idle_in_transaction_session_timeout = {}; \
         SET statement_timeout = 60000; SET application_name = 'briefrail'; SET jit = off",
        lock_timeout.as_millis(),
        idle_in_transaction_timeout.as_millis()
    );
    conn.batch_execute(&setup)
        .await
        .map_err(|e| ConnectionError::BadConnection(e.to_string()))?;
    Ok(conn)
}

/// The last error a pool met opening a connection (its setup included), passwords redacted,
/// and when. bb8 hands such errors to the pool's error sink, never to the checkout waiting for
/// the connection, which then fails with only "Timed out in bb8": the checkout's error is given
/// this cause ([`timed_out`]). One slot per process: a node opens one pool; in a process with
/// several, the cause named may be another pool's.
static LAST_CONNECTION_ERROR: std::sync::Mutex<Option<(std::time::Instant, String)>> =
    std::sync::Mutex::new(None);

/// How recent a connection error must be to be named as a timed-out checkout's cause: a
/// checkout waits at most its `connection_timeout`, so an older error is another incident's.
const CAUSE_WITHIN: Duration = Duration::from_secs(60);

/// Keeps the last connection error ([`LAST_CONNECTION_ERROR`]) and logs it.
#[derive(Debug, Clone, Copy)]
struct KeepLastError;

impl bb8::ErrorSink<PoolError> for KeepLastError {
    fn sink(&self, e: PoolError) {
        let text = redact_urls(&e.to_string());
        tracing::warn!(error = %text, "database connection failed");
        if let Ok(mut last) = LAST_CONNECTION_ERROR.lock() {
            *last = Some((std::time::Instant::now(), text));
        }
    }

    fn boxed_clone(&self) -> Box<dyn bb8::ErrorSink<PoolError>> {
        Box::new(*self)
    }
}

/// The error of a checkout that timed out: bb8's own words, and the last connection error
/// met within the last minute when there is one (why no connection could be had).
pub fn timed_out() -> String {
    let cause = LAST_CONNECTION_ERROR
        .lock()
        .ok()
        .and_then(|last| last.clone())
        .filter(|(at, _)| at.elapsed() <= CAUSE_WITHIN);
    match cause {
        Some((_, cause)) => format!("Timed out in bb8; last connection error: {cause}"),
        None => "Timed out in bb8".to_owned(),
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for Error {
    /// A timed-out checkout names the last connection error as its cause
    /// (`timed_out`); it lives here, beside the cause it names, so the
    /// error type needs nothing of the pool.
    fn from(e: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        match e {
            bb8::RunError::TimedOut => Error::Connection(Redacted::message(timed_out())),
            e => Error::connection(e),
        }
    }
}

/// Builds the pool (connections are opened lazily, on first use).
pub async fn connect(opts: &PoolOptions) -> Result<Pool> {
    let (lock, idle) = (opts.lock_timeout, opts.idle_in_transaction_timeout);
    let mut config = ManagerConfig::default();
    config.custom_setup = Box::new(move |url| establish(url, lock, idle).boxed());
    let manager = Manager(AsyncDieselConnectionManager::new_with_config(
        opts.url.expose(),
        config,
    ));
    let pool = bb8::Pool::builder()
        .max_size(opts.size)
        .queue_strategy(bb8::QueueStrategy::Lifo)
        // The check is `Manager::is_valid`: local state only, no round trip.
        .test_on_check_out(true)
        // Report a refused connection at once, with its reason, instead of a bare timeout.
        .retry_connection(false)
        // ...which bb8 gives only to the sink: the checkout's timeout names it (`timed_out`).
        .error_sink(Box::new(KeepLastError))
        .connection_timeout(opts.connection_timeout)
        .build_unchecked(manager);
    Ok(pool)
}
