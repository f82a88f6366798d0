//! Connections to the ledger's database: the pool every component shares, the embedded
//! migrations, and the administrative statements that create databases.

pub mod admin;
pub mod migrate;
pub mod pool;

pub use pool::{Conn, Pool, PoolOptions, connect};
