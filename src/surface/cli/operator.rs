//! The console's reads and actions on the command line: `matter list`, `brief show`,
//! `dead-letters`, `nodes`, and the words `status` uses for a matter out of retries. Same
//! ledger calls as the pages (`ledger::matters`, `dead_letters`, `presence`), printed as text
//! or JSON.

use diesel_async::AsyncPgConnection;

use super::{DeadLettersCommand, MatterArgs};
use crate::error::{Error, Result};
use crate::ledger::{dead_letters, matters, presence, reads};

fn print_json(v: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| Error::internal_from("serialising the output", e))?;
    println!("{text}");
    Ok(())
}

/// `matter list`.
pub async fn matter_list(
    conn: &mut AsyncPgConnection,
    q: &matters::MatterQuery,
    max_attempts: u32,
    json: bool,
) -> Result<()> {
    let (rows, more) = matters::search(conn, q, max_attempts).await?;
    if json {
        let rows: Vec<_> = rows
            .iter()
            .map(|m| {
                let mut v = serde_json::to_value(m).unwrap_or_default();
                v["state"] = serde_json::json!(m.state().as_str());
                v
            })
            .collect();
        return print_json(&rows);
    }
    if !rows.is_empty() {
        println!(
            "{:<36}  {:<17}  {:>9}  {:>6}  TITLE",
            "MATTER", "STATE", "REQUESTED", "LANDED"
        );
    }
    for m in &rows {
        println!(
            "{:<36}  {:<17}  {:>9}  {:>6}  {}",
            m.matter_id,
            m.state().label(),
            m.requested_generation,
            m.landed_generation,
            m.title
        );
    }
    if more {
        println!(
            "(more than {}: narrow with --query or --state, or raise --limit)",
            rows.len()
        );
    } else if rows.is_empty() {
        println!("no matter matches");
    }
    Ok(())
}

/// `brief show`: the latest landed frame, for a person or as its JSON body.
pub async fn brief_show(conn: &mut AsyncPgConnection, m: &MatterArgs, json: bool) -> Result<()> {
    let record = crate::ledger::facts::matter(conn, m.firm, m.matter).await?;
    if record.is_none() {
        return Err(Error::NotFound(format!(
            "matter {} of firm {}",
            m.matter, m.firm
        )));
    }
    let Some(frame) = reads::latest_frame(conn, m.firm, m.matter).await? else {
        return Err(Error::NotFound(format!(
            "a Brief of matter {}: none has landed yet (`briefrail status` says why)",
            m.matter
        )));
    };
    if json {
        return print_json(&frame.body);
    }
    println!(
        "Brief generation {} (landed {})\n",
        frame.generation,
        frame.created_at.to_rfc3339()
    );
    print!(
        "{}",
        crate::surface::console::brief_view::BriefView::of(&frame.body).to_text()
    );
    Ok(())
}

/// `dead-letters list|replay|discard`.
pub async fn dead_letters(conn: &mut AsyncPgConnection, c: DeadLettersCommand) -> Result<()> {
    match c {
        DeadLettersCommand::List { all, limit, json } => {
            let rows = dead_letters::list(conn, all, limit).await?;
            if json {
                return print_json(&rows);
            }
            for d in &rows {
                println!(
                    "{}  {}  event {}  {}{}",
                    d.dead_letter_id,
                    d.refused_at.to_rfc3339(),
                    d.event_id
                        .map(|e| e.to_string())
                        .unwrap_or_else(|| "-".into()),
                    d.reason,
                    d.resolution
                        .as_deref()
                        .map(|r| format!("  [{r}]"))
                        .unwrap_or_default()
                );
            }
            if rows.is_empty() {
                println!("no dead letters");
            }
        }
        DeadLettersCommand::Replay { id } => match dead_letters::replay(conn, id).await? {
            dead_letters::Replayed::Applied { what } => {
                println!("dead letter {id} replayed: {what}")
            }
            dead_letters::Replayed::RefusedAgain { reason } => {
                println!("dead letter {id} refused again: {reason}; it stays open");
            }
        },
        DeadLettersCommand::Discard { id } => {
            dead_letters::discard(conn, id).await?;
            println!("dead letter {id} discarded");
        }
    }
    Ok(())
}

/// `nodes`.
pub async fn nodes(conn: &mut AsyncPgConnection, json: bool) -> Result<()> {
    let rows = presence::nodes(conn).await?;
    if json {
        return print_json(&rows);
    }
    for n in &rows {
        println!(
            "{:<28} {:<6} v{:<8} {:<8} started {}  last seen {}  builds {}",
            n.node_id,
            if n.alive { "alive" } else { "gone" },
            n.version,
            n.transport,
            n.started_at.to_rfc3339(),
            n.last_seen_at.to_rfc3339(),
            n.builds_in_flight
        );
    }
    if rows.is_empty() {
        println!("no node has run against this ledger");
    }
    Ok(())
}
