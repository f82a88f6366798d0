//! The `ledger` test binary: ledger, batches, durability, retention, limits, plans, schema_drift, model_vs_sql, new_session, trust.

#[path = "../common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "../model/mod.rs"]
mod model;

mod batches;
mod durability;
mod ledger;
mod limits;
mod model_vs_sql;
mod new_session;
mod plans;
mod retention;
mod schema_drift;
mod trust;
