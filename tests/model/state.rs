//! The model's state: the job row, the frames, the outbox and inbox, the broker, the nodes, and
//! a few ghost variables that exist only so properties can talk about history.
//!
//! Everything is a small integer so the checker can hash millions of states: generations are
//! `u8`, sets of facts are bitmasks (fact `f` is bit `f - 1`), time is abstracted to the two
//! comparisons the protocol ever makes against it (`claimed_at < ops.now() - lease` and
//! `not_before > ops.now()`).

/// `run_status` of `ops.matter_frame_jobs`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Status {
    Idle,
    Running,
    Failed,
}

/// The one row of `ops.matter_frame_jobs` (the model has one matter: rows of different
/// matters share no state, so one matter loses nothing).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Row {
    pub status: Status,
    pub rebuild_needed: bool,
    pub requested: u8,
    pub claimed: u8,
    /// `claimed_at < ops.now() - lease`: the only question the lease timestamp is ever asked.
    pub lease_expired: bool,
    pub landed: u8,
    pub failures: u8,
    /// `not_before > ops.now()`.
    pub backing_off: bool,
    /// `claimed_snapshot`: what the claim's transaction could see. Facts commit one at a time,
    /// so a snapshot is the number of facts committed when it was taken (fact `f` is visible
    /// iff `f <= snapshot`). `None` is SQL NULL (a row no claim has touched yet).
    pub claimed_snapshot: Option<u8>,
    /// Ghost: demands recorded on the running build (each one set `rebuild_needed`).
    pub piled_up: u8,
}

/// A row of `ops.matter_frames`, plus a ghost bit.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Frame {
    /// `generation`: the token of the build that wrote it.
    pub token: u8,
    /// The facts the build read (its claim's snapshot).
    pub snapshot: u8,
    /// Ghost: at the moment it landed, its token was the row's current claim.
    pub was_current: bool,
}

/// What a node's matter actor is doing for the matter.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Phase {
    Idle,
    /// Its claim returned NULL; next it reads the row (`claim_or_record`, demand recorded).
    LostRead,
    /// Its claim returned NULL; next it records the lost claim (`claim_or_record`, plain).
    LostClaim,
    /// It holds a token and builds (or believes it does: a zombie also sits here).
    Building(Build),
}

/// A build in a node's hands: its token is all it carries.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Build {
    pub token: u8,
    pub snapshot: u8,
    /// Heartbeats this build will still send before it commits or fails: bounds a build.
    pub heartbeats_left: u8,
    /// Ghost: the demands that piled up on the build this one follows (0 for a fresh claim).
    pub serves: u8,
}

/// A briefrail process: a consumer, a matter actor and a builder.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Node {
    pub phase: Phase,
    /// The matter actor's coalesced nudge: it will claim when it is idle.
    pub pending: bool,
    /// A delivery taken but not acked yet (only the plain claim-as-demand trigger holds one:
    /// it acks after its claim or lost-claim record committed).
    pub in_hand: Option<u8>,
    /// SIGSTOP, a GC pause, a VM migration: takes no steps until resumed.
    pub paused: bool,
}

impl Node {
    pub const FRESH: Node = Node {
        phase: Phase::Idle,
        pending: false,
        in_hand: None,
        paused: false,
    };

    pub fn build(&self) -> Option<&Build> {
        match &self.phase {
            Phase::Building(b) => Some(b),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// `None`: no row yet (or, in the row-deletion flaw, deleted).
    pub row: Option<Row>,
    /// In landing order.
    pub frames: Vec<Frame>,
    /// Facts committed so far (each with its outbox row, in the same transaction).
    pub facts: u8,
    /// Outbox rows the relay has published (`published_at` set), as a bitmask.
    pub published: u8,
    /// The trigger's inbox (`ops.consumed_events`), as a bitmask.
    pub consumed: u8,
    /// Copies of each fact's event in the broker (index `f - 1`).
    pub in_flight: [u8; MAX_FACTS],
    /// Reconcile's nudges in flight.
    pub pokes: u8,
    /// Forged nudges on the bus (a real event id, forged fields), as a bitmask of facts.
    pub forged: u8,
    /// The first `Rail::nodes` are in play; the rest stay fresh (fixed arrays keep a state
    /// free of heap allocations, which is most of the cost of exploring millions of them).
    pub nodes: [Node; MAX_NODES],
    /// Faults the environment may still inject.
    pub faults_left: u8,
    /// Ghost: the highest token ever issued, and whether a claim ever issued one not above it.
    pub max_issued: u8,
    pub token_reused: bool,
    /// Ghost: a commit's compare-and-swap refused a stale token.
    pub zombie_refused: bool,
    /// Ghost: a follow-up build that served two or more piled-up demands landed.
    pub follow_up_served_many: bool,
    /// Ghost: failures counted since the last demand or landing (a permanent one counts as
    /// the attempt limit), capped there, of builds that read every recorded demand. Retries
    /// may stop only after this many.
    pub failures_since_demand: u8,
    /// Ghost: a claim that was not a new demand took a row whose retries were exhausted.
    pub retried_after_giving_up: bool,
    /// Ghost: a claim started a build that reads no fact the Brief lacks.
    pub needless_build: bool,
}

/// The largest bounds the state's arrays hold.
pub const MAX_NODES: usize = 3;
pub const MAX_FACTS: usize = 4;

/// Fact `f` in a bitmask of facts.
pub fn bit(fact: u8) -> u8 {
    1 << (fact - 1)
}

/// Fact `f`'s index in a per-fact array.
pub fn slot(fact: u8) -> usize {
    fact as usize - 1
}

impl State {
    pub fn initial(nodes: usize, facts: u8, faults: u8) -> State {
        assert!(
            nodes <= MAX_NODES && facts as usize <= MAX_FACTS,
            "beyond the model's arrays"
        );
        State {
            row: None,
            frames: Vec::new(),
            facts: 0,
            published: 0,
            consumed: 0,
            in_flight: [0; MAX_FACTS],
            pokes: 0,
            forged: 0,
            nodes: [Node::FRESH; MAX_NODES],
            faults_left: faults,
            max_issued: 0,
            token_reused: false,
            zombie_refused: false,
            follow_up_served_many: false,
            failures_since_demand: 0,
            retried_after_giving_up: false,
            needless_build: false,
        }
    }

    /// The Brief a reader sees: the frame with the highest generation (`reads::latest_frame`).
    pub fn brief_snapshot(&self) -> u8 {
        self.frames
            .iter()
            .max_by_key(|f| f.token)
            .map_or(0, |f| f.snapshot)
    }

    /// Fact `f` is in the Brief.
    pub fn served(&self, fact: u8) -> bool {
        fact <= self.brief_snapshot()
    }

    /// The row guarantees a future build that reads fact `f`: the running claim reads it, or a
    /// follow-up is owed, or (not running) the row shows unserved demand, which reconcile serves
    /// or, when retries are exhausted, shows the operator.
    pub fn owed(&self, fact: u8) -> bool {
        match &self.row {
            None => false,
            Some(j) if j.status == Status::Running => {
                j.claimed_snapshot.is_some_and(|s| fact <= s) || j.rebuild_needed
            }
            Some(j) => j.landed < j.requested,
        }
    }

    /// Retries stopped and the row says so: failed, at the attempt limit, demand unserved.
    pub fn exhausted(&self, max_attempts: u8) -> bool {
        self.row.as_ref().is_some_and(|j| {
            j.status == Status::Failed && j.failures >= max_attempts && j.landed < j.requested
        })
    }

    /// The node that holds the current claim and is taking steps: it heartbeats in time, so no
    /// clock tick may expire its lease (a paused holder's may expire: that is the zombie).
    pub fn live_holder(&self) -> bool {
        let Some(j) = &self.row else { return false };
        j.status == Status::Running
            && self
                .nodes
                .iter()
                .any(|n| !n.paused && n.build().is_some_and(|b| b.token == j.claimed))
    }
}
