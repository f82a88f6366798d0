//! A one-statement transaction with BEGIN in the statement's flight: BEGIN and the statement
//! are written to the connection together, and COMMIT follows the statement's answer. Two round
//! trips where three were sequential; under load each round trip costs a scheduler wake-up on
//! both sides, and a commit waits for each.
//!
//! COMMIT still goes out only once the statement has answered, so the transaction on the wire
//! is what it was (a fault that holds or cuts a COMMIT acts on the same message), and what
//! happened is read from what the database answered, never guessed:
//!
//! * the statement answered and COMMIT succeeded: committed, and the answer is the outcome;
//! * the server refused the statement: nothing was written (the transaction is rolled back);
//! * the statement's answer never came (the connection broke): nothing was written either, as
//!   no COMMIT was sent and a transaction without one never commits;
//! * COMMIT failed or its answer was lost: the outcome is unknown, and the caller settles it
//!   from the ledger.
//!
//! BEGIN is sent first (a future sends its request when it is first polled, and BEGIN's is
//! polled first), so the statement, prepared or not, runs inside the transaction.
//!
//! The transaction is outside diesel's transaction manager, which is what tells the pool a
//! connection was left mid-transaction. So [`hold`] marks the connection broken for the
//! flight's duration and [`release`] marks it sound once the transaction has ended: a caller
//! whose future is dropped mid-flight (a timeout, a shutdown) leaves a connection the pool
//! discards, never one inside an open transaction that would swallow the next caller's writes.

use std::future::Future;

use diesel::connection::TransactionManagerStatus;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel_async::{
    AnsiTransactionManager, AsyncPgConnection, SimpleAsyncConnection, TransactionManager,
};

/// What a flight's database said.
#[derive(Debug)]
pub enum Flight<T> {
    /// The statement answered and COMMIT succeeded.
    Committed(T),
    /// The server refused the statement: nothing of it was written.
    Refused(DieselError),
    /// The flight failed before COMMIT was sent: nothing of it was written.
    NotCommitted(DieselError),
    /// COMMIT failed or its answer was lost: whether it committed is unknown.
    Unknown(DieselError),
}

impl<T> Flight<T> {
    /// The same outcome with the committed answer mapped.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Flight<U> {
        match self {
            Flight::Committed(answer) => Flight::Committed(f(answer)),
            Flight::Refused(e) => Flight::Refused(e),
            Flight::NotCommitted(e) => Flight::NotCommitted(e),
            Flight::Unknown(e) => Flight::Unknown(e),
        }
    }
}

/// BEGIN and `statement` (a query issued on `conn`, not yet polled) in one flight, then COMMIT.
/// Between [`hold`] and [`release`].
pub async fn begin_with<T, S>(conn: &AsyncPgConnection, statement: S) -> Flight<T>
where
    S: Future<Output = Result<T, DieselError>>,
{
    let mut on = conn;
    let begin = async move { on.batch_execute("BEGIN").await };
    let (began, answer) = futures_util::future::join(begin, statement).await;
    let mut on = conn;
    match (began, answer) {
        (Ok(()), Ok(answer)) => match on.batch_execute("COMMIT").await {
            Ok(()) => Flight::Committed(answer),
            Err(e) => Flight::Unknown(e),
        },
        (_, Err(e)) => {
            // Ends the aborted transaction; a connection that cannot is closed, and the pool
            // drops it.
            let _ = on.batch_execute("ROLLBACK").await;
            if said_by_the_server(&e) {
                Flight::Refused(e)
            } else {
                Flight::NotCommitted(e)
            }
        }
        // BEGIN failed and the statement answered: it ran as a transaction of its own.
        (Err(e), Ok(_)) => {
            let _ = on.batch_execute("ROLLBACK").await;
            Flight::Unknown(e)
        }
    }
}

/// Marks `conn` broken until [`release`]: taken before a flight.
pub fn hold(conn: &mut AsyncPgConnection) {
    AnsiTransactionManager::transaction_manager_status_mut(conn).set_in_error();
}

/// Marks `conn` sound again after a flight that ended its transaction (committed, or rolled
/// back). After an unknown outcome it stays broken: the pool drops it.
pub fn release<T>(conn: &mut AsyncPgConnection, flight: &Flight<T>) {
    if !matches!(flight, Flight::Unknown(_)) {
        *AnsiTransactionManager::transaction_manager_status_mut(conn) =
            TransactionManagerStatus::default();
    }
}

/// An error the server sent (it has a SQLSTATE). A connection that closed or could not take
/// the request also comes back as a `DatabaseError`, of these two kinds: the server said
/// nothing then.
fn said_by_the_server(e: &DieselError) -> bool {
    matches!(e, DieselError::DatabaseError(kind, _)
        if !matches!(kind, DatabaseErrorKind::UnableToSendCommand | DatabaseErrorKind::ClosedConnection))
}
