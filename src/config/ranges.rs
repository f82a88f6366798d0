//! Every numeric setting's range, in one table: each section's rows joined in the order of
//! `config/default.toml`. It lives apart from `bounds.rs`, which the sections import, so that
//! the sections never import what imports them.

#[cfg(test)]
use super::Settings;
use super::bounds::{Bound, Unit};

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
    use crate::config::Value;
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
