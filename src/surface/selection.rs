//! What an operator's request names, for the console's pages and forms and the JSON API alike:
//! a filter of matters or of dead letters, or a list of ids, turned into the ledger's queries.
//! Every bad value is refused here, naming it (a state that is none, a firm nobody has, an id
//! that is not a UUID), so a page, a form and a script all get the same words.

use diesel_async::AsyncPgConnection;
use serde::Deserialize;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::ledger::dead_letters::DeadFilter;
use crate::ledger::fairness;
use crate::ledger::matters::{MatterQuery, MatterState};

/// The matters page's filter (`?q=&state=&firm=`), and a bulk retry's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatterFilter {
    /// A case-insensitive substring of the title.
    pub q: Option<String>,
    /// One of [`MatterState::ALL`], by its name.
    pub state: Option<String>,
    /// A firm's id, or the name operators gave it.
    pub firm: Option<String>,
}

impl MatterFilter {
    /// The state it names, if any.
    pub fn state(&self) -> Result<Option<MatterState>> {
        match self
            .state
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            None => Ok(None),
            Some(s) => s.parse().map(Some),
        }
    }

    /// The ledger's query (no page yet: limit and offset 0); resolves a firm's name.
    pub async fn query(&self, conn: &mut AsyncPgConnection) -> Result<MatterQuery> {
        let state = self.state()?;
        let firm_id = match self
            .firm
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            None => None,
            Some(f) => Some(fairness::resolve(conn, f).await?),
        };
        Ok(MatterQuery {
            firm_id,
            text: Some(self.q.clone().unwrap_or_default()),
            state,
            limit: 0,
            offset: 0,
        })
    }
}

/// The dead letters page's filter (`?reason=&routing_key=&all=1`), and a bulk discard's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterFilter {
    pub reason: Option<String>,
    pub routing_key: Option<String>,
    /// `1` (or `true`): resolved ones too, on a listing.
    pub all: Option<String>,
}

impl DeadLetterFilter {
    pub fn ledger(&self) -> Result<DeadFilter> {
        let resolved_too = match self.all.as_deref().map(str::trim) {
            None | Some("") | Some("0") | Some("false") => false,
            Some("1") | Some("true") => true,
            Some(other) => {
                return Err(Error::InvalidInput(format!(
                    "all {other:?} is not one of: 1, 0, true, false"
                )));
            }
        };
        let blank = |t: &Option<String>| t.clone().filter(|t| !t.trim().is_empty());
        let f = DeadFilter {
            reason: blank(&self.reason),
            routing_key: blank(&self.routing_key),
            resolved_too,
        };
        f.checked()?;
        Ok(f)
    }
}

/// A UUID an operator gave, or an error naming where and what it was.
pub fn uuid(what: &str, s: &str) -> Result<Uuid> {
    Uuid::parse_str(s.trim()).map_err(|_| {
        Error::InvalidInput(format!(
            "{what} {:?} is not a UUID",
            crate::text::clip(s, 80)
        ))
    })
}

/// A matter named `firm:matter` (a console checkbox's value).
pub fn matter_key(what: &str, s: &str) -> Result<(Uuid, Uuid)> {
    let (firm, matter) = s.split_once(':').ok_or_else(|| {
        Error::InvalidInput(format!(
            "{what} {:?} is not FIRM:MATTER",
            crate::text::clip(s, 80)
        ))
    })?;
    Ok((
        uuid(&format!("{what}'s firm"), firm)?,
        uuid(&format!("{what}'s matter"), matter)?,
    ))
}

/// A whole number an operator gave as `name` (`?page=`, `?per_page=`), or an error naming it.
pub fn number(name: &str, given: Option<&str>) -> Result<Option<i64>> {
    match given.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| {
            Error::InvalidInput(format!(
                "{name} {:?} is not a whole number",
                crate::text::clip(s, 40)
            ))
        }),
    }
}

/// Which page of `size` rows `?page=` asks for (1 when absent), and its offset. Clamped: a huge
/// page number must not overflow the offset.
pub fn page_of(page: Option<&str>, size: i64) -> Result<(i64, i64)> {
    let page = number("page", page)?.unwrap_or(1).clamp(1, 1_000_000);
    Ok((page, (page - 1) * size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_ids_and_filter_values_are_named() {
        let e = matter_key("matter 2", "nope").unwrap_err().to_string();
        assert!(e.contains("matter 2 \"nope\" is not FIRM:MATTER"), "{e}");
        let e = matter_key("m", &format!("{}:x", Uuid::nil()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("m's matter \"x\" is not a UUID"), "{e}");
        let f = MatterFilter {
            state: Some("stuck".into()),
            ..Default::default()
        };
        assert!(
            f.state()
                .unwrap_err()
                .to_string()
                .contains("retries_exhausted")
        );
        let d = DeadLetterFilter {
            all: Some("yes".into()),
            ..Default::default()
        };
        assert!(d.ledger().is_err());
        assert_eq!(page_of(Some("-3"), 50).unwrap(), (1, 0));
        assert_eq!(page_of(Some("3"), 50).unwrap(), (3, 100));
        let e = page_of(Some("abc"), 50).unwrap_err().to_string();
        assert!(e.contains("page \"abc\" is not a whole number"), "{e}");
    }
}
