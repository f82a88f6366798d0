//! Event names are history, not wishes: a lowercase `noun.verb` fact such as `matter.created`.
//! The same rule is a CHECK on `ops.domain_event_outbox.event_name`; checking here first turns
//! a refused name into an error that names the rule instead of a constraint violation.

use std::fmt;

use crate::error::Error;

/// The rule, as stated in errors and docs.
pub const RULE: &str = "must be a lowercase noun.verb fact: letters a-z, one dot, at most 255 \
                        bytes, e.g. matter.created";

/// The longest name: an event's name is its message's routing key on the bus, an AMQP short
/// string. A longer one could never be published.
pub const MAX_LEN: usize = 255;

/// A validated event name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventName(String);

impl EventName {
    /// A matter was created.
    pub const MATTER_CREATED: &'static str = "matter.created";
    /// A document was added to a matter.
    pub const DOCUMENT_UPLOADED: &'static str = "document.uploaded";
    /// Someone asked for a fresh Brief.
    pub const BRIEF_REQUESTED: &'static str = "brief.requested";
    /// A matter was archived: it is no longer built.
    pub const MATTER_ARCHIVED: &'static str = "matter.archived";

    /// Checks that `name` is a lowercase `noun.verb` fact.
    pub fn parse(name: &str) -> Result<Self, Error> {
        let invalid = || Error::InvalidEventName {
            name: name.to_owned(),
            rule: RULE,
        };
        let (noun, verb) = name.split_once('.').ok_or_else(invalid)?;
        let word = |w: &str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase());
        if name.len() <= MAX_LEN && word(noun) && word(verb) {
            Ok(Self(name.to_owned()))
        } else {
            Err(invalid())
        }
    }

    /// The name as recorded.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lowercase_noun_verb() {
        let too_long = format!("matter.{}", "a".repeat(MAX_LEN - 6));
        for bad in [
            "Matter.Created",
            "matter_created",
            "matter.created.now",
            "matter.",
            ".created",
            "",
            "matter.créé",
            "matter. created",
            too_long.as_str(),
        ] {
            let e = EventName::parse(bad).expect_err(bad);
            assert!(e.to_string().contains("noun.verb"), "{e}");
        }
        for good in [
            "matter.created",
            "document.uploaded",
            "brief.requested",
            "matter.archived",
        ] {
            assert_eq!(EventName::parse(good).expect(good).as_str(), good);
        }
        let longest = format!("matter.{}", "a".repeat(MAX_LEN - 7));
        assert_eq!(EventName::parse(&longest).expect("255 bytes").as_str(), longest);
    }
}
