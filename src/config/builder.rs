//! `[builder]`: which builder renders a matter's Brief, and what it needs to run.

use serde::Deserialize;

use super::bounds::DAY_S;
use super::{Bound, ConfigError, url_with_scheme};
use crate::secret::SecretUrl;

/// Which builder a node runs (`builder.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum BuilderKind {
    /// The built-in Brief builder, in process.
    Brief,
    /// An external program (`builder.command`), given the record on stdin.
    Command,
    /// An HTTP endpoint (`builder.url`), given the record in a POST.
    Http,
}

config_names!(BuilderKind { Brief => "brief", Command => "command", Http => "http" });

/// `[builder]`: what builds a matter's frame, and how long it may take.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuilderSettings {
    /// Which builder.
    pub kind: BuilderKind,
    /// argv of the `command` builder.
    pub command: Vec<String>,
    /// Endpoint of the `http` builder (`http://` or `https://`).
    pub url: SecretUrl,
    /// PEM file of extra certificate authorities the `http` builder trusts for `https://`
    /// (an on-prem firm's own CA), besides the system's. Empty: the system's only.
    #[serde(default)]
    pub ca_file: String,
    /// A build that takes longer is cancelled and retried: a hung builder cannot hold a claim
    /// for ever.
    pub timeout_seconds: f64,
}

pub(super) const BOUNDS: &[Bound] = &[bound!(
    "builder.timeout_seconds",
    0.01,
    DAY_S,
    Seconds,
    |s| s.builder.timeout_seconds,
    real
)];

impl BuilderSettings {
    /// The chosen `kind` has what it needs: a program for `command`, an `http(s)://` URL for
    /// `http`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        match self.kind {
            BuilderKind::Command if self.command.is_empty() => Err(ConfigError::new(
                "builder.command",
                "must name a program when builder.kind = \"command\"",
            )),
            BuilderKind::Http => {
                url_with_scheme("builder.url", self.url.expose(), &["http", "https"], "")?;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
