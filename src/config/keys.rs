//! The sections and keys [`Settings`](super::Settings) has, and the refusal of any other: a
//! misspelt key in a file or a variable would otherwise be ignored and its default run instead.

use super::ConfigError;
use super::{
    BuilderSettings, BuildersSettings, DatabaseSettings, FairnessSettings, HttpSettings,
    LeaseSettings, LogSettings, NodeSettings, OtelSettings, ReconcileSettings, RelaySettings,
    RetentionSettings, RetrySettings, ShutdownSettings, SweeperSettings, TransportSettings,
    TriggerSettings,
};

/// Every section of [`Settings`](super::Settings) and the keys it has, read from the structs'
/// own `Deserialize` implementations, so a field added to a struct is known here at once.
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
pub(super) fn refuse_unknown_keys(
    table: &config::Map<String, config::Value>,
    file: &str,
) -> Result<(), ConfigError> {
    let known = known_keys();
    for (section, value) in table {
        if let Some(problem) = unknown(&known, section, None, file) {
            return Err(ConfigError::new(section, problem));
        }
        // A section that is not a table is the deserializer's to refuse, with its type.
        let Ok(entries) = value.clone().into_table() else {
            continue;
        };
        for key in entries.keys() {
            if let Some(problem) = unknown(&known, section, Some(key), file) {
                return Err(ConfigError::new(&format!("{section}.{key}"), problem));
            }
        }
    }
    Ok(())
}

/// Refuses a `BRIEFRAIL__SECTION__KEY` variable that names no setting, naming the variable.
pub(super) fn refuse_unknown_variable(var: &str) -> Result<(), ConfigError> {
    let known = known_keys();
    let key = var["BRIEFRAIL__".len()..].to_lowercase().replace("__", ".");
    let problem = match key.split_once('.') {
        None => Some(format!(
            "environment variable {var} names no key (BRIEFRAIL__SECTION__KEY; the sections are: {})",
            sections(&known)
        )),
        Some((section, name)) => unknown(
            &known,
            section,
            Some(name),
            &format!("environment variable {var}"),
        ),
    };
    match problem {
        Some(problem) => Err(ConfigError::new(&key, problem)),
        None => Ok(()),
    }
}

/// Why `section` (and `key`, when given) names no setting, or `None` when it names one;
/// `source` says where it was written (a file, an environment variable).
fn unknown(
    known: &[(&str, &[&str])],
    section: &str,
    key: Option<&str>,
    source: &str,
) -> Option<String> {
    let Some((_, keys)) = known.iter().find(|(name, _)| *name == section) else {
        return Some(format!(
            "unknown section in {source}; the sections are: {}",
            sections(known)
        ));
    };
    key.filter(|key| !keys.contains(key)).map(|_| {
        format!(
            "unknown key in {source}; [{section}] has: {}",
            keys.join(", ")
        )
    })
}

/// The names of the sections, as a refusal lists them.
fn sections(known: &[(&str, &[&str])]) -> String {
    let names: Vec<&str> = known.iter().map(|(name, _)| *name).collect();
    names.join(", ")
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{DEFAULT_TOML, Settings, env};

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
}
