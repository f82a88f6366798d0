// @generated from the migrated database by tests/ledger/schema_drift.rs (BRIEFRAIL_BLESS_SCHEMA=1).
// Do not edit by hand: that test fails when this file drifts from migrations/.

pub mod ops {
    diesel::table! {
        ops.build_permits (firm_id, matter_id) {
            firm_id -> Uuid,
            matter_id -> Uuid,
            node_id -> Text,
            granted_at -> Timestamptz,
            expires_at -> Timestamptz,
        }
    }

    diesel::table! {
        ops.console_sessions (session_hash) {
            session_hash -> Bytea,
            csrf_token -> Text,
            created_at -> Timestamptz,
            expires_at -> Timestamptz,
        }
    }

    diesel::table! {
        ops.consumed_events (consumer, event_id) {
            consumer -> Text,
            event_id -> Uuid,
            consumed_at -> Timestamptz,
        }
    }

    diesel::table! {
        ops.dead_letters (dead_letter_id) {
            dead_letter_id -> Uuid,
            consumer -> Text,
            event_id -> Nullable<Uuid>,
            routing_key -> Text,
            body -> Bytea,
            body_truncated -> Bool,
            traceparent -> Nullable<Text>,
            reason -> Text,
            node_id -> Text,
            refused_at -> Timestamptz,
            replays -> Int4,
            resolved_at -> Nullable<Timestamptz>,
            resolution -> Nullable<Text>,
            routing_key_bytes -> Nullable<Bytea>,
        }
    }

    diesel::table! {
        ops.domain_event_outbox (event_id) {
            event_id -> Uuid,
            seq -> Int8,
            firm_id -> Uuid,
            matter_id -> Uuid,
            event_name -> Text,
            payload -> Jsonb,
            traceparent -> Nullable<Text>,
            created_at -> Timestamptz,
            published_at -> Nullable<Timestamptz>,
            publish_attempts -> Int4,
            last_error -> Nullable<Text>,
            next_attempt_at -> Nullable<Timestamptz>,
            xact_id -> Int8,
            republish_count -> Int4,
            demand_class -> Text,
        }
    }

    diesel::table! {
        ops.firms (firm_id) {
            firm_id -> Uuid,
            name -> Nullable<Text>,
            weight -> Int4,
            paused -> Bool,
            updated_at -> Timestamptz,
        }
    }

    diesel::table! {
        ops.ledger_clock (only_row) {
            only_row -> Bool,
            offset_seconds -> Float8,
        }
    }

    diesel::table! {
        ops.matter_frame_jobs (firm_id, matter_id) {
            firm_id -> Uuid,
            matter_id -> Uuid,
            run_status -> Text,
            rebuild_needed -> Bool,
            requested_generation -> Int8,
            claimed_generation -> Int8,
            claimed_at -> Nullable<Timestamptz>,
            landed_generation -> Int8,
            consecutive_failures -> Int4,
            not_before -> Nullable<Timestamptz>,
            updated_at -> Timestamptz,
            claimed_snapshot -> Nullable<Text>,
            claimed_run_id -> Nullable<Uuid>,
            lease_seconds -> Nullable<Float8>,
            lease_expires_at -> Nullable<Timestamptz>,
            claimed_cluster -> Nullable<Int8>,
        }
    }

    diesel::table! {
        ops.matter_frame_runs (run_id) {
            run_id -> Uuid,
            firm_id -> Uuid,
            matter_id -> Uuid,
            token -> Int8,
            node_id -> Text,
            started_at -> Timestamptz,
            heartbeat_at -> Timestamptz,
            finished_at -> Nullable<Timestamptz>,
            outcome -> Text,
            error -> Nullable<Text>,
            trace_id -> Nullable<Text>,
            event_ids -> Array<Nullable<Uuid>>,
        }
    }

    diesel::table! {
        ops.matter_frames (firm_id, matter_id, generation) {
            firm_id -> Uuid,
            matter_id -> Uuid,
            generation -> Int8,
            run_id -> Uuid,
            body -> Jsonb,
            created_at -> Timestamptz,
        }
    }

    diesel::table! {
        ops.nodes (node_id) {
            node_id -> Text,
            version -> Text,
            transport -> Text,
            heartbeat_seconds -> Float8,
            started_at -> Timestamptz,
            last_seen_at -> Timestamptz,
            stopped_at -> Nullable<Timestamptz>,
        }
    }

    diesel::table! {
        ops.rail (only_row) {
            only_row -> Bool,
            paused -> Bool,
            updated_at -> Timestamptz,
            max_running -> Nullable<Int4>,
            starts_per_minute -> Nullable<Int4>,
            tokens -> Nullable<Float8>,
            tokens_at -> Nullable<Timestamptz>,
            builder_held_until -> Nullable<Timestamptz>,
            builder_held_reason -> Nullable<Text>,
        }
    }

    diesel::table! {
        ops.retention_horizon (only_row) {
            only_row -> Bool,
            events_removed_through -> Timestamptz,
        }
    }

    diesel::allow_tables_to_appear_in_same_query!(
        build_permits,
        console_sessions,
        consumed_events,
        dead_letters,
        domain_event_outbox,
        firms,
        ledger_clock,
        matter_frame_jobs,
        matter_frame_runs,
        matter_frames,
        nodes,
        rail,
        retention_horizon,
    );
}

pub mod record {
    diesel::table! {
        record.documents (document_id) {
            document_id -> Uuid,
            firm_id -> Uuid,
            matter_id -> Uuid,
            title -> Text,
            dated -> Nullable<Date>,
            body -> Text,
            uploaded_at -> Timestamptz,
        }
    }

    diesel::table! {
        record.matters (firm_id, matter_id) {
            firm_id -> Uuid,
            matter_id -> Uuid,
            title -> Text,
            archived_at -> Nullable<Timestamptz>,
            created_at -> Timestamptz,
        }
    }

    diesel::allow_tables_to_appear_in_same_query!(documents, matters,);
}
