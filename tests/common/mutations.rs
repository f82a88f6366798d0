//! Mutation controls for the real ledger: named, deliberate bugs in the live SQL (each
//! function's text as a migrated database runs it: `src/ledger/live/<function>.sql`, generated
//! and checked by `tests/ledger/schema_drift.rs`), and the guarantee tests that must fail under each,
//! the way the model check's negative controls must find a counterexample.
//!
//! A mutation is SQL run on every database [`briefrail::testing::TestDb::new`] creates while
//! [`briefrail::testing::MUTATION_ENV`] holds it: usually a transition function redefined from
//! its live text with one clause changed; sometimes a key or trigger dropped, or a storage
//! parameter reset. [`assert_caught`] re-runs this test binary, one killer
//! test at a time, with the mutation set, and fails unless every killer fails. So a guarantee
//! test that stops being able to see its bug fails the suite, and a change to the live SQL that
//! a mutation no longer matches fails it too (the mutation names what it expected to find).

use std::ops::Range;
use std::path::Path;
use std::process::Command;

/// One deliberate bug.
pub struct Mutation {
    pub name: &'static str,
    /// The guarantee it breaks, in words.
    pub breaks: &'static str,
    /// What plants it, in order.
    pub plants: &'static [Plant],
    /// `binary::module::test` of every test that must fail under it.
    pub killers: &'static [&'static str],
}

/// One part of a planted bug.
pub enum Plant {
    /// `ops.<function>` redefined from its live text with `edits` made at the rule marked
    /// `-- rule: <rule>` (see [`plant`]).
    Rule {
        function: &'static str,
        rule: &'static str,
        edits: &'static [(&'static str, &'static str)],
    },
    /// SQL of its own: a key or trigger dropped, a setting reset.
    Sql(&'static str),
}

impl Mutation {
    /// The SQL that plants it.
    pub fn sql(&self) -> String {
        self.plants
            .iter()
            .map(|p| match p {
                Plant::Rule {
                    function,
                    rule,
                    edits,
                } => patched(function, rule, edits),
                Plant::Sql(sql) => (*sql).to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The live text of `ops.<function>`, as `tests/ledger/schema_drift.rs` generated it.
fn live_sql(function: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/ledger/live")
        .join(format!("{function}.sql"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: no live text of ops.{function} (BRIEFRAIL_BLESS_SCHEMA=1 cargo test --workspace --test ledger schema_drift generates it)",
            path.display()
        )
    })
}

/// The live definition of `ops.<function>`: its `CREATE OR REPLACE FUNCTION` statement.
fn live_definition(function: &str) -> String {
    let sql = live_sql(function);
    let head = format!("CREATE OR REPLACE FUNCTION ops.{function}(");
    let start = sql
        .find(&head)
        .unwrap_or_else(|| panic!("no live definition of ops.{function}"));
    sql[start..].trim_end().to_owned()
}

/// The live definition of `ops.<function>` with `edits` made at the rule marked
/// `-- rule: <rule>` in it (see [`plant`]). Also how a test plants a fault of its own.
pub fn patched(function: &str, rule: &str, edits: &[(&str, &str)]) -> String {
    plant(&live_definition(function), function, rule, edits)
}

/// `def` (the text of `ops.<function>`) with each `(from, to)` of `edits` made at the rule
/// marked `-- rule: <rule>`. A marker after code marks the code before it on its line; a
/// marker alone on its line marks the statement that follows, up to its `;` (or the end of the
/// body). One rule may be marked in several places. Each `from` is found with whitespace
/// ignored, so reformatting the function does not move a planted bug: it must occur exactly
/// once in all the text the marker marks together, and every marked place must be changed.
/// Anything else panics naming the function and the marker, so a bug is never planted half.
pub fn plant(def: &str, function: &str, rule: &str, edits: &[(&str, &str)]) -> String {
    let regions = marked(def, function, rule);
    let mut changed = vec![false; regions.len()];
    let mut spans: Vec<(Range<usize>, &str)> = Vec::new();
    for (from, to) in edits {
        let hits: Vec<(usize, Range<usize>)> = regions
            .iter()
            .enumerate()
            .flat_map(|(k, r)| {
                find_loose(&def[r.clone()], from)
                    .into_iter()
                    .map(move |m| (k, r.start + m.start..r.start + m.end))
            })
            .collect();
        let [(k, span)] = &hits[..] else {
            let text: Vec<&str> = regions.iter().map(|r| def[r.clone()].trim()).collect();
            panic!(
                "mutation of ops.{function} at `-- rule: {rule}`: {from:?} occurs {} times in \
                 the text it marks (whitespace aside; the SQL changed: update the mutation): {text:?}",
                hits.len()
            );
        };
        assert!(
            spans
                .iter()
                .all(|(s, _)| s.end <= span.start || span.end <= s.start),
            "mutation of ops.{function} at `-- rule: {rule}`: {from:?} overlaps another edit"
        );
        changed[*k] = true;
        spans.push((span.clone(), to));
    }
    assert!(
        changed.iter().all(|c| *c),
        "mutation of ops.{function} at `-- rule: {rule}`: the marker marks {} places and the \
         edits change {} of them (a rule marked in a new place needs its edit too)",
        regions.len(),
        changed.iter().filter(|c| **c).count()
    );
    // Every edit is found in the text as it was; made from the last, each leaves the places of
    // the others where they were.
    spans.sort_by_key(|(s, _)| std::cmp::Reverse(s.start));
    let mut def = def.to_owned();
    for (span, to) in spans {
        def.replace_range(span, to);
    }
    def
}

/// The text marked `-- rule: <rule>` in `def` (see [`plant`]); panics naming the function and
/// the marker when there is none.
fn marked(def: &str, function: &str, rule: &str) -> Vec<Range<usize>> {
    const MARKER: &str = "-- rule:";
    let mut regions = Vec::new();
    let mut at = 0;
    for line in def.split_inclusive('\n') {
        if let Some(pos) = line.find(MARKER)
            && line[pos + MARKER.len()..].trim() == rule
        {
            if line[..pos].trim().is_empty() {
                let start = at + line.len();
                regions.push(start..statement_end(def, start));
            } else {
                regions.push(at..at + pos);
            }
        }
        at += line.len();
    }
    assert!(
        !regions.is_empty(),
        "ops.{function} has no marker `-- rule: {rule}` (a mutation plants its bug there: \
         mark the rule in the migration, or update the mutation)"
    );
    regions
}

/// Where the SQL statement that starts at byte `from` of `def` ends: after its first `;`
/// outside a string literal or a comment, or at the end of `def`.
fn statement_end(def: &str, from: usize) -> usize {
    let b = def.as_bytes();
    let mut i = from;
    while i < b.len() {
        match b[i] {
            b'\'' => {
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b';' => return i + 1,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// The byte ranges of `text` where `pattern` occurs, whitespace ignored in both (a range
/// runs from the first to the last character matched).
fn find_loose(text: &str, pattern: &str) -> Vec<Range<usize>> {
    let pattern: Vec<char> = pattern.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(!pattern.is_empty(), "a mutation edits nothing");
    let chars: Vec<(usize, char)> = text
        .char_indices()
        .filter(|(_, c)| !c.is_whitespace())
        .collect();
    chars
        .windows(pattern.len())
        .filter(|w| w.iter().map(|(_, c)| *c).eq(pattern.iter().copied()))
        .map(|w| {
            let (last, c) = w[w.len() - 1];
            w[0].0..last + c.len_utf8()
        })
        .collect()
}

/// `def` reformatted the way a person or a formatter might, changing only whitespace: every
/// line re-indented, runs of blanks made one, blanks inside parentheses and after commas, and
/// each `AND` of a line without a comment on a line of its own.
fn reflowed(def: &str) -> String {
    let mut out = String::new();
    for line in def.lines() {
        let indent = line.len() - line.trim_start().len();
        let (code, comment) = match line.find("--") {
            Some(pos) => line.split_at(pos),
            None => (line, ""),
        };
        let code = code
            .replace('(', "( ")
            .replace(')', " )")
            .replace(',', ", ");
        let mut code = code.split_whitespace().collect::<Vec<_>>().join(" ");
        if comment.is_empty() {
            code = code.replace(" AND ", "\n        AND ");
        }
        let pad = " ".repeat(indent * 2 + 3);
        out.push_str(&format!("{pad}{code}  {comment}\n"));
    }
    out
}

/// Every mutation planted at a marker plants the same bug (whitespace aside) in its function
/// reformatted by [`reflowed`]: a mutation follows its rule, not the layout of the SQL.
pub fn assert_every_plant_survives_reformatting() {
    let squash = |s: &str| s.split_whitespace().collect::<String>();
    let mut planted = 0;
    for m in all() {
        for p in m.plants {
            if let Plant::Rule {
                function,
                rule,
                edits,
            } = p
            {
                let def = live_definition(function);
                let re = reflowed(&def);
                assert_eq!(
                    squash(&def),
                    squash(&re),
                    "reflowed changed more than whitespace"
                );
                assert_ne!(def, re, "ops.{function}: reflowed changed nothing");
                assert_eq!(
                    squash(&plant(&re, function, rule, edits)),
                    squash(&plant(&def, function, rule, edits)),
                    "mutation {} plants another bug in ops.{function} reformatted",
                    m.name
                );
                planted += 1;
            }
        }
    }
    assert!(planted > 0, "no mutation is planted at a marker");
}

/// Every mutation, with its killers.
pub fn all() -> Vec<Mutation> {
    vec![
        Mutation {
            name: "fair_order_ignores_the_firms_load",
            breaks: "fairness: the next claim goes to the firm with the fewest builds running",
            plants: &[Plant::Rule {
                function: "fair_order",
                rule: "fair share",
                // The whole share, the burst's own turns with it: with those kept, a burst of
                // two free holds still goes one to each firm, and a real node's order then
                // hides the bug whenever builds end together (`counts_no_pick_of_the_burst`
                // plants that half alone).
                edits: &[(
                    "(coalesce(r.n, 0) + t.pending + t.ahead)::float8 / coalesce(f.weight, 1)",
                    "0::float8",
                )],
            }],
            killers: &[
                "rail::fairness::the_firm_with_the_fewest_builds_running_per_weight_is_picked_first",
                "rail::fairness::one_firms_backlog_never_makes_another_firms_upload_wait",
            ],
        },
        Mutation {
            name: "fair_order_counts_no_pick_of_the_burst",
            breaks: "fairness: a burst of holds is shared between firms, not all to the first",
            plants: &[Plant::Rule {
                function: "fair_order",
                rule: "fair share",
                edits: &[(" + t.ahead", "")],
            }],
            killers: &[
                "rail::fairness::a_burst_of_holds_is_shared_as_picks_one_at_a_time_would_share_it",
            ],
        },
        Mutation {
            name: "fair_order_ignores_the_weights",
            breaks: "fairness: a firm's share of scarce slots follows its weight",
            plants: &[Plant::Rule {
                function: "fair_order",
                rule: "fair share",
                edits: &[(" / coalesce(f.weight, 1)", "")],
            }],
            killers: &[
                "rail::fairness::the_firm_with_the_fewest_builds_running_per_weight_is_picked_first",
            ],
        },
        Mutation {
            name: "fair_order_background_before_interactive",
            breaks: "fairness: interactive demands are claimed before background ones",
            plants: &[Plant::Rule {
                function: "fair_order",
                rule: "interactive first",
                edits: &[("NOT (c.class", "(c.class")],
            }],
            killers: &[
                "rail::fairness::interactive_demands_are_picked_before_background_ones",
                "rail::fairness::one_firms_backlog_never_makes_another_firms_upload_wait",
            ],
        },
        Mutation {
            name: "fair_order_never_promotes_background",
            breaks: "fairness: background work is never starved (promoted after the bound)",
            plants: &[Plant::Rule {
                function: "fair_order",
                rule: "interactive first",
                edits: &[(" OR c.waited >= p_promote_secs", "")],
            }],
            killers: &[
                "rail::fairness::a_background_demand_waiting_past_the_bound_is_served_as_interactive",
            ],
        },
        Mutation {
            name: "fair_order_serves_paused_firms",
            breaks: "pause: a paused firm's demands wait until it is resumed",
            plants: &[Plant::Rule {
                function: "fair_order",
                rule: "paused firms wait",
                edits: &[("NOT coalesce(f.paused, false)", "true")],
            }],
            killers: &["rail::fairness::a_paused_firm_waits_and_a_paused_rail_holds_every_firm"],
        },
        Mutation {
            name: "fair_order_ignores_the_paused_rail",
            breaks: "pause: nothing is claimed while the rail is paused",
            plants: &[Plant::Rule {
                function: "fair_order",
                rule: "rail paused",
                edits: &[(
                    "coalesce((SELECT r.paused FROM ops.rail r), false)",
                    "false",
                )],
            }],
            killers: &["rail::fairness::a_paused_firm_waits_and_a_paused_rail_holds_every_firm"],
        },
        Mutation {
            name: "fair_order_youngest_first",
            breaks: "fairness: within a firm's share, the oldest demand is claimed first",
            plants: &[Plant::Rule {
                function: "fair_order",
                rule: "oldest first",
                edits: &[("-c.waited", "c.waited")],
            }],
            killers: &["rail::fairness::within_a_firms_share_the_oldest_demand_is_picked_first"],
        },
        Mutation {
            name: "take_permit_without_the_lock",
            breaks: "limits: two nodes asking at once cannot both take the cap's last slot",
            plants: &[Plant::Rule {
                function: "take_permit",
                rule: "one grant at a time",
                edits: &[(" FOR UPDATE", "")],
            }],
            killers: &["ledger::limits::a_cap_is_never_exceeded_by_nodes_asking_at_once"],
        },
        Mutation {
            name: "take_permit_ignores_the_cap",
            breaks: "limits: builds running on every node together never exceed the cap",
            plants: &[Plant::Rule {
                function: "take_permit",
                rule: "global cap",
                edits: &[("v_running >= r.max_running", "false")],
            }],
            killers: &[
                "ledger::limits::a_cap_is_never_exceeded_by_nodes_asking_at_once",
                "ledger::limits::a_permit_counts_until_its_claim_runs_or_it_is_given_back",
                "ledger::limits::two_nodes_never_run_more_builds_than_the_cap_together",
            ],
        },
        Mutation {
            name: "take_permit_forgets_unclaimed_permits",
            breaks: "limits: a permit granted and not yet claimed counts against the cap",
            plants: &[Plant::Rule {
                function: "take_permit",
                rule: "unclaimed permits count",
                edits: &[(
                    "AND NOT coalesce(j.claimed_at >= p.granted_at, false)",
                    "AND false",
                )],
            }],
            killers: &[
                "ledger::limits::a_cap_is_never_exceeded_by_nodes_asking_at_once",
                "ledger::limits::a_permit_counts_until_its_claim_runs_or_it_is_given_back",
            ],
        },
        Mutation {
            name: "take_permit_ignores_the_rate",
            breaks: "limits: builds started per minute on every node together obey the rate",
            plants: &[Plant::Rule {
                function: "take_permit",
                rule: "rate limit",
                edits: &[("v_tokens < 1", "false")],
            }],
            killers: &["ledger::limits::the_rate_limit_spaces_starts_across_the_fleet"],
        },
        Mutation {
            name: "take_permit_ignores_the_held_builder",
            breaks: "limits: no build starts on any node before the time the builder gave",
            plants: &[Plant::Rule {
                function: "take_permit",
                rule: "builder held",
                edits: &[("r.builder_held_until > v_now", "false")],
            }],
            killers: &[
                "ledger::limits::a_held_builder_holds_every_start_until_its_time",
                "ledger::limits::a_builder_asking_to_wait_holds_every_start_and_spends_no_retry",
            ],
        },
        Mutation {
            name: "claim_batch_skips_the_flush",
            breaks: "durability: a claim's commit waits for the disk, so no token is handed out twice",
            // Not at a marker: the line the redone transitions carry, copied into the claim.
            plants: &[Plant::Sql(
                "DO $plant$ BEGIN EXECUTE replace(pg_get_functiondef('ops.claim_batch'::regproc), \
                 E'\\nBEGIN\\n', \
                 E'\\nBEGIN\\n    PERFORM set_config(''synchronous_commit'', ''off'', true);\\n'); \
                 END $plant$;",
            )],
            killers: &[
                "ledger::durability::claims_and_commits_wait_for_the_disk_and_redone_work_does_not",
            ],
        },
        Mutation {
            name: "outbox_notified_by_plpgsql",
            breaks: "speed: a fact on a new session loads no PL/pgSQL inside counsel's wait",
            // Not a function: the trigger as the baseline made it.
            plants: &[Plant::Sql(
                "DROP TRIGGER domain_event_outbox_notify ON ops.domain_event_outbox; \
                 CREATE TRIGGER domain_event_outbox_notify AFTER INSERT ON ops.domain_event_outbox \
                 FOR EACH STATEMENT EXECUTE FUNCTION ops.notify_outbox();",
            )],
            killers: &["ledger::new_session::a_fact_on_a_new_session_runs_no_plpgsql"],
        },
        Mutation {
            name: "clock_offset_in_plpgsql",
            breaks: "speed: a fact on a new session loads no PL/pgSQL inside counsel's wait",
            // Not at a marker: the whole function, in the language it was written in before.
            plants: &[Plant::Sql(
                "CREATE OR REPLACE FUNCTION ops.clock_offset() RETURNS double precision \
                 LANGUAGE plpgsql STABLE COST 1 AS $f$ BEGIN \
                 RETURN set_config('briefrail.clock_offset', \
                 coalesce((SELECT c.offset_seconds FROM ops.ledger_clock c), 0)::text, true)::double precision; \
                 END $f$;",
            )],
            killers: &["ledger::new_session::a_fact_on_a_new_session_runs_no_plpgsql"],
        },
        Mutation {
            name: "outbox_notifies_nobody",
            breaks: "speed: an idle node hears of a fact at its commit, not at its next poll",
            plants: &[Plant::Sql(
                "DROP TRIGGER domain_event_outbox_notify ON ops.domain_event_outbox;",
            )],
            killers: &["ledger::new_session::an_upload_on_a_new_session_notifies_at_commit"],
        },
        Mutation {
            name: "outbox_pages_filled_to_the_brim",
            breaks: "speed: the relay's lease rewrites each row on its own page (no index entries)",
            // Not a function: the outbox's storage parameter, taken back.
            plants: &[Plant::Sql(
                "ALTER TABLE ops.domain_event_outbox RESET (fillfactor);",
            )],
            killers: &["ledger::ledger::the_relays_lease_rewrites_its_rows_in_place"],
        },
        Mutation {
            name: "claim_batch_in_arrival_order",
            breaks: "batches: two batches over the same rows lock them in one order (no deadlock)",
            plants: &[Plant::Rule {
                function: "claim_batch",
                rule: "lock in key order",
                edits: &[
                    ("ORDER BY u.firm, u.matter)", ")"),
                    ("ORDER BY a.firm, a.matter", ""),
                ],
            }],
            killers: &[
                "ledger::batches::a_claim_batch_behind_a_trigger_holding_the_lowest_row_waits_without_a_deadlock",
            ],
        },
        Mutation {
            name: "commit_frames_in_arrival_order",
            breaks: "batches: a commit batch and a trigger batch lock job rows in one order (no deadlock)",
            plants: &[Plant::Rule {
                function: "commit_claims",
                rule: "lock in key order",
                edits: &[("ORDER BY u.firm, u.matter)", "ORDER BY u.n)")],
            }],
            killers: &[
                "ledger::batches::a_commit_batch_behind_a_trigger_holding_the_lowest_row_waits_without_a_deadlock",
            ],
        },
        Mutation {
            name: "claim_by_rows_serves_what_was_served",
            breaks: "batches: a claim batch whose rows all exist claims what its claims alone would",
            plants: &[Plant::Rule {
                function: "claim_batch",
                rule: "retry only the unserved by row",
                edits: &[(
                    "AND (NOT a.only_unserved OR (j.landed_generation < j.requested_generation AND j.consecutive_failures < a.max_attempts))",
                    "",
                )],
            }],
            killers: &[
                "ledger::batches::both_forms_of_a_claim_batch_write_what_each_claim_alone_would",
            ],
        },
        Mutation {
            name: "claim_upsert_serves_what_was_served",
            breaks: "batches: a claim batch with a row missing claims what its claims alone would",
            plants: &[Plant::Rule {
                function: "claim_batch",
                rule: "retry only the unserved by upsert",
                edits: &[(
                    "AND (SELECT NOT a.only_unserved OR (j.landed_generation < j.requested_generation AND j.consecutive_failures < a.max_attempts) FROM member a WHERE a.run_id = excluded.claimed_run_id)",
                    "",
                )],
            }],
            killers: &[
                "ledger::batches::both_forms_of_a_claim_batch_write_what_each_claim_alone_would",
            ],
        },
        Mutation {
            name: "claim_batch_answers_in_lock_order",
            breaks: "batches: each member of a claim batch gets its own answer",
            plants: &[Plant::Rule {
                function: "claim_batch",
                rule: "answers in member order",
                edits: &[(
                    "array_agg(c.token ORDER BY m.n)",
                    "array_agg(c.token ORDER BY m.firm, m.matter)",
                )],
            }],
            killers: &["ledger::batches::a_claim_batch_answers_each_member_as_its_own_claim_would"],
        },
        Mutation {
            name: "commit_frames_answers_in_lock_order",
            breaks: "1 and batches: each member of a commit batch is fenced by its own claim",
            plants: &[Plant::Rule {
                function: "commit_claims",
                rule: "answers in member order",
                edits: &[("ORDER BY m.n)", "ORDER BY m.firm, m.matter)")],
            }],
            killers: &["ledger::batches::a_commit_batch_fences_each_member_by_its_own_claim"],
        },
        Mutation {
            name: "transitions_plan_by_statistics",
            breaks: "speed: a ledger analyzed while empty still reads each row by key",
            // The transitions plan by the statistics alone again: their settings that forbid a
            // sequential scan and a compiled plan reset.
            plants: &[Plant::Sql(PLANS_BY_STATISTICS)],
            killers: &["ledger::plans::a_ledger_analyzed_while_empty_still_reads_each_row_by_key"],
        },
        Mutation {
            name: "batch_joins_its_members_in_a_loop",
            breaks: "speed: a batch costs its size, not its square",
            // The batch functions as the release before had them (the migration's down.sql):
            // the consumer's gate asked each event's freshness of the inserted inbox rows once
            // per aggregate it fed, and the commit batch sorted its members again for each row.
            plants: &[Plant::Sql(include_str!(
                "../../migrations/2026-12-08-000001_batches_in_linear_time/down.sql"
            ))],
            killers: &["ledger::plans::a_batch_that_joins_its_members_never_joins_them_in_a_loop"],
        },
        Mutation {
            name: "commit_batch_joins_its_members_in_a_loop",
            breaks: "speed: a batch costs its size, not its square",
            // The commit batch's join of its members to their job rows planned as it likes.
            plants: &[Plant::Sql(
                "ALTER FUNCTION ops.commit_claims(uuid[], uuid[], bigint[], uuid[], uuid[], text[]) RESET enable_nestloop;",
            )],
            killers: &["ledger::plans::a_batch_that_joins_its_members_never_joins_them_in_a_loop"],
        },
        Mutation {
            name: "claim_compiles_its_statements",
            breaks: "speed: a transition that disables sequential scans turns JIT off",
            plants: &[Plant::Sql(
                "ALTER FUNCTION ops.claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean, integer) RESET jit;",
            )],
            killers: &[
                "ledger::plans::a_transition_that_disables_scans_never_compiles_its_statements",
            ],
        },
        Mutation {
            name: "claim_plans_each_call_anew",
            breaks: "speed: a transition keeps the generic plan from its first call",
            plants: &[Plant::Sql(
                "ALTER FUNCTION ops.claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean, integer) RESET plan_cache_mode;",
            )],
            killers: &["ledger::plans::a_transition_plans_generically_from_its_first_call"],
        },
        Mutation {
            name: "commit_reads_its_row_by_the_running_index",
            breaks: "speed: a transition reads its job row by its key, not through a partial index",
            plants: &[Plant::Rule {
                function: "commit_claims",
                rule: "job rows by position",
                edits: &[
                    ("WHERE j.ctid = ANY (v_rows) AND", "WHERE"),
                    (
                        "j.run_status IS NOT DISTINCT FROM 'running'",
                        "j.run_status = 'running'",
                    ),
                ],
            }],
            killers: &["ledger::plans::a_ledger_analyzed_while_empty_still_reads_each_row_by_key"],
        },
        Mutation {
            name: "commit_joins_its_members_to_the_job_rows",
            breaks: "speed: a batch finds each job row by its key, whatever a plan made on empty tables prefers",
            plants: &[
                Plant::Rule {
                    function: "commit_claims",
                    rule: "job rows by position",
                    edits: &[("WHERE j.ctid = ANY (v_rows) AND", "WHERE")],
                },
                Plant::Sql(
                    "ALTER FUNCTION ops.commit_claims(uuid[], uuid[], bigint[], uuid[], uuid[], text[]) RESET enable_indexscan;",
                ),
                // The join a plan made on empty tables may prefer, every time: without nested
                // loops (a probe by key per member), the members are hashed or merged against
                // a whole scan of the job rows' key.
                Plant::Sql(
                    "ALTER FUNCTION ops.commit_claims(uuid[], uuid[], bigint[], uuid[], uuid[], text[]) SET enable_nestloop TO off;",
                ),
            ],
            killers: &["ledger::plans::a_ledger_analyzed_while_empty_still_reads_each_row_by_key"],
        },
        Mutation {
            name: "superseded_runs_closed_by_a_join",
            breaks: "speed: a claim closes superseded runs by its matter's key",
            plants: &[Plant::Rule {
                function: "claim_batch",
                rule: "superseded runs by key",
                edits: &[(
                    "WHERE r.run_id = ANY (ops.open_runs(ARRAY(SELECT c.firm FROM claimed c), ARRAY(SELECT c.matter FROM claimed c))) AND r.outcome IS NOT DISTINCT FROM 'running'",
                    "FROM claimed c\n             WHERE r.firm_id = c.firm AND r.matter_id = c.matter AND r.outcome = 'running'",
                )],
            }],
            killers: &["ledger::plans::a_ledger_analyzed_while_empty_still_reads_each_row_by_key"],
        },
        Mutation {
            name: "open_runs_read_by_bitmap",
            breaks: "speed: a claim visits each dead entry of the open runs' index once",
            plants: &[Plant::Sql(
                "ALTER FUNCTION ops.open_runs(uuid[], uuid[]) SET enable_indexscan TO off RESET enable_bitmapscan;",
            )],
            killers: &["rebuilt::a_claim_visits_each_dead_entry_of_the_open_runs_index_once"],
        },
        Mutation {
            name: "clock_offset_kept_for_the_session",
            breaks: "6: the ledger clock is the database's, as every connection reads it now",
            plants: &[Plant::Rule {
                function: "clock_offset",
                rule: "offset for this transaction only",
                edits: &[("::text, true)", "::text, false)")],
            }],
            killers: &[
                "ledger::ledger::a_moved_ledger_clock_is_seen_by_the_next_transaction_of_every_connection",
            ],
        },
        Mutation {
            name: "commit_frames_with_the_first_token",
            breaks: "1: in a batch, a frame whose claim is not current never lands",
            plants: &[Plant::Rule {
                function: "commit_claims",
                rule: "fenced by its own claim",
                edits: &[(
                    "j.claimed_generation = m.token",
                    "j.claimed_generation = p_tokens[1]",
                )],
            }],
            killers: &["ledger::batches::a_commit_batch_fences_each_member_by_its_own_claim"],
        },
        Mutation {
            name: "commit_without_the_claims_identity",
            breaks: "1: a frame whose claim is not current never lands",
            plants: &[Plant::Rule {
                function: "commit_claims",
                rule: "fenced by its own claim",
                edits: &[(
                    "AND j.claimed_generation = m.token AND j.claimed_run_id = m.run_id",
                    "",
                )],
            }],
            killers: &[
                "ledger::model_vs_sql::the_model_and_the_sql_agree_on_random_sequences",
                "ledger::ledger::a_zombie_commit_is_fenced_after_the_sweep",
                "ledger::ledger::extra_writes_land_only_with_a_current_token",
                "ledger::trust::a_token_number_handed_out_twice_still_fences_the_old_holder",
            ],
        },
        Mutation {
            name: "commit_without_the_run_id",
            breaks: "1: a token number handed out twice fences the old holder",
            plants: &[Plant::Rule {
                function: "commit_claims",
                rule: "fenced by its own claim",
                edits: &[(" AND j.claimed_run_id = m.run_id", "")],
            }],
            killers: &[
                "ledger::trust::a_token_number_handed_out_twice_still_fences_the_old_holder",
                "install::restore::a_restore_of_a_dump_taken_mid_build_fences_the_lost_past_and_serves_every_demand",
            ],
        },
        Mutation {
            name: "heartbeat_without_the_claims_identity",
            breaks: "1: a zombie learns at its heartbeat that it is fenced",
            plants: &[Plant::Rule {
                function: "heartbeat",
                rule: "fenced by its own claim",
                edits: &[(
                    "AND claimed_generation = p_token AND claimed_run_id = p_run_id",
                    "",
                )],
            }],
            killers: &[
                "ledger::model_vs_sql::the_model_and_the_sql_agree_on_random_sequences",
                "ledger::ledger::a_claim_over_an_expired_lease_fences_the_old_token_without_a_sweep",
                "ledger::ledger::a_zombie_commit_is_fenced_after_the_sweep",
                "ledger::trust::a_token_number_handed_out_twice_still_fences_the_old_holder",
                "install::restore::a_restore_of_a_dump_taken_mid_build_fences_the_lost_past_and_serves_every_demand",
            ],
        },
        Mutation {
            name: "no_frames_primary_key",
            breaks: "2: at most one frame per token",
            plants: &[Plant::Sql(
                "ALTER TABLE ops.matter_frames DROP CONSTRAINT matter_frames_pkey",
            )],
            killers: &["ledger::ledger::at_most_one_frame_per_token"],
        },
        Mutation {
            name: "follow_up_dropped_on_commit",
            breaks: "3, 4: demands during a build cost exactly one follow-up, and are never dropped",
            plants: &[Plant::Rule {
                function: "commit_claims",
                rule: "archived matters get no follow-up",
                edits: &[(
                    "NOT ops.is_archived(x.firm, x.matter) AS live",
                    "false AS live",
                )],
            }],
            killers: &[
                "ledger::model_vs_sql::the_model_and_the_sql_agree_on_random_sequences",
                "ledger::ledger::twenty_demands_during_a_build_cost_exactly_one_follow_up",
                "ledger::ledger::a_demand_racing_a_commit_is_never_dropped",
            ],
        },
        Mutation {
            name: "lost_claim_not_recorded",
            breaks: "4: a demand that loses the claim race is recorded on the running row",
            plants: &[Plant::Rule {
                function: "record_lost_claim",
                rule: "the loser is recorded",
                edits: &[
                    (
                        "requested_generation = requested_generation + 1",
                        "requested_generation = requested_generation",
                    ),
                    ("rebuild_needed = true", "rebuild_needed = rebuild_needed"),
                ],
            }],
            killers: &[
                "ledger::model_vs_sql::the_model_and_the_sql_agree_on_random_sequences",
                "ledger::ledger::concurrent_claims_on_one_matter_yield_one_token_and_record_every_loser",
                "ledger::ledger::a_demand_racing_a_commit_is_never_dropped",
            ],
        },
        Mutation {
            name: "sweep_ignores_the_lease",
            breaks: "heartbeats keep a build's lease; another node's setting does not expire it",
            plants: &[Plant::Rule {
                function: "sweep",
                rule: "only expired leases",
                edits: &[(" AND j.lease_expires_at < ops.now()", "")],
            }],
            killers: &[
                "ledger::model_vs_sql::the_model_and_the_sql_agree_on_random_sequences",
                "ledger::ledger::a_heartbeat_keeps_a_long_build_from_being_swept",
                "ledger::trust::a_shorter_lease_on_another_node_does_not_expire_a_healthy_build",
            ],
        },
        Mutation {
            name: "claim_deadline_from_the_transactions_start",
            breaks: "a claim late in a long transaction is not born expired (catalogue row 15)",
            plants: &[Plant::Rule {
                function: "claim_batch",
                rule: "lease from the clock now",
                edits: &[
                    (
                        "ops.clock() + make_interval(secs => a.lease_secs)",
                        "ops.now() + make_interval(secs => a.lease_secs)",
                    ),
                    (
                        "ops.clock() + make_interval(secs => excluded.lease_seconds)",
                        "ops.now() + make_interval(secs => excluded.lease_seconds)",
                    ),
                ],
            }],
            killers: &["ledger::ledger::a_claim_late_in_a_long_transaction_is_not_born_expired"],
        },
        Mutation {
            name: "inbox_without_its_key",
            breaks: "5: a duplicated delivery has no second effect",
            plants: &[Plant::Sql(
                "ALTER TABLE ops.consumed_events DROP CONSTRAINT consumed_events_pkey",
            )],
            killers: &[
                "rail::transport::a_relay_crash_between_publish_and_mark_delivers_twice_and_applies_once",
                "rail::transport::the_postgres_transport_applies_each_event_once_and_survives_late_commits",
            ],
        },
        Mutation {
            name: "job_rows_deletable",
            breaks: "job rows are never deleted (no token ABA)",
            plants: &[Plant::Sql(
                "DROP TRIGGER matter_frame_jobs_no_delete ON ops.matter_frame_jobs;\n                 DROP TRIGGER matter_frame_jobs_no_truncate ON ops.matter_frame_jobs",
            )],
            killers: &["ledger::ledger::job_rows_cannot_be_deleted_so_tokens_never_restart"],
        },
        Mutation {
            name: "every_demand_covered",
            breaks: "4: a demand is covered only when a build already reads its fact",
            plants: &[Plant::Rule {
                function: "snapshot_covers",
                rule: "covered only if seen",
                edits: &[(
                    "AND pg_visible_in_snapshot(p_xact::text::xid8, p_snapshot::pg_snapshot)",
                    "OR true",
                )],
            }],
            killers: &[
                "ledger::model_vs_sql::the_model_and_the_sql_agree_on_random_sequences",
                "ledger::ledger::a_demand_for_a_fact_the_running_build_already_reads_is_covered",
                "ledger::trust::a_forged_nudge_changes_nothing_and_the_real_fact_still_reaches_the_brief",
            ],
        },
        Mutation {
            name: "coverage_ignores_the_cluster",
            breaks: "6: no snapshot stored by another cluster judges a fact",
            plants: &[Plant::Rule {
                function: "snapshot_covers",
                rule: "this cluster only",
                edits: &[(
                    "AND p_cluster IS NOT NULL AND p_cluster = ops.cluster_id()",
                    "",
                )],
            }],
            killers: &["ledger::trust::after_a_logical_move_new_facts_still_reach_the_brief"],
        },
        Mutation {
            name: "consumer_believes_the_wire",
            breaks: "trust only the ledger: a message whose fields disagree with its event's row is refused",
            plants: &[Plant::Rule {
                function: "consume_events",
                rule: "a message is believed only where every field agrees",
                edits: &[(
                    "(o.event_name = w.name AND",
                    "(true OR o.event_name = w.name AND",
                )],
            }],
            killers: &[
                "ledger::trust::a_forged_nudge_changes_nothing_and_the_real_fact_still_reaches_the_brief",
            ],
        },
        Mutation {
            name: "consumer_ignores_the_time",
            breaks: "trust only the ledger: a message that names its event's time wrongly is refused",
            plants: &[Plant::Rule {
                function: "consume_events",
                rule: "a message is believed only where every field agrees",
                edits: &[("AND o.created_at = w.occurred", "")],
            }],
            killers: &[
                "ledger::trust::a_forged_nudge_changes_nothing_and_the_real_fact_still_reaches_the_brief",
            ],
        },
        Mutation {
            name: "claim_ignores_the_archive",
            breaks: "an archived matter is not rebuilt, whoever nudges",
            plants: &[Plant::Rule {
                function: "claim_batch",
                rule: "archived matters are not claimed",
                edits: &[
                    (
                        "NOT ops.is_archived(x.firm, x.matter) AS live",
                        "true AS live",
                    ),
                    ("WHERE NOT ops.is_archived(a.firm, a.matter)", ""),
                    ("AND NOT ops.is_archived(j.firm_id, j.matter_id)", ""),
                ],
            }],
            killers: &["ledger::trust::an_archived_matter_is_neither_reconciled_nor_claimed"],
        },
        Mutation {
            name: "reconcile_ignores_the_archive",
            breaks: "an archived matter is not reconciled",
            plants: &[Plant::Rule {
                function: "unserved",
                rule: "archived matters are not reconciled",
                edits: &[("AND NOT ops.is_archived(j.firm_id, j.matter_id)", "")],
            }],
            killers: &["ledger::trust::an_archived_matter_is_neither_reconciled_nor_claimed"],
        },
        Mutation {
            name: "frame_refusal_raised",
            breaks: "a frame the database refuses fails the claim at once, with its SQLSTATE",
            plants: &[Plant::Rule {
                function: "insert_frame",
                rule: "a refused frame is answered",
                edits: &[(
                    "WHEN data_exception OR program_limit_exceeded THEN",
                    "WHEN division_by_zero THEN",
                )],
            }],
            killers: &[
                "ledger::trust::a_frame_the_database_refuses_fails_the_claim_at_once_with_its_error",
            ],
        },
        Mutation {
            name: "release_counts_as_a_failure",
            breaks: "a claim handed back at a clean shutdown is released, not failed (not counted in briefrail_matters_failed)",
            plants: &[Plant::Rule {
                function: "release_claim",
                rule: "released, not failed",
                edits: &[("SET run_status = 'idle'", "SET run_status = 'failed'")],
            }],
            killers: &["ledger::ledger::a_claim_handed_back_at_shutdown_is_released_not_failed"],
        },
        Mutation {
            name: "trigger_forgets_its_inbox",
            breaks: "5: a duplicated delivery has no second effect (the inbox dedupes on event id)",
            plants: &[Plant::Rule {
                function: "apply_events",
                rule: "each event once",
                edits: &[("CASE WHEN f.event_id IS NULL", "CASE WHEN false")],
            }],
            killers: &[
                "ledger::ledger::a_batch_of_events_applies_each_once_and_each_decides_for_itself",
            ],
        },
        Mutation {
            name: "demands_answer_the_batch_total",
            breaks: "3, 4: several demands for one matter in one batch each reach their own generation",
            plants: &[Plant::Rule {
                function: "demands",
                rule: "each demand its own generation",
                edits: &[(
                    "THEN NULL ELSE u.requested_generation - r.later END",
                    "THEN NULL ELSE u.requested_generation END",
                )],
            }],
            killers: &[
                "ledger::ledger::demands_for_one_matter_in_one_batch_each_reach_their_own_generation",
            ],
        },
        Mutation {
            name: "demands_count_a_matter_once",
            breaks: "3, 4: every demand a batch does not cover is counted on its matter's row",
            plants: &[Plant::Rule {
                function: "demands",
                rule: "every uncovered demand counts",
                edits: &[(
                    "count(*) FILTER (WHERE NOT jd.covered)",
                    "least(count(*) FILTER (WHERE NOT jd.covered), 1)",
                )],
            }],
            killers: &[
                "ledger::ledger::demands_for_one_matter_in_one_batch_each_reach_their_own_generation",
            ],
        },
        Mutation {
            name: "trigger_ignores_the_archive",
            breaks: "an archived matter is not rebuilt: its facts are gated",
            plants: &[Plant::Rule {
                function: "apply_events",
                rule: "archived matters are gated",
                edits: &[("WHEN m.archived THEN", "WHEN false THEN")],
            }],
            killers: &[
                "ledger::ledger::a_batch_of_events_applies_each_once_and_each_decides_for_itself",
            ],
        },
        Mutation {
            name: "refused_frame_lands_its_token",
            breaks: "a frame the database refuses fails the claim at once (nothing lands)",
            plants: &[Plant::Rule {
                function: "commit_frame",
                rule: "a refused frame fails the claim",
                edits: &[("IF v_refused IS NOT NULL THEN", "IF false THEN")],
            }],
            killers: &[
                "ledger::trust::a_frame_the_database_refuses_fails_the_claim_at_once_with_its_error",
            ],
        },
        Mutation {
            name: "follow_up_lease_not_restarted",
            breaks: "a follow-up's lease starts when its commit ends",
            plants: &[Plant::Rule {
                function: "start_lease",
                rule: "the lease starts now",
                edits: &[(
                    "SET claimed_at = ops.clock(), lease_expires_at = ops.clock() + make_interval(secs => lease_seconds)",
                    "SET updated_at = updated_at",
                )],
            }],
            killers: &["ledger::trust::a_follow_up_lease_starts_when_the_commit_ends"],
        },
        Mutation {
            name: "prune_events_takes_unpublished_facts",
            breaks: "retention: an unpublished event is never removed, whatever its age",
            plants: &[Plant::Rule {
                function: "prune_events",
                rule: "published events only",
                edits: &[(
                    "WHERE e.published_at < ops.now()",
                    "WHERE coalesce(e.published_at, e.created_at) < ops.now()",
                )],
            }],
            killers: &[
                "ledger::retention::only_published_consumed_events_past_the_age_go_and_they_take_their_inbox_rows",
            ],
        },
        Mutation {
            name: "prune_events_takes_unconsumed_facts",
            breaks: "retention: an event the rail has not consumed is never removed",
            plants: &[Plant::Rule {
                function: "prune_events",
                rule: "consumed events only",
                edits: &[(
                    "AND EXISTS (SELECT 1 FROM ops.consumed_events c WHERE c.consumer = p_consumer AND c.event_id = e.event_id)",
                    "",
                )],
            }],
            killers: &[
                "ledger::retention::only_published_consumed_events_past_the_age_go_and_they_take_their_inbox_rows",
            ],
        },
        Mutation {
            name: "prune_events_joins_its_batch",
            breaks: "retention: every statement uses its index (a join is planned as a scan)",
            plants: &[Plant::Rule {
                function: "prune_events",
                rule: "delete by key",
                edits: &[(
                    "DELETE FROM ops.domain_event_outbox o WHERE o.event_id = ANY (ARRAY(SELECT d.event_id FROM doomed d))",
                    "DELETE FROM ops.domain_event_outbox o USING doomed d\n         WHERE o.event_id = d.event_id",
                )],
            }],
            killers: &[
                "ledger::retention::every_retention_statement_uses_its_index_at_a_million_rows",
            ],
        },
        Mutation {
            name: "prune_runs_takes_the_latest_run",
            breaks: "retention: each matter's latest run is kept",
            plants: &[Plant::Rule {
                function: "prune_runs",
                rule: "the latest run stays",
                edits: &[("AND n.token > r.token", "AND n.token >= r.token")],
            }],
            killers: &[
                "ledger::retention::old_runs_go_but_each_matters_latest_run_and_every_open_run_stay",
            ],
        },
        Mutation {
            name: "prune_frames_takes_one_too_many",
            breaks: "retention: each matter keeps its newest frames_keep frames, its Brief always",
            plants: &[Plant::Rule {
                function: "prune_frames",
                rule: "the newest frames stay",
                edits: &[(
                    "AND o.generation < oldest_kept.generation",
                    "AND o.generation <= oldest_kept.generation",
                )],
            }],
            killers: &[
                "ledger::retention::frames_keep_n_keeps_each_matters_newest_frames_and_never_its_brief",
            ],
        },
        Mutation {
            name: "prune_frames_takes_young_frames",
            breaks: "retention: a frame landed within the hour is kept (a builder may read it back)",
            plants: &[Plant::Rule {
                function: "prune_frames",
                rule: "young frames stay",
                edits: &[("AND o.created_at < (SELECT y.since FROM young y)", "")],
            }],
            killers: &[
                "ledger::retention::frames_keep_n_keeps_each_matters_newest_frames_and_never_its_brief",
            ],
        },
    ]
}

/// For every mutation with killers in `module` (`binary::module`, the calling test's
/// `module_path!()`): the mutation applies to a fresh database, and each of those killers, run
/// alone with the mutation planted by re-running this test binary, fails. Reports every
/// survivor at once.
pub async fn assert_caught(module: &str) {
    use diesel_async::SimpleAsyncConnection;
    let binary = module.split("::").next().expect("binary::module");
    let exe = std::env::current_exe().expect("the test binary");
    let mut survivors = Vec::new();
    let mut killed = 0;
    for m in all() {
        let tests: Vec<&str> = m
            .killers
            .iter()
            .filter(|k| k.strip_prefix(module).is_some_and(|t| t.starts_with("::")))
            .filter_map(|k| k.strip_prefix(binary)?.strip_prefix("::"))
            .collect();
        if tests.is_empty() {
            continue;
        }
        let sql = m.sql();
        let db = briefrail::testing::TestDb::new(1).await.expect("test db");
        let mut c = db.connection().await.expect("connection");
        c.batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("mutation {} does not apply: {e}", m.name));
        drop(c);
        drop(db);
        for test in tests {
            let out = Command::new(&exe)
                .args(["--exact", test, "--test-threads", "1"])
                .env(briefrail::testing::MUTATION_ENV, &sql)
                .output()
                .expect("re-run the test binary");
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !stdout.contains(&format!("test {test} ... ")) {
                panic!(
                    "{binary} has no test {test} (mutation {})\n{stdout}",
                    m.name
                );
            }
            if out.status.success() {
                survivors.push(format!("{} ({}) survived {test}", m.name, m.breaks));
            } else {
                killed += 1;
                eprintln!("mutation {} killed by {test}", m.name);
            }
        }
    }
    assert!(
        survivors.is_empty(),
        "tests that cannot see the bug they guard against:\n  {}",
        survivors.join("\n  ")
    );
    assert!(killed > 0, "no mutation has a killer in {module}");
}

/// The settings by which the transitions read each row by its key, reset (`apply_events`,
/// `drain_outbox` and `consume_events` keep `jit = off`): their plans are chosen by the statistics alone.
const PLANS_BY_STATISTICS: &str = "\
ALTER FUNCTION ops.is_archived(uuid, uuid) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.demand(uuid, uuid, bigint) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.apply_events(text, uuid[], text[]) RESET enable_seqscan;\n\
ALTER FUNCTION ops.drain_outbox(text, integer, text[]) RESET enable_seqscan;\n\
ALTER FUNCTION ops.consume_events(text, uuid[], text[], uuid[], uuid[], timestamp with time zone[], bigint[], text[], text[], boolean) RESET enable_seqscan;\n\
ALTER FUNCTION ops.claim(uuid, uuid, double precision, uuid, text, text, uuid[], boolean, integer) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.claim_batch(uuid[], uuid[], double precision[], uuid[], text[], text[], text[], boolean[], integer[]) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.open_runs(uuid[], uuid[]) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.record_lost_claim(uuid, uuid) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.heartbeat(uuid, uuid, bigint, uuid) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.commit_claim(uuid, uuid, bigint, uuid, uuid, text) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.insert_frame(uuid, uuid, bigint, uuid, text) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.commit_frame(uuid, uuid, bigint, uuid, uuid, text, text) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.commit_frames(uuid[], uuid[], bigint[], uuid[], uuid[], text[], text[]) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.start_lease(uuid, uuid, uuid) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.fail_claim(uuid, uuid, bigint, uuid, text, boolean, integer, double precision, double precision) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.release_claim(uuid, uuid, bigint, uuid, text) RESET enable_seqscan RESET jit;\n\
ALTER FUNCTION ops.record_fenced(uuid, text) RESET enable_seqscan RESET jit;\n\
";
