//! Connections to the ledger's database: the pool every component shares, the embedded
//! migrations, the administrative statements that create databases, and the first connection
//! whose failure names its cause ([`reach`]), and the batching of short transactions
//! ([`batch`]).

pub mod admin;
pub mod batch;
pub mod migrate;
pub mod pool;
pub mod reach;

pub use pool::{Conn, Pool, PoolOptions, connect};
