//! Connections to the ledger's database: the pool every component shares, the embedded
//! migrations and the 0.1.0 baseline's adoption of pre-release databases ([`baseline`]), the administrative statements that create databases, and the first connection
//! whose failure names its cause ([`reach`]), the batching of short transactions
//! ([`batch`]), a one-statement transaction whose BEGIN rides with the statement
//! ([`flight`]), and fixed SQL text a session prepares once ([`prepared`]).

pub mod admin;
pub mod baseline;
pub mod batch;
pub mod flight;
pub mod migrate;
pub mod pool;
pub mod prepared;
pub mod reach;

pub use pool::{Conn, Pool, PoolOptions, connect};
