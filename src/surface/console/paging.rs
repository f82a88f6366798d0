//! A list page's place in its rows: "51–100 of 230" and the links either side. The total is a
//! count the ledger makes for the same filter, so an operator sees how much a filter matches
//! (and what "retry all matching" or "discard all matching" would touch) before acting.

/// What a list page shows of where it is.
pub struct Paging {
    /// `first–last of total`, or `0 of 0`.
    pub range: String,
    /// The previous and next pages' links ("" at either end).
    pub prev: String,
    pub next: String,
}

impl Paging {
    /// Page `page` (from 1) of `size` rows, showing `shown` of `total`; `link(p)` is page p's
    /// address.
    pub fn new(
        page: i64,
        size: i64,
        shown: usize,
        total: i64,
        link: impl Fn(i64) -> String,
    ) -> Self {
        let first = (page - 1) * size + 1;
        let last = first - 1 + shown as i64;
        Paging {
            range: if shown == 0 {
                format!("0 of {total}")
            } else {
                format!("{first}–{last} of {total}")
            },
            prev: if page > 1 {
                link(page - 1)
            } else {
                String::new()
            },
            next: if last < total && shown > 0 {
                link(page + 1)
            } else {
                String::new()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_counts_from_one_and_links_only_where_rows_are() {
        let p = Paging::new(2, 50, 5, 55, |p| format!("?page={p}"));
        assert_eq!(
            (p.range.as_str(), p.prev.as_str(), p.next.as_str()),
            ("51–55 of 55", "?page=1", "")
        );
        let p = Paging::new(1, 50, 50, 55, |p| format!("?page={p}"));
        assert_eq!(
            (p.range.as_str(), p.next.as_str()),
            ("1–50 of 55", "?page=2")
        );
        assert_eq!(Paging::new(1, 50, 0, 0, |_| String::new()).range, "0 of 0");
    }
}
