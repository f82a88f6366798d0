//! A frame's body as a person reads it. The `brief` builder's frames (`kind = "brief"`) become a
//! chronology and a list of documents; any other builder's body is shown as indented JSON.

use serde_json::Value;

/// One entry of the chronology.
pub struct Entry {
    pub dated: String,
    pub title: String,
    pub asserts: String,
    pub document_id: String,
}

/// What the matter page shows of the latest frame.
pub enum BriefView {
    Brief {
        title: String,
        parties: Vec<String>,
        documents: i64,
        dated: i64,
        undated: i64,
        words: i64,
        span: String,
        chronology: Vec<Entry>,
    },
    /// Another builder's frame: its JSON.
    Other { json: String },
}

fn text(v: &Value, path: &[&str]) -> String {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn number(v: &Value, path: &[&str]) -> i64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_i64().unwrap_or(0)
}

impl BriefView {
    pub fn of(body: &Value) -> Self {
        if body["kind"] != "brief" {
            return BriefView::Other {
                json: serde_json::to_string_pretty(body).unwrap_or_default(),
            };
        }
        let chronology = body["chronology"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| Entry {
                        dated: match text(e, &["dated"]) {
                            d if d.is_empty() => "undated".to_owned(),
                            d => d,
                        },
                        title: text(e, &["title"]),
                        asserts: text(e, &["asserts"]),
                        document_id: text(e, &["where", "document_id"]),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let (from, to) = (text(body, &["span", "from"]), text(body, &["span", "to"]));
        BriefView::Brief {
            title: text(body, &["matter", "title"]),
            parties: body["parties"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            documents: number(body, &["counts", "documents"]),
            dated: number(body, &["counts", "dated"]),
            undated: number(body, &["counts", "undated"]),
            words: number(body, &["counts", "words"]),
            span: if from.is_empty() {
                "no dated documents".to_owned()
            } else if from == to {
                from
            } else {
                format!("{from} to {to}")
            },
            chronology,
        }
    }

    /// The Brief as plain text (`briefrail brief show`).
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        match self {
            BriefView::Other { json } => out.push_str(json),
            BriefView::Brief {
                title,
                parties,
                documents,
                dated,
                undated,
                words,
                span,
                chronology,
            } => {
                let _ = writeln!(out, "{title}");
                if !parties.is_empty() {
                    let _ = writeln!(out, "parties: {}", parties.join("; "));
                }
                let _ = writeln!(
                    out,
                    "{documents} document(s) ({dated} dated, {undated} undated), {words} words; {span}"
                );
                let _ = writeln!(out, "\nchronology:");
                for e in chronology {
                    let _ = writeln!(out, "  {:<10}  {}  [{}]", e.dated, e.title, e.document_id);
                    if !e.asserts.is_empty() {
                        let _ = writeln!(out, "              {}", e.asserts);
                    }
                }
            }
        }
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out
    }
}
