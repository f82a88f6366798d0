//! `[transport]`: how demands reach a node (a broker, or the ledger itself).

use serde::Deserialize;

use super::{ConfigError, url_with_scheme};
use crate::secret::SecretUrl;

/// How events reach the nodes (`transport.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum TransportKind {
    /// RabbitMQ: a relay publishes the outbox, nodes consume the trigger queue.
    Amqp,
    /// Postgres LISTEN/NOTIFY: no broker to run.
    Postgres,
}

config_names!(TransportKind { Amqp => "amqp", Postgres => "postgres" });

/// `[transport]`: how events reach the nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransportSettings {
    /// RabbitMQ or Postgres.
    pub kind: TransportKind,
    /// The broker, for `amqp`; its password never reaches a log line.
    pub amqp_url: SecretUrl,
    /// Prefix of every exchange and queue name, so installations and tests do not collide.
    pub prefix: String,
}

/// The longest `transport.prefix`: the longest name it begins, `<prefix>.brief-rail.trigger`,
/// must stay an AMQP short string (at most 255 bytes).
pub const MAX_PREFIX_LEN: usize = 200;

impl TransportSettings {
    /// `amqp_url` is one `amqp(s)://` URL, or several separated by commas (the members of a
    /// cluster); `prefix` is a safe queue-name prefix.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let listed = self.amqp_url.members();
        for (i, member) in listed.iter().enumerate() {
            let which = if listed.len() > 1 {
                format!("member {} of the list: ", i + 1)
            } else {
                String::new()
            };
            url_with_scheme(
                "transport.amqp_url",
                member.expose(),
                &["amqp", "amqps"],
                &which,
            )?;
        }
        if self.prefix.len() > MAX_PREFIX_LEN {
            return Err(ConfigError::new(
                "transport.prefix",
                format!(
                    "is {} bytes, longer than {MAX_PREFIX_LEN}: it begins every exchange and \
                     queue name, an AMQP short string of at most 255 bytes",
                    self.prefix.len()
                ),
            ));
        }
        if self.prefix.is_empty()
            || !self
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
}

#[cfg(test)]
mod tests {
    use crate::config::{Settings, env};

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
}
