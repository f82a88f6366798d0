//! Creating databases: `briefrail migrate` and the demo create theirs if missing, and tests
//! clone a migrated template so each test has a database of its own.

use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

use crate::error::{Error, Result};

/// The database name in a postgres URL, and the same URL pointed at the `postgres` database.
pub fn split_url(url: &str) -> Result<(String, String)> {
    let mut parsed =
        url::Url::parse(url).map_err(|e| Error::InvalidInput(format!("database.url: {e}")))?;
    let name = parsed.path().trim_start_matches('/').to_owned();
    if name.is_empty() {
        return Err(Error::InvalidInput("database.url names no database".into()));
    }
    parsed.set_path("/postgres");
    Ok((name, parsed.to_string()))
}

/// The same server, another database.
pub fn with_database(url: &str, name: &str) -> Result<String> {
    let mut parsed =
        url::Url::parse(url).map_err(|e| Error::InvalidInput(format!("database.url: {e}")))?;
    parsed.set_path(&format!("/{name}"));
    Ok(parsed.to_string())
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

async fn admin_conn(admin_url: &str) -> Result<AsyncPgConnection> {
    AsyncPgConnection::establish(admin_url)
        .await
        .map_err(Error::connection)
}

#[derive(diesel::QueryableByName)]
struct Exists {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    exists: bool,
}

async fn exists(conn: &mut AsyncPgConnection, name: &str) -> Result<bool> {
    let found: Exists =
        diesel::sql_query("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1) AS exists")
            .bind::<diesel::sql_types::Text, _>(name)
            .get_result(conn)
            .await?;
    Ok(found.exists)
}

/// Whether the database named by `url` exists on its server.
pub async fn database_exists(url: &str) -> Result<bool> {
    let (name, admin_url) = split_url(url)?;
    exists(&mut admin_conn(&admin_url).await?, &name).await
}

/// Creates the database named by `url` unless it exists. Returns whether it created it.
/// Safe to race: a concurrent creator's "already exists" counts as success.
pub async fn create_database_if_missing(url: &str) -> Result<bool> {
    let (name, admin_url) = split_url(url)?;
    let mut conn = admin_conn(&admin_url).await?;
    if exists(&mut conn, &name).await? {
        return Ok(false);
    }
    match conn
        .batch_execute(&format!("CREATE DATABASE {}", quote_ident(&name)))
        .await
    {
        Ok(()) => Ok(true),
        Err(diesel::result::Error::DatabaseError(_, info))
            if info.message().contains("already exists") =>
        {
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Creates database `name` as a copy of `template` on the server of `url`.
#[cfg(feature = "testing")]
pub async fn create_from_template(url: &str, name: &str, template: &str) -> Result<()> {
    let (_, admin_url) = split_url(url)?;
    let mut conn = admin_conn(&admin_url).await?;
    conn.batch_execute(&format!(
        "CREATE DATABASE {} TEMPLATE {}",
        quote_ident(name),
        quote_ident(template)
    ))
    .await?;
    Ok(())
}

/// Drops database `name` (terminating its sessions) if it exists.
pub async fn drop_database(url: &str, name: &str) -> Result<()> {
    let (_, admin_url) = split_url(url)?;
    let mut conn = admin_conn(&admin_url).await?;
    conn.batch_execute(&format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        quote_ident(name)
    ))
    .await?;
    Ok(())
}
