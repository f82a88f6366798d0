//! The protocol's states as types, each mapped to the database's text once, here.
//!
//! The `CHECK` constraints of `ops.matter_frame_jobs.run_status` and
//! `ops.matter_frame_runs.outcome` (`src/ledger/live/catalog.sql`) list the same values; a value the
//! database holds that is not listed here is a decoding error, never a silent string.

use std::fmt;
use std::io::Write;

use diesel::deserialize::{self, FromSql, FromSqlRow};
use diesel::expression::AsExpression;
use diesel::pg::{Pg, PgValue};
use diesel::serialize::{self, Output, ToSql};
use diesel::sql_types::Text;
use serde::Serialize;

/// Declares a text-backed enum with its one mapping to the database.
macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, AsExpression, FromSqlRow, Serialize)]
        #[diesel(sql_type = Text)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The text the database stores.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(concat!("{:?} is not a ", stringify!($name)), other)),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ToSql<Text, Pg> for $name {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
                out.write_all(self.as_str().as_bytes())?;
                Ok(serialize::IsNull::No)
            }
        }

        impl FromSql<Text, Pg> for $name {
            fn from_sql(bytes: PgValue<'_>) -> deserialize::Result<Self> {
                let s = std::str::from_utf8(bytes.as_bytes())?;
                Ok(s.parse()?)
            }
        }
    };
}

text_enum! {
    /// `ops.matter_frame_jobs.run_status`: where the matter's row is in its life.
    RunStatus {
        /// No claim holds the row; every demand may be served (or not: see `unserved`).
        Idle = "idle",
        /// A claim holds the row until its lease deadline.
        Running = "running",
        /// The last claim failed; `not_before` says when to retry (a claim handed back at a
        /// clean shutdown leaves the row idle).
        Failed = "failed",
    }
}

text_enum! {
    /// `ops.matter_frame_runs.outcome`: how one attempt ended.
    RunOutcome {
        /// The attempt holds (or held, until the sweep closes it) the claim.
        Running = "running",
        /// Its frame landed.
        Landed = "landed",
        /// Its token was stale at a heartbeat or at commit: nothing was written.
        Fenced = "fenced",
        /// It ended without a frame: an error or a timeout (a retry is spent, with backoff).
        Failed = "failed",
        /// Its lease ran out; the sweep or a later claim closed it.
        LeaseExpired = "lease_expired",
        /// A clean shutdown handed its claim back: nothing went wrong, no
        /// retry is spent, and the matter is claimable at once.
        Released = "released",
    }
}

impl RunOutcome {
    /// The outcomes an operator looks at first (the status page's "bad runs").
    pub const TROUBLE: &'static [RunOutcome] = &[
        RunOutcome::Fenced,
        RunOutcome::Failed,
        RunOutcome::LeaseExpired,
    ];
}

/// What kind of claim a caller makes: the one boolean of `ops.claim`, named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimKind {
    /// The protocol's plain claim, which is itself a demand: it always bumps the dispenser,
    /// restarts the retries of a failing matter, and a lost one is recorded on the running row.
    NewDemand,
    /// Serve demands already on the row (the trigger recorded them with
    /// [`demand`](super::transitions::demand) before nudging, or a retry): a row whose demands
    /// are all served is not claimed (a stale or duplicated nudge costs no build), a lost claim
    /// records nothing more (the running build's commit already knows of the demand), and a
    /// row that failed `max_attempts` times in a row waits for a new demand.
    ServeRecorded,
}

impl ClaimKind {
    /// `ops.claim`'s `p_only_unserved`.
    pub(crate) fn only_unserved(self) -> bool {
        matches!(self, ClaimKind::ServeRecorded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_through_its_text() {
        for s in RunStatus::ALL {
            assert_eq!(s.as_str().parse::<RunStatus>(), Ok(*s));
        }
        for o in RunOutcome::ALL {
            assert_eq!(o.as_str().parse::<RunOutcome>(), Ok(*o));
        }
        assert!("Running".parse::<RunStatus>().is_err());
        assert_eq!(
            serde_json::to_value(RunOutcome::LeaseExpired).unwrap(),
            "lease_expired"
        );
    }
}
