//! The one message between the transport and the actors: go look at the ledger for this
//! matter. It carries IDs and trace context only, never a fact: the ledger decides what it
//! means. A transport needs only a `Recipient<Nudge>`, so it knows nothing of the actors.
//!
//! [`DemandClass`] lives here, below the ledger that stores it and the transports and actors
//! that carry it, so that none of them reaches up for it.

use std::time::Duration;

use actix::Message;
use uuid::Uuid;

use crate::error::{Error, Result};

/// A matter: what a nudge names and what the supervisor keys its actors by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MatterKey {
    pub firm_id: Uuid,
    pub matter_id: Uuid,
}

/// Go look at the ledger for this matter. Carries IDs and trace context only.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct Nudge {
    /// The matter to look at.
    pub key: MatterKey,
    /// The events this nudge stands for (recorded on the run that serves them).
    pub event_ids: Vec<Uuid>,
    /// The W3C trace context of the fact, so the build joins its trace.
    pub traceparent: Option<String>,
    /// How long before the nudge was sent the ledger recorded the demand it stands for, by the
    /// ledger's clock (the statement that found the demand computed it); `None` when nobody
    /// asked the ledger, which the matter actor takes as "just now".
    ///
    /// Why: the debounce window exists to let a burst of uploads land before the claim. It
    /// counts from when the demand was recorded, not from when its nudge arrived, so a backlog
    /// (events recorded while no node ran, or delayed by the broker or a busy relay) is claimed
    /// at once instead of waiting a window that passed long ago. Only a delay, never a fact:
    /// what is served is still decided by the claim, from the ledger's row.
    pub recorded_ago: Option<Duration>,
    /// How urgently the demand is served, as its fact's row recorded it (a nudge nobody asked
    /// the ledger about, such as reconcile's, is [`DemandClass::Background`]). Only an order:
    /// whether there is anything to serve is still the claim's to decide.
    pub class: DemandClass,
}

impl Nudge {
    /// A nudge for a matter, no event or trace, of an interactive demand recorded just now.
    pub fn matter(firm_id: Uuid, matter_id: Uuid) -> Self {
        Self {
            key: MatterKey { firm_id, matter_id },
            event_ids: Vec::new(),
            traceparent: None,
            recorded_ago: None,
            class: DemandClass::Interactive,
        }
    }

    /// The same nudge, of a demand of `class`.
    pub fn class(mut self, class: DemandClass) -> Self {
        self.class = class;
        self
    }

    /// The same nudge, of a demand the ledger recorded `ago` before it was sent.
    pub fn recorded_ago(mut self, ago: Duration) -> Self {
        self.recorded_ago = Some(ago);
        self
    }
}

/// Why a demand was made, which decides how urgently it is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum DemandClass {
    /// Bulk or maintenance work: `brief request --all`, reconciliation, what an embedder marks
    /// so. Served after interactive demands, never starved.
    Background,
    /// A user's action: an upload, a Regenerate click, the console's Rebuild.
    #[default]
    Interactive,
}

impl DemandClass {
    /// The name the ledger stores (`demand_class`) and the CLI and the API take.
    pub fn as_str(self) -> &'static str {
        match self {
            DemandClass::Background => "background",
            DemandClass::Interactive => "interactive",
        }
    }

    /// The class named `s`; an error naming the accepted names otherwise.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "background" => Ok(DemandClass::Background),
            "interactive" => Ok(DemandClass::Interactive),
            other => Err(Error::InvalidInput(format!(
                "demand class {other:?} is not one of: interactive, background"
            ))),
        }
    }

    /// The class the ledger stored; an unknown name (a newer release's) counts as interactive,
    /// so it is never served later than it would have been.
    pub fn from_stored(s: &str) -> Self {
        Self::parse(s).unwrap_or(DemandClass::Interactive)
    }
}

impl std::fmt::Display for DemandClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DemandClass {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}
