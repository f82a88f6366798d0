//! Fixed SQL text that a session prepares once and then only executes.
//!
//! diesel prepares the text of a `sql_query` (and of any statement with a raw SQL fragment, or an
//! `UPDATE`) again on every call: it cannot know the text is the same each time, so it parses,
//! plans and names a statement, executes it and closes it. That is one more round trip per call
//! and a parse on the server, paid on the hottest statements of both transports (the drain, the
//! trigger's batch, the relay's lease and mark) on the way of every fact to its build
//! (docs/protocol.md, "Speed: statements").
//!
//! A [`Prepared`] holds a `&'static str`: its text is fixed at compile time, so the statement
//! cache may key it by that text and keep it for the session's life. Parameters are bound as
//! with `sql_query`, and rows load into the same `QueryableByName` structs. Only constant text
//! can be built: a statement assembled at run time (a `format!`) has no `&'static` text, and
//! each of its variants would stay in the cache for the session's life.
//!
//! **For the calls of the ledger's functions** (`SELECT … FROM ops.f($1, …)`, built only by
//! [`crate::ledger`]'s `sql` module), **and for a statement with one plan whatever the
//! statistics** (a delete by primary key, a read of a one-row table): a kept statement may run on
//! a generic plan from its sixth call, made with the statistics of that moment and kept for the
//! session. A function call's plan is the call whatever the statistics say, and the function
//! keeps its own plans (docs/protocol.md, "Speed: plans by key"). A statement that reads a table
//! itself stays a `sql_query`, planned for each call with its values, or becomes a function of
//! the ledger (the relay's mark is `ops.mark_published`): kept as SQL, it could run for the rest
//! of the session on a generic plan made while the table was small, a sequential scan of every
//! row. A call of a function Postgres inlines is such a statement: it is built with
//! [`Prepared::planned_each_call`].

use diesel::QueryResult;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::serialize::ToSql;
use diesel::sql_types::{HasSqlType, Untyped};

/// A statement whose text never changes, with its parameters: prepared once per session (see
/// the module).
#[must_use = "a statement runs only when it is loaded or executed"]
pub struct Prepared<'a> {
    sql: &'static str,
    params: Vec<Box<dyn Param + Send + 'a>>,
    /// Whether the session keeps the statement (see [`Prepared::planned_each_call`]).
    kept: bool,
}

/// The statement `sql`, prepared on a session's first call and only executed after that. Its
/// parameters are `$1`, `$2`, … as in `sql_query`; a `$` is only ever a parameter's mark (the
/// ledger's statements quote no text that holds one).
pub fn prepared<'a>(sql: &'static str) -> Prepared<'a> {
    Prepared {
        sql,
        params: Vec::new(),
        kept: true,
    }
}

impl<'a> Prepared<'a> {
    /// Binds the next parameter (`$1`, then `$2`, …) as SQL type `ST`, as `sql_query(..).bind`.
    pub fn bind<ST, V>(mut self, value: V) -> Self
    where
        ST: Send + 'a,
        V: ToSql<ST, Pg> + Send + 'a,
        Pg: HasSqlType<ST>,
    {
        self.params.push(Box::new(Typed {
            value,
            sql_type: std::marker::PhantomData::<fn() -> ST>,
        }));
        self
    }
}

impl Prepared<'_> {
    /// Plans the statement with its values on every call, as `sql_query` does, instead of
    /// keeping it: for the call of a function Postgres inlines into the statement (`LANGUAGE
    /// sql`, `STABLE`, no `SET`), whose statement is then the function's own query of the
    /// tables, which a kept statement could run on a generic plan for the session's life.
    pub fn planned_each_call(mut self) -> Self {
        self.kept = false;
        self
    }
}

/// A parameter's value with its SQL type.
trait Param {
    fn push<'b>(&'b self, out: AstPass<'_, 'b, Pg>) -> QueryResult<()>;
}

struct Typed<ST, V> {
    value: V,
    sql_type: std::marker::PhantomData<fn() -> ST>,
}

impl<ST, V: ToSql<ST, Pg>> Param for Typed<ST, V>
where
    Pg: HasSqlType<ST>,
{
    fn push<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_bind_param::<ST, V>(&self.value)
    }
}

impl QueryFragment<Pg> for Prepared<'_> {
    /// The text, each `$n` replaced by parameter n's place: diesel numbers places in the order
    /// it meets them, so a text that names `$2` before `$1`, or one parameter twice, still
    /// gets each value where it asked for it. The resulting text is the same on every call:
    /// the statement cache keys it by that text (and the parameters' types). Unlike
    /// `sql_query`, nothing here marks the statement unsafe to cache.
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let refuse = |why: String| {
            diesel::result::Error::QueryBuilderError(format!("{why}: {}", self.sql).into())
        };
        if !self.kept {
            out.unsafe_to_cache_prepared();
        }
        let mut used = vec![false; self.params.len()];
        let mut rest = self.sql;
        while let Some(at) = rest.find('$') {
            out.push_sql(&rest[..at]);
            let digits = rest[at + 1..]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len() - at - 1);
            let n: usize = rest[at + 1..at + 1 + digits]
                .parse()
                .map_err(|_| refuse("a `$` in a prepared statement is not a parameter".into()))?;
            let i = n
                .checked_sub(1)
                .filter(|i| *i < self.params.len())
                .ok_or_else(|| {
                    refuse(format!(
                        "a prepared statement names ${n}, and {} parameter(s) are bound",
                        self.params.len()
                    ))
                })?;
            used[i] = true;
            self.params[i].push(out.reborrow())?;
            rest = &rest[at + 1 + digits..];
        }
        out.push_sql(rest);
        // As the server refuses a value with no place for it in a `sql_query`.
        if let Some(unused) = used.iter().position(|u| !u) {
            return Err(refuse(format!(
                "parameter ${} is bound and the statement never names it",
                unused + 1
            )));
        }
        Ok(())
    }
}

impl QueryId for Prepared<'_> {
    type QueryId = ();
    /// No type identifies the statement: its text does.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for Prepared<'_> {
    type SqlType = Untyped;
}

#[cfg(test)]
mod tests {
    use diesel::pg::PgQueryBuilder;
    use diesel::query_builder::QueryBuilder;
    use diesel::sql_types::{BigInt, Text};

    use super::*;

    fn text(q: &Prepared<'_>) -> QueryResult<String> {
        let mut out = PgQueryBuilder::default();
        q.to_sql(&mut out, &Pg)?;
        Ok(out.finish())
    }

    /// Whether `q` is refused with a message that holds `why`.
    fn refused(q: &Prepared<'_>, why: &str) -> bool {
        text(q).is_err_and(|e| e.to_string().contains(why))
    }

    #[test]
    fn each_parameter_goes_where_the_text_names_it() -> QueryResult<()> {
        let q = prepared("SELECT $2 + 1 FROM t LIMIT $1 OFFSET $2")
            .bind::<BigInt, _>(10_i64)
            .bind::<Text, _>("x");
        // diesel numbers places as it meets them: $2 (the text "x") first, then $1, then $2.
        assert_eq!(text(&q)?, "SELECT $1 + 1 FROM t LIMIT $2 OFFSET $3");
        assert!(q.is_safe_to_cache_prepared(&Pg)?, "kept by the session");
        Ok(())
    }

    #[test]
    fn a_text_and_its_parameters_that_disagree_are_refused() {
        let unnamed = prepared("SELECT $1")
            .bind::<BigInt, _>(1_i64)
            .bind::<BigInt, _>(2_i64);
        assert!(refused(&unnamed, "$2 is bound"));
        let missing = prepared("SELECT $1, $2").bind::<BigInt, _>(1_i64);
        assert!(refused(&missing, "names $2"));
        let stray = prepared("SELECT '$'").bind::<BigInt, _>(1_i64);
        assert!(refused(&stray, "not a parameter"));
        assert!(refused(&prepared("SELECT $0"), "names $0"));
    }

    #[test]
    fn a_statement_planned_on_each_call_is_not_kept() -> QueryResult<()> {
        let q = prepared("SELECT * FROM f($1)")
            .bind::<BigInt, _>(1_i64)
            .planned_each_call();
        assert!(!q.is_safe_to_cache_prepared(&Pg)?, "planned on each call");
        Ok(())
    }
}
