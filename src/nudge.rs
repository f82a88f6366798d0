//! The one message between the transport and the actors: go look at the ledger for this
//! matter. It carries IDs and trace context only, never a fact: the ledger decides what it
//! means. A transport needs only a `Recipient<Nudge>`, so it knows nothing of the actors.

use actix::Message;
use uuid::Uuid;

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
    pub key: MatterKey,
    /// The events this nudge stands for (recorded on the run that serves them).
    pub event_ids: Vec<Uuid>,
    pub traceparent: Option<String>,
}

impl Nudge {
    pub fn matter(firm_id: Uuid, matter_id: Uuid) -> Self {
        Self {
            key: MatterKey { firm_id, matter_id },
            event_ids: Vec::new(),
            traceparent: None,
        }
    }
}
