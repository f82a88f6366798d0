//! `src/schema.rs` must describe exactly what the migrations create. This test renders the
//! schema of a freshly migrated database in diesel's `print-schema` layout and compares it with
//! the file (ignoring whitespace). `BRIEFRAIL_BLESS_SCHEMA=1 cargo test --test schema_drift`
//! rewrites the file after a migration changes.

use std::collections::BTreeMap;

use briefrail::testing::TestDb;
use diesel::sql_types::{Bool, Integer, Text};
use diesel_async::RunQueryDsl;

#[derive(diesel::QueryableByName)]
struct Col {
    #[diesel(sql_type = Text)]
    schema: String,
    #[diesel(sql_type = Text)]
    table: String,
    #[diesel(sql_type = Text)]
    column: String,
    #[diesel(sql_type = Text)]
    udt: String,
    #[diesel(sql_type = Bool)]
    nullable: bool,
    #[diesel(sql_type = Integer)]
    pk_pos: i32,
}

fn diesel_type(udt: &str) -> String {
    match udt {
        "uuid" => "Uuid".into(),
        "text" => "Text".into(),
        "timestamptz" => "Timestamptz".into(),
        "int8" => "Int8".into(),
        "int4" => "Int4".into(),
        "bool" => "Bool".into(),
        "jsonb" => "Jsonb".into(),
        "date" => "Date".into(),
        "float8" => "Float8".into(),
        a if a.starts_with('_') => format!("Array<Nullable<{}>>", diesel_type(&a[1..])),
        other => panic!("no diesel type for {other}: extend the drift test"),
    }
}

fn render(cols: &[Col]) -> String {
    let mut schemas: BTreeMap<&str, BTreeMap<&str, Vec<&Col>>> = BTreeMap::new();
    for c in cols {
        schemas
            .entry(&c.schema)
            .or_default()
            .entry(&c.table)
            .or_default()
            .push(c);
    }
    let mut out = String::from(
        "// @generated from the migrated database by tests/schema_drift.rs (BRIEFRAIL_BLESS_SCHEMA=1).\n\
         // Do not edit by hand: that test fails when this file drifts from migrations/.\n",
    );
    for (schema, tables) in &schemas {
        out.push_str(&format!("\npub mod {schema} {{\n"));
        for (table, cols) in tables {
            let mut pk: Vec<&&Col> = cols.iter().filter(|c| c.pk_pos > 0).collect();
            pk.sort_by_key(|c| c.pk_pos);
            let pk: Vec<&str> = pk.iter().map(|c| c.column.as_str()).collect();
            out.push_str(&format!(
                "    diesel::table! {{\n        {schema}.{table} ({}) {{\n",
                pk.join(", ")
            ));
            for c in cols {
                let ty = diesel_type(&c.udt);
                let ty = if c.nullable {
                    format!("Nullable<{ty}>")
                } else {
                    ty
                };
                out.push_str(&format!("            {} -> {ty},\n", c.column));
            }
            out.push_str("        }\n    }\n\n");
        }
        let names: Vec<&str> = tables.keys().copied().collect();
        out.push_str(&format!(
            "    diesel::allow_tables_to_appear_in_same_query!({},);\n}}\n",
            names.join(", ")
        ));
    }
    out
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

#[tokio::test]
async fn schema_rs_matches_the_migrations() {
    let db = TestDb::new(1).await.expect("test db");
    let mut conn = db.pool.get().await.unwrap();
    let cols: Vec<Col> = diesel::sql_query(
        "SELECT c.table_schema::text AS schema, c.table_name::text AS table, c.column_name::text AS column,
                c.udt_name::text AS udt, (c.is_nullable = 'YES') AS nullable,
                coalesce((SELECT k.ord::int
                            FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
                            CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                            JOIN pg_namespace n ON n.oid = t.relnamespace
                            JOIN pg_attribute a ON a.attrelid = t.oid AND a.attname = c.column_name
                           WHERE i.indisprimary AND k.attnum = a.attnum AND n.nspname = c.table_schema AND t.relname = c.table_name), 0)
                  AS pk_pos
           FROM information_schema.columns c
          WHERE c.table_schema IN ('ops', 'record')
          ORDER BY c.table_schema, c.table_name, c.ordinal_position",
    )
    .load(&mut conn)
    .await
    .expect("introspect");
    let expected = render(&cols);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/schema.rs");
    if std::env::var_os("BRIEFRAIL_BLESS_SCHEMA").is_some() {
        std::fs::write(path, &expected).expect("write schema.rs");
        return;
    }
    let actual = std::fs::read_to_string(path).expect("read schema.rs");
    assert_eq!(
        squash(&actual),
        squash(&expected),
        "src/schema.rs drifted from migrations/. Regenerate: BRIEFRAIL_BLESS_SCHEMA=1 cargo test --test schema_drift\n\
         expected:\n{expected}"
    );
}
