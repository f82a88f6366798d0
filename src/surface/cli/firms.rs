//! `briefrail firm …` and `briefrail rail …`: who is served next and the limits toward the
//! builder, as an operator sets and reads them (`ledger::fairness`, `ledger::limits`).

use diesel_async::AsyncPgConnection;

use super::{FirmCommand, RailCommand};
use crate::error::{Error, Result};
use crate::ledger::fairness::{self, FirmSettings, FirmView};
use crate::ledger::limits::{self, LimitsStatus};

fn print_json(v: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| Error::internal_from("serialising the output", e))?;
    println!("{text}");
    Ok(())
}

/// A duration an operator reads at a glance: `42 s`, `7 min`, `3 h`.
pub fn age(seconds: f64) -> String {
    let s = seconds.max(0.0);
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

fn print_firms(firms: &[FirmView]) {
    println!(
        "{:<36}  {:<24}  {:>6}  {:<7}  {:>8}  {:>7}  OLDEST INTERACTIVE",
        "FIRM", "NAME", "WEIGHT", "STATE", "UNSERVED", "RUNNING"
    );
    for f in firms {
        println!(
            "{:<36}  {:<24}  {:>6}  {:<7}  {:>8}  {:>7}  {}",
            f.firm_id,
            crate::text::clip(f.name.as_deref().unwrap_or("-"), 24),
            f.weight,
            if f.paused { "paused" } else { "active" },
            f.unserved,
            f.running,
            f.oldest_interactive_s
                .map(age)
                .unwrap_or_else(|| "-".into())
        );
    }
}

/// `firm list|show|set|pause|resume`.
pub async fn firm(conn: &mut AsyncPgConnection, c: FirmCommand) -> Result<()> {
    match c {
        FirmCommand::List { json } => {
            let firms = fairness::firms(conn).await?;
            if json {
                return print_json(&firms);
            }
            print_firms(&firms);
        }
        FirmCommand::Show { firm, json } => {
            let id = fairness::resolve(conn, &firm.firm).await?;
            let view = fairness::firm(conn, id).await?.ok_or_else(|| {
                Error::InvalidInput(format!("the ledger knows nothing of firm {id}"))
            })?;
            if json {
                return print_json(&view);
            }
            print_firms(std::slice::from_ref(&view));
        }
        FirmCommand::Set { firm, name, weight } => {
            if name.is_none() && weight.is_none() {
                return Err(Error::InvalidInput(
                    "firm set: give --name or --weight (or both)".into(),
                ));
            }
            let id = fairness::resolve(conn, &firm.firm).await?;
            let settings = FirmSettings {
                name,
                weight,
                paused: None,
            };
            fairness::set_firm(conn, id, &settings).await?;
            println!("firm {id} set");
        }
        FirmCommand::Pause { firm } => {
            let id = fairness::resolve(conn, &firm.firm).await?;
            fairness::set_firm(conn, id, &paused(true)).await?;
            println!("firm {id} paused: its demands are recorded and wait");
        }
        FirmCommand::Resume { firm } => {
            let id = fairness::resolve(conn, &firm.firm).await?;
            fairness::set_firm(conn, id, &paused(false)).await?;
            println!("firm {id} resumed");
        }
    }
    Ok(())
}

fn paused(paused: bool) -> FirmSettings {
    FirmSettings {
        paused: Some(paused),
        ..Default::default()
    }
}

/// `rail pause|resume|status`.
pub async fn rail(conn: &mut AsyncPgConnection, c: RailCommand) -> Result<()> {
    match c {
        RailCommand::Pause => {
            fairness::set_rail_paused(conn, true).await?;
            println!("rail paused: demands are recorded and wait until `briefrail rail resume`");
        }
        RailCommand::Resume => {
            fairness::set_rail_paused(conn, false).await?;
            println!("rail resumed");
        }
        RailCommand::Status => {
            let p = fairness::paused(conn).await?;
            println!(
                "rail {}; {} firm(s) paused",
                if p.rail { "paused" } else { "running" },
                p.firms.len()
            );
            print_limits(&limits::read(conn).await?);
        }
        RailCommand::Limits(a) => {
            if a.max_running.is_some() || a.starts_per_minute.is_some() {
                let now = limits::read(conn).await?.limits;
                limits::set(
                    conn,
                    a.max_running.map_or(now.max_running, |l| l.0),
                    a.starts_per_minute.map_or(now.starts_per_minute, |l| l.0),
                )
                .await?;
            }
            print_limits(&limits::read(conn).await?);
        }
        RailCommand::ReleaseBuilder => {
            limits::release_builder(conn).await?;
            println!("builder hold lifted: builds start again as the limits allow");
        }
    }
    Ok(())
}

fn print_limits(s: &LimitsStatus) {
    let or_none = |v: Option<u32>| v.map_or("none".to_owned(), |n| n.to_string());
    println!(
        "max_running {}; starts_per_minute {}",
        or_none(s.limits.max_running),
        or_none(s.limits.starts_per_minute)
    );
    match (s.limits.builder_held_for, &s.held_reason) {
        (Some(d), reason) => println!(
            "builder held for {} more: {}",
            age(d.as_secs_f64()),
            reason.as_deref().unwrap_or("(no reason given)")
        ),
        (None, _) => println!("builder not held"),
    }
}
