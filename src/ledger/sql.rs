//! The ledger's SQL functions as diesel sees them: one declaration per transition function of
//! the live migration, with its SQL signature (which takes what the statement needs, hence
//! clippy's argument count is allowed). Only `transitions` and `commit` call them.
#![allow(clippy::too_many_arguments)]

use diesel::sql_types::{Array, BigInt, Bool, Double, Integer, Nullable, Text, Uuid as SqlUuid};

diesel::define_sql_function! {
    #[sql_name = "ops.demand"]
    fn demand(firm: SqlUuid, matter: SqlUuid, xact: Nullable<BigInt>) -> Nullable<BigInt>;
}
diesel::define_sql_function! {
    #[sql_name = "ops.claim"]
    fn claim(firm: SqlUuid, matter: SqlUuid, lease_secs: Double, run_id: SqlUuid, node: Text,
             trace_id: Nullable<Text>, event_ids: Array<SqlUuid>,
        only_unserved: Bool, max_attempts: Integer) -> Nullable<BigInt>;
}
diesel::define_sql_function! {
    #[sql_name = "ops.claim_batch"]
    fn claim_batch(firms: Array<SqlUuid>, matters: Array<SqlUuid>, lease_secs: Array<Double>,
                   run_ids: Array<SqlUuid>, nodes: Array<Text>, trace_ids: Array<Nullable<Text>>,
                   event_ids: Array<Text>, only_unserved: Array<Bool>,
                   max_attempts: Array<Integer>) -> Array<Nullable<BigInt>>;
}
diesel::define_sql_function! {
    #[sql_name = "ops.record_lost_claim"]
    fn record_lost_claim(firm: SqlUuid, matter: SqlUuid) -> Nullable<BigInt>;
}
diesel::define_sql_function! {
    #[sql_name = "ops.heartbeat"]
    fn heartbeat(firm: SqlUuid, matter: SqlUuid, token: BigInt, run_id: SqlUuid) -> Bool;
}
diesel::define_sql_function! {
    #[sql_name = "ops.commit_claim"]
    fn commit_claim(firm: SqlUuid, matter: SqlUuid, token: BigInt, run_id: SqlUuid,
                    next_run_id: SqlUuid, node: Text) -> Nullable<BigInt>;
}
diesel::define_sql_function! {
    #[sql_name = "ops.insert_frame"]
    fn insert_frame(firm: SqlUuid, matter: SqlUuid, token: BigInt, run_id: SqlUuid, body: Text) -> Nullable<Text>;
}
diesel::define_sql_function! {
    #[sql_name = "ops.commit_frame"]
    fn commit_frame(firm: SqlUuid, matter: SqlUuid, token: BigInt, run_id: SqlUuid,
                    next_run_id: SqlUuid, node: Text, body: Text) -> Nullable<BigInt>;
}
diesel::define_sql_function! {
    #[sql_name = "ops.commit_frames"]
    fn commit_frames(firms: Array<SqlUuid>, matters: Array<SqlUuid>, tokens: Array<BigInt>,
                     run_ids: Array<SqlUuid>, next_run_ids: Array<SqlUuid>, nodes: Array<Text>,
                     bodies: Array<Text>) -> Array<Nullable<BigInt>>;
}
diesel::define_sql_function! {
    #[sql_name = "ops.start_lease"]
    fn start_lease(firm: SqlUuid, matter: SqlUuid, run_id: SqlUuid) -> Bool;
}
diesel::define_sql_function! {
    #[sql_name = "ops.fail_claim"]
    fn fail_claim(firm: SqlUuid, matter: SqlUuid, token: BigInt, run_id: SqlUuid, error: Text,
                  permanent: Bool, max_attempts: Integer, backoff_base_secs: Double,
                  backoff_max_secs: Double) -> Bool;
}
diesel::define_sql_function! {
    #[sql_name = "ops.release_claim"]
    fn release_claim(firm: SqlUuid, matter: SqlUuid, token: BigInt, run_id: SqlUuid, reason: Text) -> Bool;
}
diesel::define_sql_function! {
    #[sql_name = "ops.record_fenced"]
    fn record_fenced(run_id: SqlUuid, error: Text) -> Bool;
}

/// Run errors are for operators; a runaway stderr must not bloat the ledger, and a NUL in it
/// must not make the ledger refuse the failure (see [`super::text`]).
pub(super) fn bounded(s: &str) -> String {
    super::text::storable_within(s, 4000)
}
