//! The range every numeric setting must fall in. Each section module lists the rows of its own
//! keys; [`BOUNDS`] joins them in the order of `config/default.toml`.

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

/// One row of [`BOUNDS`]: `bound!("section.key", min, max, Unit, |s| s.section.key, conv)`,
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

/// The rows of each section that has numbers, in the order of `config/default.toml`.
const SECTIONS: &[&[Bound]] = &[
    super::database::BOUNDS,
    super::lease::BOUNDS,
    super::sweeper::BOUNDS,
    super::retention::BOUNDS,
    super::retry::BOUNDS,
    super::trigger::BOUNDS,
    super::fairness::BOUNDS,
    super::builders::BOUNDS,
    super::builder::BOUNDS,
    super::relay::BOUNDS,
    super::reconcile::BOUNDS,
    super::node::BOUNDS,
    super::http::BOUNDS,
    super::shutdown::BOUNDS,
    super::otel::BOUNDS,
];

/// The bounds of every numeric setting, in the order of `config/default.toml`. `otel.*` is
/// checked only while the exporter is on (its keys are not used otherwise).
pub const BOUNDS: &[Bound] = &joined::<{ rows(SECTIONS) }>(SECTIONS);

/// How many rows `sections` hold together.
const fn rows(sections: &[&[Bound]]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < sections.len() {
        n += sections[i].len();
        i += 1;
    }
    n
}

/// The rows of `sections` one after another, at compile time.
const fn joined<const N: usize>(sections: &[&[Bound]]) -> [Bound; N] {
    const UNSET: Bound = Bound {
        key: "",
        min: 0.0,
        max: 0.0,
        unit: Unit::Count,
        get: |_| None,
        set: |_, _| {},
    };
    let mut out = [UNSET; N];
    let (mut n, mut i) = (0, 0);
    while i < sections.len() {
        let mut j = 0;
        while j < sections[i].len() {
            out[n] = sections[i][j];
            n += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::keys::known_keys;
    use crate::secret::SecretUrl;

    /// Every key of `config/default.toml` whose value (set or in a comment) is a number has
    /// its row in [`BOUNDS`], so a new duration or count cannot skip the check; every row
    /// names a real key, holds its default, and has its range in the table of
    /// docs/configuration.md.
    #[test]
    fn every_numeric_key_has_a_bound_documented_in_the_configuration_guide() {
        let known = known_keys();
        let mut section = "";
        let mut numeric = Vec::new();
        for line in crate::config::DEFAULT_TOML.lines() {
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
        let guide = include_str!("../../docs/configuration.md");
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
}
