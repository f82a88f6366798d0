//! The ledger clock: the one time every statement of the ledger reads.
//!
//! `ops.now()` is `now()` plus the offset held in `ops.ledger_clock`, and `ops.clock()` is
//! `clock_timestamp()` plus the same offset (`src/ledger/live/now.sql`, `clock.sql`).
//! Every lease deadline, backoff, quiet period, republication spacing and run stamp of the
//! ledger is written and compared through them, and so are the defaults of the ledger's time
//! columns: under any offset they agree with one another.
//!
//! **Production never writes `ops.ledger_clock`.** With no row the offset is 0 and the ledger
//! clock is the database clock, exactly. Nothing in production reads the table either (status
//! and readiness do not look at it). Only tests write it, through
//! `briefrail::testing::advance_ledger_clock` (feature `testing`), to hand the statements a time
//! instead of sleeping past a lease: a table row, so the advance holds for every connection and
//! every process on that database.
//!
//! Rust that writes or compares a time of the ledger uses [`ledger_now()`], never
//! `diesel::dsl::now`.

diesel::define_sql_function! {
    /// `ops.now()`: the ledger's `now()` (the transaction's start, plus the ledger clock's offset).
    #[sql_name = "ops.now"]
    fn ledger_now() -> Timestamptz;
}
