//! Layered configuration: built-in defaults (`config/default.toml`, compiled in), then the file
//! given with `--config FILE`, then `BRIEFRAIL__SECTION__KEY` environment variables.
//!
//! Everything is validated once, at start, into [`Settings`]; a bad value is reported as one
//! [`ConfigError`] naming the key and the problem, with any password redacted.
//!
//! Each section of the file has its own module holding its struct, the ranges of its numbers
//! ([`BOUNDS`]) and its other checks; this module loads the layers and runs the checks.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::secret::redact_urls;

/// The names an enum of the configuration accepts, and its refusal of any other listing them:
/// the config crate's own message ("enum X does not have variant constructor y") lists none.
macro_rules! config_names {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every name this setting accepts, in the order the docs list them.
            pub(crate) const NAMES: &'static [&'static str] = &[$($name),+];
        }
        impl TryFrom<String> for $ty {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                match s.as_str() {
                    $($name => Ok($ty::$variant),)+
                    _ => Err(format!("{s:?} is not one of: {}", Self::NAMES.join(", "))),
                }
            }
        }
    };
}

// `bounds` first: its `bound!` macro is used by the sections.
#[macro_use]
mod bounds;
mod keys;
mod ranges;

mod builder;
mod builders;
mod database;
mod fairness;
mod http;
mod lease;
mod log;
mod node;
mod otel;
mod reconcile;
mod relay;
mod retention;
mod retry;
mod shutdown;
mod sweeper;
mod transport;
mod trigger;

pub use bounds::Bound;
pub(crate) use bounds::{Unit, Value};
pub use builder::{BuilderKind, BuilderSettings};
pub use builders::BuildersSettings;
pub use database::DatabaseSettings;
pub use fairness::FairnessSettings;
pub use http::HttpSettings;
pub use keys::known_keys;
pub use lease::LeaseSettings;
pub use log::{LogFormat, LogSettings};
pub use node::NodeSettings;
pub use otel::OtelSettings;
pub use ranges::BOUNDS;
pub use reconcile::ReconcileSettings;
pub use relay::RelaySettings;
pub use retention::RetentionSettings;
pub use retry::RetrySettings;
pub use shutdown::ShutdownSettings;
pub use sweeper::SweeperSettings;
pub use transport::{TransportKind, TransportSettings};
pub use trigger::TriggerSettings;

/// The defaults every layer starts from; also the documented reference of every key.
pub(crate) const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

/// A configuration value that cannot be used. Displayed as one line: `key: problem`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config {key}: {problem}")]
pub struct ConfigError {
    /// The dotted key, e.g. `lease.seconds` (or `config` for a file that cannot be read).
    pub key: String,
    /// What is wrong with it, never including a secret.
    pub problem: String,
}

impl ConfigError {
    fn new(key: &str, problem: impl Into<String>) -> Self {
        Self {
            key: key.to_owned(),
            problem: redact_urls(&problem.into()),
        }
    }
}

/// `v` seconds as a duration, never panicking: a negative or NaN value is zero and one too
/// large for a `Duration` saturates. [`BOUNDS`] keeps loaded values far inside; this is for a
/// [`Settings`] built in code.
pub(crate) fn seconds(v: f64) -> Duration {
    // `max` maps NaN to zero as well.
    Duration::try_from_secs_f64(v.max(0.0)).unwrap_or(Duration::MAX)
}

/// Parses `text` as a URL with one of `schemes`, or refuses it as `key`; `which` leads each
/// problem (the member of a list it is about, or nothing).
fn url_with_scheme(
    key: &str,
    text: &str,
    schemes: &[&str],
    which: &str,
) -> Result<url::Url, ConfigError> {
    let url = url::Url::parse(text)
        .map_err(|e| ConfigError::new(key, format!("{which}not a URL: {e}")))?;
    if !schemes.contains(&url.scheme()) {
        let listed: Vec<String> = schemes.iter().map(|s| format!("{s}://")).collect();
        return Err(ConfigError::new(
            key,
            format!("{which}scheme must be {}", listed.join(" or ")),
        ));
    }
    Ok(url)
}

/// Every setting of a node, layered (built-in defaults, a TOML file, `BRIEFRAIL__SECTION__KEY`
/// environment variables) and validated once at start, so a running node never meets a bad
/// value. Each field is one section of `config/default.toml`, documented in
/// `docs/configuration.md`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// `[database]`: the ledger.
    pub database: DatabaseSettings,
    /// `[lease]`: how long a claim lives without a heartbeat.
    pub lease: LeaseSettings,
    /// `[sweeper]`: expired claims and unserved demand.
    pub sweeper: SweeperSettings,
    /// `[retention]`: what is removed once no guarantee needs it.
    pub retention: RetentionSettings,
    /// `[retry]`: failed builds' attempts and backoff.
    pub retry: RetrySettings,
    /// `[trigger]`: how demands are coalesced before a claim.
    pub trigger: TriggerSettings,
    /// `[fairness]`: how firms share the builders.
    pub fairness: FairnessSettings,
    /// `[builders]`: how many builds run at once.
    pub builders: BuildersSettings,
    /// `[builder]`: what builds a frame.
    pub builder: BuilderSettings,
    /// `[transport]`: how events reach the nodes.
    pub transport: TransportSettings,
    /// `[relay]`: the outbox's relay to the broker.
    pub relay: RelaySettings,
    /// `[reconcile]`: events the transport lost, found again.
    pub reconcile: ReconcileSettings,
    /// `[node]`: this node's identity.
    pub node: NodeSettings,
    /// `[http]`: the admin endpoint.
    pub http: HttpSettings,
    /// `[shutdown]`: how long builds may drain.
    pub shutdown: ShutdownSettings,
    /// `[log]`: the logs.
    pub log: LogSettings,
    /// `[otel]`: traces exported over OTLP.
    pub otel: OtelSettings,
}

impl Settings {
    /// Defaults, then `file` (if any), then the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_with_env(file, briefrail_vars(std::env::vars_os())?)
    }

    /// As [`Settings::load`], with the environment given explicitly (tests, embedding).
    pub fn load_with_env(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        use config::{Config, Environment, File, FileFormat};
        let mut builder =
            Config::builder().add_source(File::from_str(DEFAULT_TOML, FileFormat::Toml));
        if let Some(path) = file {
            if !path.is_file() {
                return Err(ConfigError::new(
                    "--config",
                    format!("{} is not a readable file", path.display()),
                ));
            }
            let file = File::from(path).format(FileFormat::Toml).required(true);
            let table = config::Source::collect(&file).map_err(from_config_error)?;
            keys::refuse_unknown_keys(&table, &path.display().to_string())?;
            builder = builder.add_source(file);
        }
        let env: config::Map<String, String> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with("BRIEFRAIL__"))
            .collect();
        for var in env.keys() {
            keys::refuse_unknown_variable(var)?;
        }
        builder = builder.add_source(
            Environment::with_prefix("BRIEFRAIL")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true)
                .list_separator(" ")
                .with_list_parse_key("builder.command")
                .source(Some(env)),
        );
        let raw = builder.build().map_err(from_config_error)?;
        let settings: Settings = raw.try_deserialize().map_err(from_config_error)?;
        settings.validate()?;
        Ok(settings)
    }

    /// Defaults only (tests and embedding applications start here and override fields).
    pub fn defaults() -> Self {
        Self::load_with_env(None, std::iter::empty()).unwrap_or_else(|e| {
            // The compiled-in defaults are covered by a unit test; this cannot fail at run time.
            panic!("built-in defaults are invalid: {e}")
        })
    }

    /// Checks every value a node relies on; the first problem found is returned. Every number
    /// is inside its range first ([`BOUNDS`]), so the sections check only
    /// what a range cannot say: URLs, names, and keys that must agree with each other. They go
    /// in the order of the file, so the same file always reports the same problem.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_bounds()?;
        self.database.validate()?;
        self.lease.validate()?;
        self.retry.validate()?;
        self.trigger.validate()?;
        self.builders.validate()?;
        self.builder.validate()?;
        self.transport.validate()?;
        self.http.validate()?;
        self.log.validate()?;
        self.otel.validate()
    }

    /// Every numeric setting inside its [`BOUNDS`], and `node.id` free of control characters:
    /// what a node needs so that no timer, timestamp or session setting overflows. A node
    /// checks this at start too, since an embedder may build [`Settings`] without
    /// [`Settings::validate`].
    pub(crate) fn validate_bounds(&self) -> Result<(), ConfigError> {
        let otel = self.otel.enabled();
        for b in BOUNDS {
            if otel || !b.key.starts_with("otel.") {
                b.check(self)?;
            }
        }
        self.node.validate_id()
    }
}

/// Turns the `config` crate's error into one line naming the key.
fn from_config_error(e: config::ConfigError) -> ConfigError {
    let text = e.to_string();
    let key = match &e {
        config::ConfigError::Type { key: Some(key), .. } | config::ConfigError::NotFound(key) => {
            Some(key.clone())
        }
        // Deserialization messages carry the key in a "for key `x`" suffix.
        _ => text
            .split("for key `")
            .nth(1)
            .and_then(|s| s.split('`').next())
            .map(str::to_owned),
    };
    match (key, &e) {
        // The key leads the line already: drop the crate's own " for key `x`" suffix.
        (Some(key), _) => {
            let problem = text.split(" for key `").next().unwrap_or(&text).to_owned();
            ConfigError::new(&key, problem)
        }
        (None, config::ConfigError::FileParse { .. } | config::ConfigError::Foreign(_)) => {
            ConfigError::new("--config", text)
        }
        (None, _) => ConfigError::new("config", text),
    }
}

/// The process environment's `BRIEFRAIL__` variables. Any other variable is none of ours,
/// whatever bytes it holds (`std::env::vars` would panic on one that is not UTF-8); one of
/// ours that is not UTF-8 is refused, named.
fn briefrail_vars(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<Vec<(String, String)>, ConfigError> {
    const PREFIX: &[u8] = b"BRIEFRAIL__";
    let mut out = Vec::new();
    for (name, value) in vars {
        if !name.as_encoded_bytes().starts_with(PREFIX) {
            continue;
        }
        let name = name.into_string().map_err(|raw| {
            ConfigError::new(
                "environment",
                format!(
                    "the variable {} has a name that is not UTF-8",
                    raw.to_string_lossy()
                ),
            )
        })?;
        let value = value.into_string().map_err(|_| {
            ConfigError::new(
                "environment",
                format!("the variable {name} has a value that is not UTF-8"),
            )
        })?;
        out.push((name, value));
    }
    Ok(out)
}

/// The environment `pairs` as [`Settings::load_with_env`] takes it.
#[cfg(test)]
fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented() {
        let s = Settings::defaults();
        assert_eq!(s.lease.seconds, 60.0);
        assert_eq!(s.lease.heartbeat(), Duration::from_secs(20));
        assert_eq!(
            s.database.url.expose(),
            "postgres://postgres@127.0.0.1:5432/briefrail"
        );
        assert_eq!(s.transport.kind, TransportKind::Amqp);
    }

    #[test]
    fn environment_overrides_defaults() -> Result<(), Box<dyn std::error::Error>> {
        let s = Settings::load_with_env(
            None,
            env(&[
                ("BRIEFRAIL__LEASE__SECONDS", "7.5"),
                ("BRIEFRAIL__BUILDER__KIND", "command"),
                ("BRIEFRAIL__BUILDER__COMMAND", "/bin/cat -"),
                ("BRIEFRAIL__TRANSPORT__KIND", "postgres"),
            ]),
        )?;
        assert_eq!(s.lease.seconds, 7.5);
        assert_eq!(s.builder.command, vec!["/bin/cat", "-"]);
        assert_eq!(s.transport.kind, TransportKind::Postgres);
        Ok(())
    }

    /// A variable that is not UTF-8 is skipped when it is not ours (the process's environment
    /// is not ours to judge) and refused, named, when it is; a panic would stop every
    /// command, `healthcheck` included.
    #[test]
    fn a_variable_that_is_not_utf8_is_skipped_or_named() {
        use std::ffi::OsString;
        use std::os::unix::ffi::OsStringExt;
        let raw = |b: &[u8]| OsString::from_vec(b.to_vec());
        let vars = briefrail_vars([
            (raw(b"LANG_\xff"), raw(b"C")),
            (raw(b"OTHER"), raw(b"\xff\xfe")),
            (raw(b"BRIEFRAIL__NODE__ID"), raw(b"n1")),
        ])
        .expect("only ours is read");
        assert_eq!(vars, vec![("BRIEFRAIL__NODE__ID".into(), "n1".into())]);
        let e =
            briefrail_vars([(raw(b"BRIEFRAIL__NODE__ID"), raw(b"n\xff"))]).expect_err("not UTF-8");
        assert!(
            e.to_string().contains("BRIEFRAIL__NODE__ID") && e.to_string().contains("UTF-8"),
            "{e}"
        );
    }

    /// A name the broker would refuse is refused here, named: the node's id names its consumer,
    /// the prefix begins every exchange and queue name, each an AMQP short string.
    #[test]
    fn names_the_broker_would_refuse_are_refused_here() {
        for (var, key, max) in [
            ("BRIEFRAIL__NODE__ID", "node.id", node::MAX_ID_LEN),
            (
                "BRIEFRAIL__TRANSPORT__PREFIX",
                "transport.prefix",
                transport::MAX_PREFIX_LEN,
            ),
        ] {
            let longest = "n".repeat(max);
            Settings::load_with_env(None, env(&[(var, longest.as_str())]))
                .unwrap_or_else(|e| panic!("{var} of {max} bytes: {e}"));
            let over = "n".repeat(max + 1);
            let e = Settings::load_with_env(None, env(&[(var, over.as_str())]))
                .expect_err("one byte too long");
            assert!(
                e.to_string().contains(key) && e.to_string().contains("255"),
                "{e}"
            );
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("BRIEFRAIL__LEASE__SECONDS", "0", "lease.seconds"),
            ("BRIEFRAIL__LEASE__SECONDS", "soon", "lease.seconds"),
            ("BRIEFRAIL__BUILDER__KIND", "magic", "builder.kind"),
            ("BRIEFRAIL__TRANSPORT__KIND", "kafka", "transport.kind"),
            ("BRIEFRAIL__HTTP__BIND", "nowhere", "http.bind"),
            ("BRIEFRAIL__HTTP__BIND", "0.0.0.0:8080", "http.token"),
            ("BRIEFRAIL__DATABASE__URL", "mysql://x@y/z", "database.url"),
            (
                "BRIEFRAIL__DATABASE__BATCH_LANES",
                "0",
                "database.batch_lanes",
            ),
            (
                "BRIEFRAIL__DATABASE__BATCH_LANES",
                "17",
                "database.batch_lanes",
            ),
            ("BRIEFRAIL__LOG__FORMAT", "xml", "log.format"),
            ("BRIEFRAIL__OTEL__ENDPOINT", "jaeger:4318", "otel.endpoint"),
            (
                "BRIEFRAIL__OTEL__ENDPOINT",
                "grpc://jaeger:4317",
                "otel.endpoint",
            ),
            ("BRIEFRAIL__OTEL__ENDPOINT", "http://", "otel.endpoint"),
        ];
        for (k, v, key) in cases {
            let e = Settings::load_with_env(None, env(&[(k, v)])).expect_err(k);
            assert_eq!(e.key, key, "{k}={v}: {e}");
        }
    }

    #[test]
    fn an_invalid_name_lists_the_valid_ones() {
        for (var, value, key, valid) in [
            (
                "BRIEFRAIL__TRANSPORT__KIND",
                "kafka",
                "transport.kind",
                "amqp, postgres",
            ),
            (
                "BRIEFRAIL__LOG__FORMAT",
                "xml",
                "log.format",
                "pretty, json",
            ),
            (
                "BRIEFRAIL__BUILDER__KIND",
                "magic",
                "builder.kind",
                "brief, command, http",
            ),
        ] {
            let e = Settings::load_with_env(None, env(&[(var, value)])).expect_err(var);
            assert_eq!(e.key, key);
            assert!(
                e.problem
                    .contains(&format!("{value:?} is not one of: {valid}")),
                "{e}"
            );
        }
    }

    #[test]
    fn seconds_never_panic() {
        assert_eq!(seconds(1e300), Duration::MAX);
        assert_eq!(seconds(f64::INFINITY), Duration::MAX);
        assert_eq!(seconds(f64::NAN), Duration::ZERO);
        assert_eq!(seconds(-1.0), Duration::ZERO);
        assert_eq!(seconds(1.5), Duration::from_millis(1500));
    }

    #[test]
    fn config_errors_never_show_a_password() -> Result<(), Box<dyn std::error::Error>> {
        let e = Settings::load_with_env(
            None,
            env(&[("BRIEFRAIL__DATABASE__URL", "postgres://app:hunter2@db:5432")]),
        )
        .expect_err("no database name");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = Settings::load_with_env(
            None,
            env(&[(
                "BRIEFRAIL__TRANSPORT__AMQP_URL",
                "http://guest:s3cr3t@rabbit/",
            )]),
        )
        .expect_err("bad scheme");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        let s = Settings::load_with_env(
            None,
            env(&[("BRIEFRAIL__DATABASE__URL", "postgres://app:hunter2@db/x")]),
        )?;
        assert!(!format!("{s:?}").contains("hunter2"));
        Ok(())
    }
}
