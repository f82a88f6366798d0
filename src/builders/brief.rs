//! The `brief` builder: a real Brief from the record. The documents in the chronology of the
//! dates they bear, each with what it asserts (its opening sentences) and where (document id and
//! title), the parties named in the matter, and counts. Deterministic: no clock, no token, no
//! randomness in the body, so the same record always gives the same frame.

use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use serde_json::json;

use super::{BuildContext, Builder};
use crate::error::{Error, Result};
use crate::ledger::Frame;
use crate::ledger::models::{DocumentRow, MatterRow};

/// How much of a document's opening the Brief quotes.
const ASSERTS_SENTENCES: usize = 2;
const ASSERTS_MAX_CHARS: usize = 400;

/// The built-in builder (`builder.kind = "brief"`): a matter's Brief from its record, in
/// process, with nothing to install.
#[derive(Debug, Default, Clone, Copy)]
pub struct BriefBuilder;

impl Builder for BriefBuilder {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, Result<Frame>> {
        async move {
            let (matter, documents) = ctx.record().await?;
            let matter = matter.ok_or_else(|| Error::Build {
                message: format!(
                    "matter {} of firm {} is not in the record",
                    ctx.matter_id, ctx.firm_id
                ),
                permanent: true,
            })?;
            Ok(Frame::new(render(&matter, &documents)))
        }
        .boxed_local()
    }

    /// A Brief is built from the record.
    fn reads_record(&self) -> bool {
        true
    }
}

/// The Brief of a matter, given its documents in chronological order.
pub fn render(matter: &MatterRow, documents: &[DocumentRow]) -> serde_json::Value {
    let chronology: Vec<_> = documents
        .iter()
        .map(|d| {
            json!({
                "dated": d.dated.map(|x| x.to_string()),
                "title": d.title,
                "asserts": opening(&d.body),
                "where": { "document_id": d.document_id, "title": d.title },
            })
        })
        .collect();
    let dated = documents.iter().filter(|d| d.dated.is_some()).count();
    let words: usize = documents
        .iter()
        .map(|d| d.body.split_whitespace().count())
        .sum();
    json!({
        "kind": "brief",
        "matter": { "firm_id": matter.firm_id, "matter_id": matter.matter_id, "title": matter.title },
        "parties": parties(&matter.title),
        "counts": {
            "documents": documents.len(),
            "dated": dated,
            "undated": documents.len() - dated,
            "words": words,
        },
        "span": {
            "from": documents.iter().filter_map(|d| d.dated).min().map(|x| x.to_string()),
            "to": documents.iter().filter_map(|d| d.dated).max().map(|x| x.to_string()),
        },
        "chronology": chronology,
    })
}

/// The parties a caption names: "Acme Corp. v. Globex LLC" → ["Acme Corp.", "Globex LLC"];
/// "In re Initech" → ["Initech"].
pub fn parties(title: &str) -> Vec<String> {
    let t = title.trim();
    if let Some(rest) = t
        .strip_prefix("In re ")
        .or_else(|| t.strip_prefix("in re "))
    {
        return vec![rest.trim().to_owned()];
    }
    for sep in [" v. ", " vs. ", " vs ", " v "] {
        if let Some((a, b)) = t.split_once(sep) {
            return [a, b]
                .iter()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
        }
    }
    Vec::new()
}

/// The first sentences of a text, whitespace normalised, bounded.
pub fn opening(body: &str) -> String {
    let text = body.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut end = text.len();
    let mut seen = 0;
    for (i, c) in text.char_indices() {
        if matches!(c, '.' | '?' | '!') && text[i + 1..].starts_with(' ') {
            seen += 1;
            if seen == ASSERTS_SENTENCES {
                end = i + 1;
                break;
            }
        }
    }
    let mut out = text[..end].to_owned();
    if out.chars().count() > ASSERTS_MAX_CHARS {
        out = out.chars().take(ASSERTS_MAX_CHARS).collect::<String>() + "…";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captions_name_parties() {
        assert_eq!(
            parties("Acme Corp. v. Globex LLC"),
            ["Acme Corp.", "Globex LLC"]
        );
        assert_eq!(parties("In re Initech"), ["Initech"]);
        assert!(parties("Estate planning").is_empty());
    }

    #[test]
    fn opening_takes_two_sentences() {
        assert_eq!(opening("One.  Two?\nThree! Four."), "One. Two?");
        assert_eq!(
            opening("No terminal punctuation"),
            "No terminal punctuation"
        );
        assert_eq!(
            opening(&"x".repeat(1000)).chars().count(),
            ASSERTS_MAX_CHARS + 1
        );
    }
}
