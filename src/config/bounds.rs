//! The range every numeric setting must fall in: a [`Bound`] per key and the `bound!` macro that
//! writes one. Each section module lists the rows of its own keys; `ranges.rs` joins them into
//! [`super::BOUNDS`], so this module imports no section.

use super::{ConfigError, Settings};

/// The unit a bounded setting is written in, as the docs and errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
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
pub(crate) enum Value {
    Whole(u64),
    Real(f64),
}

impl Value {
    pub(super) fn as_f64(self) -> f64 {
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
    pub(crate) unit: Unit,
    /// The value in `s`; `None` when the key is unset (an optional key left to its default).
    pub(crate) get: fn(&Settings) -> Option<Value>,
    /// Puts `v` in the key (cast to its type): how tests walk the bounds.
    pub set: fn(&mut Settings, f64),
}

impl Bound {
    /// The range as the docs and errors write it, e.g. `0.01 to 86400 seconds`.
    pub(crate) fn range(&self) -> String {
        let unit = self.unit.name();
        let sep = if unit.is_empty() { "" } else { " " };
        format!("{} to {}{sep}{unit}", self.min, self.max)
    }

    /// Whether `v` is inside the range (NaN never is).
    pub(crate) fn contains(&self, v: f64) -> bool {
        v >= self.min && v <= self.max
    }

    pub(super) fn check(&self, s: &Settings) -> Result<(), ConfigError> {
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
pub(super) const DAY_S: f64 = 86_400.0;
/// One day in milliseconds.
pub(super) const DAY_MS: f64 = 86_400_000.0;

/// One row of [`super::BOUNDS`]: `bound!("section.key", min, max, Unit, |s| s.section.key, conv)`,
/// where `conv` says how the field holds its value (`real`, `whole`, or `opt_` either for an
/// optional key).
macro_rules! bound {
    ($key:literal, $min:expr, $max:expr, $unit:ident, |$s:ident| $field:expr, $conv:ident) => {
        $crate::config::Bound {
            key: $key,
            min: $min,
            max: $max,
            unit: $crate::config::Unit::$unit,
            get: |$s| bound!(@get $conv, $field),
            set: |$s, v| bound!(@set $conv, $field, v),
        }
    };
    (@get real, $field:expr) => { Some($crate::config::Value::Real($field)) };
    (@get whole, $field:expr) => { Some($crate::config::Value::Whole($field as u64)) };
    (@get opt_real, $field:expr) => { $field.map($crate::config::Value::Real) };
    (@get opt_whole, $field:expr) => { $field.map(|n| $crate::config::Value::Whole(n as u64)) };
    (@set real, $field:expr, $v:ident) => { $field = $v };
    (@set whole, $field:expr, $v:ident) => { $field = $v as _ };
    (@set opt_real, $field:expr, $v:ident) => { $field = Some($v) };
    (@set opt_whole, $field:expr, $v:ident) => { $field = Some($v as _) };
}
