//! Layered configuration: built-in defaults (`config/default.toml`, compiled in), then the file
//! given with `--config FILE`, then `BRIEFRAIL__SECTION__KEY` environment variables.
//!
//! Everything is validated once, at start, into [`Settings`]; a bad value is reported as one
//! [`ConfigError`] naming the key and the problem, with any password redacted.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::secret::{SecretUrl, redact_urls};

/// The defaults every layer starts from; also the documented reference of every key.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

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

/// The names an enum of the configuration accepts, and its refusal of any other listing them:
/// the config crate's own message ("enum X does not have variant constructor y") lists none.
macro_rules! config_names {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every name this setting accepts, in the order the docs list them.
            pub const NAMES: &'static [&'static str] = &[$($name),+];
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

/// The unit a bounded setting is written in, as the docs and errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Seconds,
    Milliseconds,
    Minutes,
    Days,
    /// A number of things (connections, rows, builds, attempts, spans).
    Count,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Milliseconds => "milliseconds",
            Unit::Minutes => "minutes",
            Unit::Days => "days",
            Unit::Count => "",
        }
    }
}

/// A setting's value as written: a whole number or a number of (fractional) units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Whole(u64),
    Real(f64),
}

impl Value {
    fn as_f64(self) -> f64 {
        match self {
            Value::Whole(n) => n as f64,
            Value::Real(v) => v,
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Whole(n) => write!(f, "{n}"),
            // `{:?}` keeps an exponent (1e20) instead of writing out twenty digits.
            Value::Real(v) => write!(f, "{v:?}"),
        }
    }
}

/// The range a numeric setting must fall in. Every duration and count of [`Settings`] has one
/// (a unit test holds `config/default.toml` to it): past the upper bound a value would
/// overflow a timer, a timestamp or a Postgres setting and crash or silently stop the node;
/// under the lower bound it would spin or do nothing.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// The dotted key, e.g. `lease.seconds`.
    pub key: &'static str,
    /// The least value accepted (inclusive).
    pub min: f64,
    /// The greatest value accepted (inclusive).
    pub max: f64,
    pub unit: Unit,
    /// The value in `s`; `None` when the key is unset (an optional key left to its default).
    pub get: fn(&Settings) -> Option<Value>,
    /// Puts `v` in the key (cast to its type): how tests walk the bounds.
    pub set: fn(&mut Settings, f64),
}

impl Bound {
    /// The range as the docs and errors write it, e.g. `0.01 to 86400 seconds`.
    pub fn range(&self) -> String {
        let unit = self.unit.name();
        let sep = if unit.is_empty() { "" } else { " " };
        format!("{} to {}{sep}{unit}", self.min, self.max)
    }

    /// Whether `v` is inside the range (NaN never is).
    pub fn contains(&self, v: f64) -> bool {
        v >= self.min && v <= self.max
    }

    fn check(&self, s: &Settings) -> Result<(), ConfigError> {
        match (self.get)(s) {
            Some(v) if !self.contains(v.as_f64()) => Err(ConfigError::new(
                self.key,
                format!("{} = {v} is out of range: {}", self.key, self.range()),
            )),
            _ => Ok(()),
        }
    }
}

/// One day, the upper bound of most durations: longer than any lease, timeout or interval a
/// node needs, and far inside what a timer, a timestamp or Postgres can hold.
const DAY_S: f64 = 86_400.0;
/// One day in milliseconds.
const DAY_MS: f64 = 86_400_000.0;

macro_rules! bound {
    ($key:literal, $min:expr, $max:expr, $unit:ident, |$s:ident| $field:expr, $conv:ident) => {
        Bound {
            key: $key,
            min: $min,
            max: $max,
            unit: Unit::$unit,
            get: |$s| bound!(@get $conv, $field),
            set: |$s, v| bound!(@set $conv, $field, v),
        }
    };
    (@get real, $field:expr) => { Some(Value::Real($field)) };
    (@get whole, $field:expr) => { Some(Value::Whole($field as u64)) };
    (@get opt_real, $field:expr) => { $field.map(Value::Real) };
    (@get opt_whole, $field:expr) => { $field.map(|n| Value::Whole(n as u64)) };
    (@set real, $field:expr, $v:ident) => { $field = $v };
    (@set whole, $field:expr, $v:ident) => { $field = $v as _ };
    (@set opt_real, $field:expr, $v:ident) => { $field = Some($v) };
    (@set opt_whole, $field:expr, $v:ident) => { $field = Some($v as _) };
}

/// The bounds of every numeric setting, in the order of `config/default.toml`. `otel.*` is
/// checked only while the exporter is on (its keys are not used otherwise).
pub const BOUNDS: &[Bound] = &[
    bound!(
        "database.pool_size",
        1.0,
        1000.0,
        Count,
        |s| s.database.pool_size,
        whole
    ),
    // Postgres takes at most INT_MAX milliseconds; a day is far inside it.
    bound!(
        "database.lock_timeout_ms",
        1.0,
        DAY_MS,
        Milliseconds,
        |s| s.database.lock_timeout_ms,
        whole
    ),
    bound!(
        "database.idle_in_transaction_timeout_ms",
        1.0,
        DAY_MS,
        Milliseconds,
        |s| s.database.idle_in_transaction_timeout_ms,
        whole
    ),
    bound!(
        "database.batch_lanes",
        1.0,
        1000.0,
        Count,
        |s| s.database.batch_lanes,
        whole
    ),
    bound!(
        "lease.seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.lease.seconds,
        real
    ),
    bound!(
        "lease.heartbeat_seconds",
        0.005,
        DAY_S,
        Seconds,
        |s| s.lease.heartbeat_seconds,
        opt_real
    ),
    bound!(
        "sweeper.interval_seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.sweeper.interval_seconds,
        real
    ),
    bound!(
        "sweeper.batch",
        1.0,
        100_000.0,
        Count,
        |s| s.sweeper.batch,
        whole
    ),
    bound!(
        "retention.events_days",
        0.0,
        36_500.0,
        Days,
        |s| s.retention.events_days,
        real
    ),
    bound!(
        "retention.runs_days",
        0.0,
        36_500.0,
        Days,
        |s| s.retention.runs_days,
        real
    ),
    bound!(
        "retention.frames_keep",
        0.0,
        1_000_000.0,
        Count,
        |s| s.retention.frames_keep,
        whole
    ),
    bound!(
        "retention.interval_seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.retention.interval_seconds,
        real
    ),
    // One statement per batch must stay a short transaction.
    bound!(
        "retention.batch",
        1.0,
        100_000.0,
        Count,
        |s| s.retention.batch,
        whole
    ),
    bound!(
        "retry.max_attempts",
        1.0,
        1000.0,
        Count,
        |s| s.retry.max_attempts,
        whole
    ),
    bound!(
        "retry.backoff_base_seconds",
        0.001,
        DAY_S,
        Seconds,
        |s| s.retry.backoff_base_seconds,
        real
    ),
    bound!(
        "retry.backoff_max_seconds",
        0.001,
        DAY_S,
        Seconds,
        |s| s.retry.backoff_max_seconds,
        real
    ),
    bound!(
        "trigger.debounce_ms",
        0.0,
        DAY_MS,
        Milliseconds,
        |s| s.trigger.debounce_ms,
        whole
    ),
    bound!(
        "trigger.max_wait_ms",
        0.0,
        DAY_MS,
        Milliseconds,
        |s| s.trigger.max_wait_ms,
        whole
    ),
    bound!(
        "trigger.idle_seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.trigger.idle_seconds,
        real
    ),
    bound!(
        "fairness.background_promote_seconds",
        0.0,
        DAY_S,
        Seconds,
        |s| s.fairness.background_promote_seconds,
        real
    ),
    bound!(
        "builders.concurrency",
        1.0,
        1024.0,
        Count,
        |s| s.builders.concurrency,
        whole
    ),
    // The default, 32 per builder, stays inside it at the most builders.
    bound!(
        "builders.held_claims",
        1.0,
        32_768.0,
        Count,
        |s| s.builders.held_claims,
        opt_whole
    ),
    bound!(
        "builder.timeout_seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.builder.timeout_seconds,
        real
    ),
    bound!(
        "relay.poll_ms",
        1.0,
        DAY_MS,
        Milliseconds,
        |s| s.relay.poll_ms,
        whole
    ),
    bound!(
        "relay.batch",
        1.0,
        100_000.0,
        Count,
        |s| s.relay.batch,
        whole
    ),
    bound!(
        "reconcile.after_seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.reconcile.after_seconds,
        real
    ),
    bound!(
        "node.heartbeat_seconds",
        0.01,
        DAY_S,
        Seconds,
        |s| s.node.heartbeat_seconds,
        real
    ),
    bound!(
        "http.session_minutes",
        1.0,
        43_200.0,
        Minutes,
        |s| s.http.session_minutes,
        real
    ),
    bound!(
        "shutdown.grace_seconds",
        0.0,
        DAY_S,
        Seconds,
        |s| s.shutdown.grace_seconds,
        real
    ),
    bound!(
        "otel.timeout_seconds",
        0.001,
        300.0,
        Seconds,
        |s| s.otel.timeout_seconds,
        real
    ),
    bound!(
        "otel.queue_size",
        1.0,
        1_000_000.0,
        Count,
        |s| s.otel.queue_size,
        whole
    ),
    bound!(
        "otel.batch_delay_ms",
        1.0,
        3_600_000.0,
        Milliseconds,
        |s| s.otel.batch_delay_ms,
        whole
    ),
];

/// `v` seconds as a duration, never panicking: a negative or NaN value is zero and one too
/// large for a `Duration` saturates. [`BOUNDS`] keeps loaded values far inside; this is for a
/// [`Settings`] built in code.
pub fn seconds(v: f64) -> Duration {
    // `max` maps NaN to zero as well.
    Duration::try_from_secs_f64(v.max(0.0)).unwrap_or(Duration::MAX)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub database: DatabaseSettings,
    pub lease: LeaseSettings,
    pub sweeper: SweeperSettings,
    pub retention: RetentionSettings,
    pub retry: RetrySettings,
    pub trigger: TriggerSettings,
    pub fairness: FairnessSettings,
    pub builders: BuildersSettings,
    pub builder: BuilderSettings,
    pub transport: TransportSettings,
    pub relay: RelaySettings,
    pub reconcile: ReconcileSettings,
    pub node: NodeSettings,
    pub http: HttpSettings,
    pub shutdown: ShutdownSettings,
    pub log: LogSettings,
    pub otel: OtelSettings,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `postgres://user[:password]@host:port/db`; the password never reaches a log line.
    pub url: SecretUrl,
    pub pool_size: u32,
    /// `lock_timeout` on every connection: a stalled lock holder is cut off by Postgres.
    pub lock_timeout_ms: u64,
    /// `idle_in_transaction_session_timeout`: a transaction left open is rolled back.
    pub idle_in_transaction_timeout_ms: u64,
    /// Claim batches (and, as many, commit batches) a node has on the wire at once, each on a
    /// pooled connection. Requests that arrive while every lane is busy share the next batch:
    /// fewer lanes make larger batches (less database work per matter); more lanes keep claims
    /// and commits moving past a batch that waits for a row lock or a stalled flush.
    pub batch_lanes: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseSettings {
    /// The lease of this node's claims: each claim and heartbeat writes `ops.now() + seconds` on
    /// the row as its deadline (the ledger clock: the database clock); once it passes, any node may take the claim
    /// over. Other nodes compare with the row, never with their own setting.
    pub seconds: f64,
    /// Seconds between heartbeats of a running build; defaults to a third of the lease.
    pub heartbeat_seconds: Option<f64>,
}

impl LeaseSettings {
    pub fn lease(&self) -> Duration {
        seconds(self.seconds)
    }
    pub fn heartbeat(&self) -> Duration {
        seconds(self.heartbeat_seconds.unwrap_or(self.seconds / 3.0))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweeperSettings {
    pub interval_seconds: f64,
    /// At most this many rows are swept or reconciled per pass.
    pub batch: u32,
}

/// What the sweeper removes once no guarantee needs it (docs/protocol.md, "Retention").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Published outbox events the rail consumed, older than this, go with their inbox rows.
    /// Unpublished and unconsumed events are never removed. 0: keep every event.
    pub events_days: f64,
    /// Runs older than this go, except each matter's latest and any still open. 0: keep all.
    pub runs_days: f64,
    /// Each matter keeps its newest N frames (its newest is never removed). 0: keep every
    /// frame (a firm may need to show which Brief counsel saw on a given day).
    pub frames_keep: u32,
    /// Seconds between retention passes.
    pub interval_seconds: f64,
    /// Rows (frames: matters) per statement; each statement is its own short transaction.
    pub batch: u32,
}

impl RetentionSettings {
    /// The age past which consumed events go; `None`: kept forever.
    pub fn events_after(&self) -> Option<Duration> {
        days(self.events_days)
    }
    /// The age past which runs go; `None`: kept forever.
    pub fn runs_after(&self) -> Option<Duration> {
        days(self.runs_days)
    }
    /// How many frames each matter keeps; `None`: every frame.
    pub fn frames_kept(&self) -> Option<u32> {
        (self.frames_keep > 0).then_some(self.frames_keep)
    }
}

fn days(d: f64) -> Option<Duration> {
    (d > 0.0).then(|| seconds(d * 86_400.0))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySettings {
    pub max_attempts: u32,
    pub backoff_base_seconds: f64,
    pub backoff_max_seconds: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerSettings {
    pub debounce_ms: u64,
    pub max_wait_ms: u64,
    pub idle_seconds: f64,
}

impl TriggerSettings {
    /// How long a matter actor stays idle before its supervisor stops it.
    pub fn idle_after(&self) -> Duration {
        seconds(self.idle_seconds)
    }
}

/// Who is served next when build slots are scarce (`crate::ledger::fairness`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FairnessSettings {
    /// A background demand that has waited this long is served as if interactive: the bound
    /// on how long interactive work can hold background work back.
    pub background_promote_seconds: f64,
}

impl FairnessSettings {
    /// [`Self::background_promote_seconds`] as a duration.
    pub fn promote_after(&self) -> Duration {
        seconds(self.background_promote_seconds)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildersSettings {
    /// Builds running at once (the builder's own work).
    pub concurrency: usize,
    /// The most claims the node holds at once: being claimed, waiting for a builder, building
    /// or committing (fewer while builds are slow: `crate::actors::capacity`). Unset: 32
    /// per builder. What a crashed node leaves to wait out a lease.
    #[serde(default)]
    pub held_claims: Option<usize>,
}

impl BuildersSettings {
    /// 32 claims per builder unless set: with builds of a few milliseconds, the claims and
    /// commits of that many matters on the wire meet in batches (at 8 builders, 256; of 4, 8, 16
    /// and 32 per builder, 32 served the most: CHANGELOG.md, "Performance").
    pub fn held_claims(&self) -> usize {
        self.held_claims.unwrap_or(32 * self.concurrency)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum BuilderKind {
    Brief,
    Command,
    Http,
}

config_names!(BuilderKind { Brief => "brief", Command => "command", Http => "http" });

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuilderSettings {
    pub kind: BuilderKind,
    /// argv of the `command` builder.
    pub command: Vec<String>,
    /// Endpoint of the `http` builder (`http://` or `https://`).
    pub url: SecretUrl,
    /// PEM file of extra certificate authorities the `http` builder trusts for `https://`
    /// (an on-prem firm's own CA), besides the system's. Empty: the system's only.
    #[serde(default)]
    pub ca_file: String,
    pub timeout_seconds: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum TransportKind {
    Amqp,
    Postgres,
}

config_names!(TransportKind { Amqp => "amqp", Postgres => "postgres" });

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransportSettings {
    pub kind: TransportKind,
    pub amqp_url: SecretUrl,
    /// Prefix of every exchange and queue name, so installations and tests do not collide.
    pub prefix: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySettings {
    pub poll_ms: u64,
    pub batch: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileSettings {
    pub after_seconds: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSettings {
    /// Recorded on every run this node starts. Empty: `hostname-pid`.
    pub id: String,
    /// How often the node writes its heartbeat to `ops.nodes` (the console's nodes page); it
    /// shows as gone after three of its own intervals without one.
    pub heartbeat_seconds: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    pub bind: String,
    /// Bearer token required by the API; mandatory when `bind` is not loopback. The console's
    /// login trades it for a session.
    pub token: String,
    /// How long a console session lasts after login.
    pub session_minutes: f64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownSettings {
    pub grace_seconds: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum LogFormat {
    Pretty,
    Json,
}

config_names!(LogFormat { Pretty => "pretty", Json => "json" });

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    pub level: String,
}

/// The OpenTelemetry exporter (`feature = "otel"`): off unless `endpoint` is set. Spans go to
/// `{endpoint}/v1/traces` as OTLP/HTTP JSON from a bounded queue, so a slow or absent collector
/// costs dropped spans, never a slower build.
#[derive(Debug, Clone, Deserialize)]
pub struct OtelSettings {
    /// The collector's OTLP/HTTP base URL (Jaeger or Tempo on port 4318, e.g.
    /// `http://jaeger:4318`); `/v1/traces` is appended unless the path already ends with it.
    /// `user:password@` is sent as basic auth and never logged. Empty: no export (the default).
    pub endpoint: SecretUrl,
    /// `service.name` of the exported resource: what the trace UI lists the spans under.
    pub service_name: String,
    /// Upper bound on one export request; a collector slower than this loses that batch.
    pub timeout_seconds: f64,
    /// Finished spans waiting for export; beyond this they are dropped (and counted in a
    /// warning), so memory stays bounded while the collector is away.
    pub queue_size: usize,
    /// How long a finished span may wait for the next batch (the batch also leaves when full).
    pub batch_delay_ms: u64,
}

impl OtelSettings {
    /// Whether spans are exported at all.
    pub fn enabled(&self) -> bool {
        !self.endpoint.expose().trim().is_empty()
    }

    /// The export timeout as a duration.
    pub fn timeout(&self) -> Duration {
        seconds(self.timeout_seconds)
    }
}

impl Settings {
    /// Defaults, then `file` (if any), then the process environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_with_env(file, std::env::vars())
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
            refuse_unknown_keys(&table, &path.display().to_string())?;
            builder = builder.add_source(file);
        }
        let env: config::Map<String, String> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with("BRIEFRAIL__"))
            .collect();
        for var in env.keys() {
            refuse_unknown_variable(var)?;
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

    /// Checks every value a node relies on; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_bounds()?;
        self.validate_database()?;
        self.validate_timings()?;
        self.validate_builders()?;
        self.validate_transport()?;
        self.validate_relay_and_reconcile()?;
        self.validate_http()?;
        self.validate_shutdown_and_log()?;
        self.validate_otel()
    }

    /// Every numeric setting inside its [`BOUNDS`], and `node.id` free of control characters:
    /// what a node needs so that no timer, timestamp or session setting overflows. A node
    /// checks this at start too, since an embedder may build [`Settings`] without
    /// [`Settings::validate`].
    pub fn validate_bounds(&self) -> Result<(), ConfigError> {
        let otel = self.otel.enabled();
        for b in BOUNDS {
            if otel || !b.key.starts_with("otel.") {
                b.check(self)?;
            }
        }
        if let Some(c) = self.node.id.chars().find(|c| c.is_control()) {
            return Err(ConfigError::new(
                "node.id",
                format!(
                    "must not contain control characters (found U+{:04X}): it is written in \
                     every run and log line",
                    c as u32
                ),
            ));
        }
        Ok(())
    }

    /// `otel.endpoint` is empty (off) or an `http(s)://` URL with a host; when it is set, the
    /// service name is not empty, the timeout, queue and batch delay are positive and bounded.
    fn validate_otel(&self) -> Result<(), ConfigError> {
        let o = &self.otel;
        if !o.enabled() {
            return Ok(());
        }
        if !cfg!(feature = "otel") {
            return Err(ConfigError::new(
                "otel.endpoint",
                "is set, but this build has no `otel` feature (rebuild with it, or leave it empty)",
            ));
        }
        let shown = o.endpoint.to_string();
        let u = url::Url::parse(o.endpoint.expose().trim()).map_err(|e| {
            ConfigError::new("otel.endpoint", format!("{shown:?} is not a URL: {e}"))
        })?;
        if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none_or(str::is_empty) {
            return Err(ConfigError::new(
                "otel.endpoint",
                format!(
                    "{shown:?} is not an http:// or https:// URL with a host (e.g. http://jaeger:4318)"
                ),
            ));
        }
        if o.service_name.trim().is_empty() {
            return Err(ConfigError::new("otel.service_name", "must not be empty"));
        }
        positive("otel.timeout_seconds", o.timeout_seconds)?;
        if o.timeout_seconds > 300.0 {
            return Err(ConfigError::new(
                "otel.timeout_seconds",
                format!("{} is too long: at most 300", o.timeout_seconds),
            ));
        }
        positive("otel.queue_size", o.queue_size as f64)?;
        if o.queue_size > 1_000_000 {
            return Err(ConfigError::new(
                "otel.queue_size",
                format!("{} is too large: at most 1000000", o.queue_size),
            ));
        }
        positive("otel.batch_delay_ms", o.batch_delay_ms as f64)
    }

    /// Retention ages are zero (keep) or positive days; the interval and batch positive, the
    /// batch small enough that one statement stays short.
    fn validate_retention(&self) -> Result<(), ConfigError> {
        let r = &self.retention;
        for (key, v) in [
            ("retention.events_days", r.events_days),
            ("retention.runs_days", r.runs_days),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(ConfigError::new(
                    key,
                    format!("must be 0 (keep forever) or a positive number of days, not {v}"),
                ));
            }
        }
        positive("retention.interval_seconds", r.interval_seconds)?;
        positive("retention.batch", r.batch as f64)?;
        if r.batch > 100_000 {
            return Err(ConfigError::new(
                "retention.batch",
                format!(
                    "{} is too large: one statement must stay short (at most 100000)",
                    r.batch
                ),
            ));
        }
        Ok(())
    }

    /// `database.url` is a `postgres://` URL naming a database; `database.pool_size` > 0;
    /// `database.batch_lanes` > 0 and at most the pool's connections.
    fn validate_database(&self) -> Result<(), ConfigError> {
        let db = url::Url::parse(self.database.url.expose())
            .map_err(|e| ConfigError::new("database.url", format!("not a URL: {e}")))?;
        if !matches!(db.scheme(), "postgres" | "postgresql") {
            return Err(ConfigError::new(
                "database.url",
                "scheme must be postgres:// or postgresql://",
            ));
        }
        if db.path().trim_start_matches('/').is_empty() {
            return Err(ConfigError::new(
                "database.url",
                "names no database (add /dbname)",
            ));
        }
        positive("database.pool_size", self.database.pool_size as f64)?;
        positive("database.batch_lanes", self.database.batch_lanes as f64)?;
        if self.database.batch_lanes > self.database.pool_size {
            return Err(ConfigError::new(
                "database.batch_lanes",
                format!(
                    "each lane runs on a pooled connection: at most database.pool_size ({}), \
                     got {}",
                    self.database.pool_size, self.database.batch_lanes
                ),
            ));
        }
        Ok(())
    }

    /// Lease, heartbeat, sweeper, retry and trigger timings: positive, and each bound on the
    /// right side of the other (heartbeat within the lease, maxima at least their bases).
    fn validate_timings(&self) -> Result<(), ConfigError> {
        positive("lease.seconds", self.lease.seconds)?;
        positive("node.heartbeat_seconds", self.node.heartbeat_seconds)?;
        positive("http.session_minutes", self.http.session_minutes)?;
        if let Some(hb) = self.lease.heartbeat_seconds {
            positive("lease.heartbeat_seconds", hb)?;
            if hb >= self.lease.seconds {
                return Err(ConfigError::new(
                    "lease.heartbeat_seconds",
                    format!(
                        "must be shorter than lease.seconds ({})",
                        self.lease.seconds
                    ),
                ));
            }
        }
        positive("sweeper.interval_seconds", self.sweeper.interval_seconds)?;
        positive("sweeper.batch", self.sweeper.batch as f64)?;
        self.validate_retention()?;
        positive("retry.max_attempts", self.retry.max_attempts as f64)?;
        positive(
            "retry.backoff_base_seconds",
            self.retry.backoff_base_seconds,
        )?;
        if self.retry.backoff_max_seconds < self.retry.backoff_base_seconds {
            return Err(ConfigError::new(
                "retry.backoff_max_seconds",
                "must be at least retry.backoff_base_seconds",
            ));
        }
        if self.trigger.max_wait_ms < self.trigger.debounce_ms {
            return Err(ConfigError::new(
                "trigger.max_wait_ms",
                "must be at least trigger.debounce_ms",
            ));
        }
        positive("trigger.idle_seconds", self.trigger.idle_seconds)
    }

    /// Builder concurrency and timeout are positive, and the chosen `builder.kind` has what it
    /// needs: a program for `command`, an `http(s)://` URL for `http`.
    fn validate_builders(&self) -> Result<(), ConfigError> {
        positive("builders.concurrency", self.builders.concurrency as f64)?;
        if self.builders.held_claims() < self.builders.concurrency {
            return Err(ConfigError::new(
                "builders.held_claims",
                format!(
                    "must be at least builders.concurrency ({}): each build holds its claim",
                    self.builders.concurrency
                ),
            ));
        }
        positive("builder.timeout_seconds", self.builder.timeout_seconds)?;
        match self.builder.kind {
            BuilderKind::Command if self.builder.command.is_empty() => Err(ConfigError::new(
                "builder.command",
                "must name a program when builder.kind = \"command\"",
            )),
            BuilderKind::Http => {
                let u = url::Url::parse(self.builder.url.expose())
                    .map_err(|e| ConfigError::new("builder.url", format!("not a URL: {e}")))?;
                if !matches!(u.scheme(), "http" | "https") {
                    return Err(ConfigError::new(
                        "builder.url",
                        "scheme must be http:// or https://",
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// `transport.amqp_url` is one `amqp(s)://` URL, or several separated by commas (the
    /// members of a cluster); `transport.prefix` is a safe queue-name prefix.
    fn validate_transport(&self) -> Result<(), ConfigError> {
        let listed = self.transport.amqp_url.members();
        for (i, member) in listed.iter().enumerate() {
            let which = if listed.len() > 1 {
                format!("member {} of the list: ", i + 1)
            } else {
                String::new()
            };
            let amqp = url::Url::parse(member.expose()).map_err(|e| {
                ConfigError::new("transport.amqp_url", format!("{which}not a URL: {e}"))
            })?;
            if !matches!(amqp.scheme(), "amqp" | "amqps") {
                return Err(ConfigError::new(
                    "transport.amqp_url",
                    format!("{which}scheme must be amqp:// or amqps://"),
                ));
            }
        }
        if self.transport.prefix.is_empty()
            || !self
                .transport
                .prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(ConfigError::new(
                "transport.prefix",
                "must be non-empty ASCII letters, digits, '-', '_' or '.'",
            ));
        }
        Ok(())
    }

    /// The relay's poll interval and batch, and the reconciler's delay, are positive.
    fn validate_relay_and_reconcile(&self) -> Result<(), ConfigError> {
        positive("relay.poll_ms", self.relay.poll_ms as f64)?;
        positive("relay.batch", self.relay.batch as f64)?;
        positive("reconcile.after_seconds", self.reconcile.after_seconds)
    }

    /// `http.bind` is `host:port`, and a token is set when it is not a loopback address.
    fn validate_http(&self) -> Result<(), ConfigError> {
        let bind: SocketAddr = self.http.bind.parse().map_err(|_| {
            ConfigError::new(
                "http.bind",
                format!(
                    "{:?} is not host:port (e.g. 127.0.0.1:8080)",
                    self.http.bind
                ),
            )
        })?;
        if !bind.ip().is_loopback() && self.http.token.trim().is_empty() {
            return Err(ConfigError::new(
                "http.token",
                format!("required when http.bind ({bind}) is not a loopback address"),
            ));
        }
        Ok(())
    }

    /// `shutdown.grace_seconds` is finite and not negative; `log.level` is a tracing filter.
    fn validate_shutdown_and_log(&self) -> Result<(), ConfigError> {
        if self.shutdown.grace_seconds < 0.0 || !self.shutdown.grace_seconds.is_finite() {
            return Err(ConfigError::new(
                "shutdown.grace_seconds",
                "must be zero or more",
            ));
        }
        // The log settings are the binary's (an embedder installs its own subscriber).
        #[cfg(feature = "cli")]
        tracing_subscriber::EnvFilter::try_new(&self.log.level)
            .map_err(|e| ConfigError::new("log.level", format!("not a tracing filter: {e}")))?;
        Ok(())
    }

    /// This node's id: `node.id`, or `hostname-pid`.
    pub fn node_id(&self) -> String {
        if !self.node.id.trim().is_empty() {
            return self.node.id.trim().to_owned();
        }
        let host = hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "node".into());
        format!("{host}-{}", std::process::id())
    }
}

/// Every section of [`Settings`] and the keys it has, read from the structs' own `Deserialize`
/// implementations, so a field added to a struct is known here at once.
pub fn known_keys() -> Vec<(&'static str, &'static [&'static str])> {
    use introspect::fields;
    vec![
        ("database", fields::<DatabaseSettings>()),
        ("lease", fields::<LeaseSettings>()),
        ("sweeper", fields::<SweeperSettings>()),
        ("retention", fields::<RetentionSettings>()),
        ("retry", fields::<RetrySettings>()),
        ("trigger", fields::<TriggerSettings>()),
        ("fairness", fields::<FairnessSettings>()),
        ("builders", fields::<BuildersSettings>()),
        ("builder", fields::<BuilderSettings>()),
        ("transport", fields::<TransportSettings>()),
        ("relay", fields::<RelaySettings>()),
        ("reconcile", fields::<ReconcileSettings>()),
        ("node", fields::<NodeSettings>()),
        ("http", fields::<HttpSettings>()),
        ("shutdown", fields::<ShutdownSettings>()),
        ("log", fields::<LogSettings>()),
        ("otel", fields::<OtelSettings>()),
    ]
}

/// Refuses a section or key of a file that no setting has. Without this a misspelt key
/// (`[databse]`, `lease.second`) is silently ignored and the default runs instead.
fn refuse_unknown_keys(
    table: &config::Map<String, config::Value>,
    file: &str,
) -> Result<(), ConfigError> {
    let known = known_keys();
    for (section, value) in table {
        let Some((_, keys)) = known.iter().find(|(name, _)| name == section) else {
            return Err(ConfigError::new(
                section,
                format!(
                    "unknown section in {file}; the sections are: {}",
                    known.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                ),
            ));
        };
        // A section that is not a table is the deserializer's to refuse, with its type.
        let Ok(entries) = value.clone().into_table() else {
            continue;
        };
        if let Some(key) = entries.keys().find(|k| !keys.contains(&k.as_str())) {
            return Err(ConfigError::new(
                &format!("{section}.{key}"),
                format!(
                    "unknown key in {file}; [{section}] has: {}",
                    keys.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses a `BRIEFRAIL__SECTION__KEY` variable that names no setting, naming the variable.
fn refuse_unknown_variable(var: &str) -> Result<(), ConfigError> {
    let known = known_keys();
    let key = var["BRIEFRAIL__".len()..].to_lowercase().replace("__", ".");
    let sections = || known.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    let problem = match key.split_once('.') {
        None => format!(
            "environment variable {var} names no key (BRIEFRAIL__SECTION__KEY; the sections are: {})",
            sections()
        ),
        Some((section, name)) => match known.iter().find(|(n, _)| *n == section) {
            None => format!(
                "unknown section in environment variable {var}; the sections are: {}",
                sections()
            ),
            Some((_, keys)) if !keys.contains(&name) => format!(
                "unknown key in environment variable {var}; [{section}] has: {}",
                keys.join(", ")
            ),
            Some(_) => return Ok(()),
        },
    };
    Err(ConfigError::new(&key, problem))
}

/// The field names of a struct, from its derived `Deserialize`: a deserializer that stops at
/// `deserialize_struct` and hands back the `fields` serde gives it.
mod introspect {
    use serde::de::{self, Deserialize, Deserializer, Visitor};

    #[derive(Debug)]
    pub struct Stop(pub &'static [&'static str]);

    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("introspection stops here")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<T: std::fmt::Display>(_: T) -> Self {
            Stop(&[])
        }
    }

    struct Fields;

    impl<'de> Deserializer<'de> for Fields {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop(&[]))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Stop> {
            Err(Stop(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    /// The fields of struct `T` (empty for anything that is not a struct).
    pub fn fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
        match T::deserialize(Fields) {
            Err(Stop(fields)) => fields,
            Ok(_) => &[],
        }
    }
}

fn positive(key: &str, v: f64) -> Result<(), ConfigError> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(ConfigError::new(
            key,
            format!("must be greater than zero (got {v})"),
        ))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

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
    fn a_broker_cluster_is_a_comma_separated_list_each_member_checked()
    -> Result<(), Box<dyn std::error::Error>> {
        let s = Settings::load_with_env(
            None,
            env(&[(
                "BRIEFRAIL__TRANSPORT__AMQP_URL",
                "amqp://guest:pw@10.0.0.1:5672/%2f, amqp://guest:pw@10.0.0.2:5672/%2f",
            )]),
        )?;
        assert_eq!(s.transport.amqp_url.members().len(), 2);
        let e = Settings::load_with_env(
            None,
            env(&[(
                "BRIEFRAIL__TRANSPORT__AMQP_URL",
                "amqp://guest:s3cr3t@10.0.0.1/%2f,http://guest:s3cr3t@10.0.0.2/",
            )]),
        )
        .expect_err("the second member is not amqp");
        assert_eq!(e.key, "transport.amqp_url");
        assert!(e.to_string().contains("member 2"), "{e}");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        Ok(())
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
    fn unknown_keys_are_refused_naming_the_key_and_where_it_came_from()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("briefrail-config-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join("node.toml");
        for (text, key, says) in [
            (
                "[databse]\nurl = \"postgres://u@h/d\"\n",
                "databse",
                "unknown section",
            ),
            (
                "[lease]\nsecond = 30\n",
                "lease.second",
                "[lease] has: seconds, heartbeat_seconds",
            ),
            (
                "[http]\nbind = \"127.0.0.1:9\"\ntokne = \"x\"\n",
                "http.tokne",
                "unknown key",
            ),
        ] {
            std::fs::write(&file, text)?;
            let e = Settings::load_with_env(Some(&file), std::iter::empty()).expect_err(text);
            assert_eq!(e.key, key, "{e}");
            assert!(e.problem.contains(says), "{e}");
            assert!(e.problem.contains(&file.display().to_string()), "{e}");
        }
        std::fs::write(&file, "[lease]\nseconds = 30\nheartbeat_seconds = 5\n")?;
        let s = Settings::load_with_env(Some(&file), std::iter::empty())?;
        assert_eq!(s.lease.heartbeat(), Duration::from_secs(5));
        std::fs::remove_dir_all(&dir).ok();

        for (var, key) in [
            ("BRIEFRAIL__LEASE__SECOND", "lease.second"),
            ("BRIEFRAIL__DATABSE__URL", "databse.url"),
            ("BRIEFRAIL__DATABASE", "database"),
        ] {
            let e = Settings::load_with_env(None, env(&[(var, "1")])).expect_err(var);
            assert_eq!(e.key, key, "{e}");
            assert!(e.problem.contains(var), "{e}");
        }
        Ok(())
    }

    /// Every key a section has is in `config/default.toml`, set or in a comment (the file is
    /// the documented reference), and the file sets no key the settings lack.
    #[test]
    fn the_defaults_file_documents_every_key_and_no_other() -> Result<(), Box<dyn std::error::Error>>
    {
        use config::{File, FileFormat, Source};
        let table = File::from_str(DEFAULT_TOML, FileFormat::Toml).collect()?;
        refuse_unknown_keys(&table, "config/default.toml")?;
        let known = known_keys();
        let sections: Vec<&str> = known.iter().map(|(n, _)| *n).collect();
        let mut top = introspect::fields::<Settings>().to_vec();
        top.sort_unstable();
        let mut listed = sections.clone();
        listed.sort_unstable();
        assert_eq!(top, listed, "known_keys() lists every section of Settings");
        for (section, keys) in known {
            let body = DEFAULT_TOML
                .split(&format!("[{section}]\n"))
                .nth(1)
                .unwrap_or_else(|| panic!("config/default.toml has no [{section}]"));
            let body = body.split("\n[").next().unwrap_or(body);
            for key in keys {
                assert!(
                    body.lines().any(|l| {
                        let l = l.trim_start_matches("# ");
                        l.starts_with(&format!("{key} ="))
                    }),
                    "config/default.toml does not document {section}.{key}"
                );
            }
        }
        Ok(())
    }

    /// Every key of `config/default.toml` whose value (set or in a comment) is a number has
    /// its row in [`BOUNDS`], so a new duration or count cannot skip the check; every row
    /// names a real key, holds its default, and has its range in the table of
    /// docs/configuration.md.
    #[test]
    fn every_numeric_key_has_a_bound_documented_in_the_configuration_guide() {
        let known = known_keys();
        let mut section = "";
        let mut numeric = Vec::new();
        for line in DEFAULT_TOML.lines() {
            let line = line.trim_start_matches("# ").trim();
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name;
                continue;
            }
            let Some((key, value)) = line.split_once(" = ") else {
                continue;
            };
            let listed = known
                .iter()
                .any(|(n, keys)| *n == section && keys.contains(&key));
            if listed && value.trim().parse::<f64>().is_ok() {
                numeric.push(format!("{section}.{key}"));
            }
        }
        assert!(numeric.len() >= 25, "{numeric:?}");
        for key in &numeric {
            assert!(
                BOUNDS.iter().any(|b| b.key == *key),
                "{key} has no row in config::BOUNDS"
            );
        }
        let guide = include_str!("../docs/configuration.md");
        let defaults = Settings::defaults();
        for b in BOUNDS {
            let (section, key) = b.key.split_once('.').expect("dotted");
            assert!(
                known
                    .iter()
                    .any(|(n, keys)| *n == section && keys.contains(&key)),
                "{} is no setting",
                b.key
            );
            assert!(b.min <= b.max, "{}", b.key);
            if let Some(v) = (b.get)(&defaults) {
                assert!(
                    b.contains(v.as_f64()),
                    "the default of {} is out of range",
                    b.key
                );
            }
            let row = guide
                .lines()
                .find(|l| l.starts_with(&format!("| `{}` |", b.key)))
                .unwrap_or_else(|| panic!("docs/configuration.md has no row for {}", b.key));
            assert!(
                row.contains(&format!("| {} |", b.range())),
                "docs/configuration.md's row for {} gives its range {}",
                b.key,
                b.range()
            );
        }
    }

    #[test]
    fn a_value_past_its_bound_names_the_key_and_the_range() {
        for b in BOUNDS {
            let mut s = Settings::defaults();
            s.otel.endpoint = SecretUrl::new("http://jaeger:4318");
            (b.set)(&mut s, b.max * 10.0 + 1.0);
            let e = s.validate_bounds().expect_err(b.key);
            assert_eq!(e.key, b.key, "{e}");
            assert!(e.problem.contains(&b.range()), "{e}");
            (b.set)(&mut s, f64::NAN);
            if matches!((b.get)(&s), Some(Value::Real(_))) {
                assert_eq!(s.validate_bounds().expect_err(b.key).key, b.key);
            }
        }
        let mut s = Settings::defaults();
        s.trigger.idle_seconds = 1e20;
        assert_eq!(
            s.validate().expect_err("1e20").to_string(),
            "config trigger.idle_seconds: trigger.idle_seconds = 1e20 is out of range: \
             0.01 to 86400 seconds"
        );
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
    fn otel_is_off_by_default_and_checked_when_on() -> Result<(), Box<dyn std::error::Error>> {
        let s = Settings::defaults();
        assert!(!s.otel.enabled());
        assert_eq!(s.otel.service_name, "briefrail");
        let s = Settings::load_with_env(
            None,
            env(&[("BRIEFRAIL__OTEL__ENDPOINT", "http://jaeger:4318")]),
        )?;
        assert!(s.otel.enabled());
        for (k, v, key) in [
            (
                "BRIEFRAIL__OTEL__TIMEOUT_SECONDS",
                "0",
                "otel.timeout_seconds",
            ),
            ("BRIEFRAIL__OTEL__QUEUE_SIZE", "0", "otel.queue_size"),
            (
                "BRIEFRAIL__OTEL__BATCH_DELAY_MS",
                "0",
                "otel.batch_delay_ms",
            ),
            ("BRIEFRAIL__OTEL__SERVICE_NAME", " ", "otel.service_name"),
        ] {
            let e = Settings::load_with_env(
                None,
                env(&[("BRIEFRAIL__OTEL__ENDPOINT", "http://jaeger:4318"), (k, v)]),
            )
            .expect_err(k);
            assert_eq!(e.key, key, "{k}={v}: {e}");
        }
        // Off, the other keys are not looked at.
        Settings::load_with_env(None, env(&[("BRIEFRAIL__OTEL__QUEUE_SIZE", "0")]))?;
        // A bad endpoint is named in the error, without its password.
        let e = Settings::load_with_env(
            None,
            env(&[("BRIEFRAIL__OTEL__ENDPOINT", "ftp://ops:s3cr3t@tempo:4318")]),
        )
        .expect_err("not http");
        assert_eq!(e.key, "otel.endpoint");
        assert!(e.to_string().contains("ftp://ops:***@tempo:4318"), "{e}");
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        Ok(())
    }

    #[test]
    fn heartbeat_must_be_shorter_than_lease() {
        let e = Settings::load_with_env(
            None,
            env(&[
                ("BRIEFRAIL__LEASE__SECONDS", "10"),
                ("BRIEFRAIL__LEASE__HEARTBEAT_SECONDS", "10"),
            ]),
        )
        .expect_err("heartbeat == lease");
        assert_eq!(e.key, "lease.heartbeat_seconds");
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
