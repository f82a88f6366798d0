//! The ledger's transitions, one function per SQL function of
//! `src/ledger/live/` (the functions as they run; same names),
//! each applied atomically as the statement is. Comments quote the SQL clause each line
//! mirrors.
//!
//! Left out, because the model cannot tell them apart: the claim's run id beside its token
//! (every claim here issues a fresh token, so token and identity coincide; a token number
//! handed out twice is `tests/ledger/trust.rs`), the claimer's lease length (time is "expired or
//! not"), the cluster a snapshot came from (one cluster), archived matters (one live matter).
//!
//! The flaws of the negative controls that break a statement are switched here (the others,
//! which break the code around the statements, in `mod.rs`).

use super::Flaw;
use super::state::{Frame, Row, State, Status};

/// What `ops.commit_claim` returned.
pub enum Committed {
    /// NULL: the compare-and-swap matched no row; the transaction rolls back, no frame.
    Fenced,
    /// 0: landed, nothing pending.
    Idle,
    /// The follow-up token: landed, and re-claimed for the demands that piled up.
    FollowUp { token: u8, snapshot: u8, serves: u8 },
}

impl State {
    /// Ghost bookkeeping for every token a claim hands out.
    fn issue(&mut self, token: u8) {
        if token <= self.max_issued {
            self.token_reused = true;
        }
        // The build reads the facts committed now; the Brief already holds them all.
        if self.facts <= self.brief_snapshot() {
            self.needless_build = true;
        }
        self.max_issued = self.max_issued.max(token);
    }

    /// `ops.demand(p_firm, p_matter, p_xact)`: the trigger's demand for fact `fact`, in the
    /// inbox transaction. `None`: covered (a running or landed build reads the fact already).
    pub fn demand(&mut self, fact: u8, flaw: Flaw) -> Option<u8> {
        let Some(j) = &mut self.row else {
            // INSERT ... VALUES (p_firm, p_matter, 1)
            self.row = Some(Row {
                status: Status::Idle,
                rebuild_needed: false,
                requested: 1,
                claimed: 0,
                lease_expired: false,
                landed: 0,
                failures: 0,
                backing_off: false,
                claimed_snapshot: None,
                piled_up: 0,
            });
            return Some(1);
        };
        // covered: snapshot NOT NULL AND (running OR (idle AND landed = claimed))
        //          AND pg_visible_in_snapshot(p_xact, claimed_snapshot)
        // The flaw: the demand of the seed, which never asks whether a build reads the fact.
        let covered = flaw != Flaw::NoCoverage
            && j.claimed_snapshot.is_some_and(|s| fact <= s)
            && (j.status == Status::Running || (j.status == Status::Idle && j.landed == j.claimed));
        if !covered {
            j.requested += 1; // requested_generation + 1
            if j.status == Status::Running {
                j.rebuild_needed = true; // OR (run_status = 'running' AND NOT covered)
                j.piled_up += 1;
            }
        }
        j.failures = 0; // consecutive_failures = 0
        j.backing_off = false; // not_before = NULL
        (!covered).then_some(j.requested)
    }

    /// `ops.claim(..., p_only_unserved, p_max_attempts)`: the seed's conditional upsert.
    /// `Some(token)` wins.
    pub fn claim(&mut self, only_unserved: bool, max_attempts: u8, flaw: Flaw) -> Option<u8> {
        let snapshot = self.facts; // pg_current_snapshot()
        let token = match &mut self.row {
            None => {
                // INSERT ... VALUES ('running', false, 1, 1, ops.now(), ...)
                self.row = Some(Row {
                    status: Status::Running,
                    rebuild_needed: false,
                    requested: 1,
                    claimed: 1,
                    lease_expired: false,
                    landed: 0,
                    failures: 0,
                    backing_off: false,
                    claimed_snapshot: Some(snapshot),
                    piled_up: 0,
                });
                1
            }
            Some(j) => {
                // WHERE (run_status <> 'running' OR claimed_at < ops.now() - lease)
                //   AND (NOT p_only_unserved OR (landed_generation < requested_generation
                //                                AND consecutive_failures < p_max_attempts))
                let free = j.status != Status::Running || j.lease_expired;
                // The flaw: the claim of 000002, which let any nudge retry an exhausted row.
                let limited = flaw != Flaw::RetryWithoutLimit && j.failures >= max_attempts;
                if !free || (only_unserved && (j.landed >= j.requested || limited)) {
                    return None;
                }
                if only_unserved && j.failures >= max_attempts {
                    self.retried_after_giving_up = true; // ghost
                }
                j.status = Status::Running;
                j.rebuild_needed = false;
                j.requested += 1;
                j.claimed = j.requested;
                j.lease_expired = false; // claimed_at = ops.now()
                j.claimed_snapshot = Some(snapshot);
                if !only_unserved && flaw != Flaw::PlainDemandKeepsRetries {
                    j.failures = 0; // a plain claim is a demand: it restarts retries
                }
                j.piled_up = 0;
                j.claimed
            }
        };
        self.issue(token);
        Some(token)
    }

    /// `ops.record_lost_claim`: `WHERE run_status = 'running'`. `None`: not running any more.
    pub fn record_lost_claim(&mut self, flaw: Flaw) -> Option<u8> {
        let j = self.row.as_mut().filter(|j| j.status == Status::Running)?;
        j.requested += 1;
        j.rebuild_needed = true;
        if flaw != Flaw::PlainDemandKeepsRetries {
            j.failures = 0; // a new demand restarts retries
            j.backing_off = false;
        }
        j.piled_up += 1;
        Some(j.requested)
    }

    /// The fence shared by heartbeat, commit, fail and release:
    /// `WHERE claimed_generation = p_token AND run_status = 'running'`.
    fn current(&mut self, token: u8) -> Option<&mut Row> {
        self.row
            .as_mut()
            .filter(|j| j.claimed == token && j.status == Status::Running)
    }

    /// `ops.heartbeat`: renew the lease, fenced by token. `false`: fenced, cancel the build.
    pub fn heartbeat(&mut self, token: u8) -> bool {
        match self.current(token) {
            Some(j) => {
                j.lease_expired = false; // claimed_at = ops.now()
                true
            }
            None => false,
        }
    }

    /// `ops.commit_claim` and, in the same transaction, the frame insert.
    pub fn commit_claim(&mut self, token: u8, snapshot: u8, flaw: Flaw) -> Committed {
        let facts = self.facts;
        let j = match flaw {
            // The flaw: `WHERE run_status = 'running'`, the token forgotten.
            Flaw::CasWithoutToken => self.row.as_mut().filter(|j| j.status == Status::Running),
            _ => self.current(token),
        };
        let Some(j) = j else {
            self.zombie_refused = true;
            return Committed::Fenced;
        };
        let was_current = j.claimed == token;
        j.landed = token; // landed_generation = p_token
        j.failures = 0;
        j.backing_off = false;
        let outcome = if j.rebuild_needed {
            // re-claim in the same statement: a fresh token, the flag cleared
            j.requested += 1;
            j.claimed = j.requested;
            j.lease_expired = false;
            j.claimed_snapshot = Some(facts);
            j.rebuild_needed = false;
            let serves = std::mem::take(&mut j.piled_up);
            Committed::FollowUp {
                token: j.claimed,
                snapshot: facts,
                serves,
            }
        } else {
            j.status = Status::Idle;
            Committed::Idle
        };
        // INSERT INTO ops.matter_frames (generation = p_token, ...)
        self.frames.push(Frame {
            token,
            snapshot,
            was_current,
        });
        if let Committed::FollowUp { token, .. } = outcome {
            self.issue(token);
        }
        outcome
    }

    /// `ops.fail_claim`: fenced by token; failed, backoff set; a permanent error jumps to the
    /// attempt limit. Returns whether the token was current.
    pub fn fail_claim(&mut self, token: u8, permanent: bool, max_attempts: u8, flaw: Flaw) -> bool {
        let Some(j) = self.current(token) else {
            return false;
        };
        j.status = Status::Failed;
        // CASE WHEN rebuild_needed THEN consecutive_failures ...
        j.failures = if j.rebuild_needed && flaw != Flaw::FailureCountsAgainstNewDemand {
            j.failures
        } else if permanent {
            max_attempts.max(j.failures + 1)
        } else {
            j.failures + 1
        };
        j.backing_off = true; // not_before = ops.now() + backoff
        true
    }

    /// `ops.release_claim`: a node shutting down gives its claim back, no backoff; the row is
    /// idle again, its demand still unserved.
    pub fn release_claim(&mut self, token: u8) -> bool {
        let Some(j) = self.current(token) else {
            return false;
        };
        j.status = Status::Idle;
        j.backing_off = false; // not_before = NULL
        true
    }

    /// `ops.sweep`: a running row whose lease expired is failed (its run `lease_expired`).
    pub fn sweep(&mut self, flaw: Flaw) -> bool {
        let Some(j) = self
            .row
            .as_mut()
            .filter(|j| j.status == Status::Running && j.lease_expired)
        else {
            return false;
        };
        j.status = Status::Failed;
        // + CASE WHEN rebuild_needed THEN 0 ELSE 1 END
        if !j.rebuild_needed || flaw == Flaw::FailureCountsAgainstNewDemand {
            j.failures += 1;
        }
        j.backing_off = false; // not_before = ops.now()
        true
    }

    /// `ops.unserved`: the reconcile query's WHERE, for the one row.
    /// (`p_quiet_secs` is left out: it only delays reconcile, and the model lets it fire at
    /// any moment, which is a superset of the schedules the real quiet period allows.)
    pub fn unserved(&self, max_attempts: u8) -> bool {
        self.row.as_ref().is_some_and(|j| {
            j.landed < j.requested
                && j.status != Status::Running
                && !j.backing_off
                && j.failures < max_attempts
        })
    }
}
