//! `briefrail-faults`: three real `briefrail run` processes (the `command` builder, a build
//! time drawn per build) on a private Postgres cluster and a private 3-node RabbitMQ cluster,
//! both started and removed by the suite, a seeded schedule of demand bursts and every fault
//! of the catalogue that needs real processes, then quiescence and the invariants checked over
//! the tables and the queues. Same seed, same schedule. Exits 1 on any violation, naming the
//! catalogue rows, and 2 when the suite cannot run (naming what is missing).
//!
//! ```sh
//! cargo run --release -p briefrail-tools --bin briefrail-faults -- --seed 7          # short (CI)
//! cargo run --release -p briefrail-tools --bin briefrail-faults -- --seed 7 --long   # 8x the faults
//! ```
//!
//! It never touches the machine's Postgres or RabbitMQ: both clusters are its own, on loopback
//! ports of its own, in a temporary directory.

mod broker;
mod inject;
mod invariants;
mod nodes;
mod postgres;
mod proxy;
mod schedule;
mod setup;
mod world;

use std::time::{Duration, Instant};

use clap::Parser;

use crate::invariants::{DeadLetter, Verdict};
use crate::schedule::{Fault, Step};
use crate::world::World;

#[derive(Parser, Debug)]
#[command(about = "Multi-process fault suite for briefrail")]
pub struct Args {
    /// Seed of the schedule: the same seed gives the same demands and faults.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Eight times the faults (and rounds) of the short CI configuration.
    #[arg(long)]
    pub long: bool,
    /// Keep the run's directory (clusters' data and logs, node logs) to investigate.
    #[arg(long)]
    pub keep: bool,
    /// The briefrail binary to run (default: next to this one).
    #[arg(long)]
    pub binary: Option<std::path::PathBuf>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    // Interrupted (Ctrl-C, SIGTERM), the run's future is dropped, and with it the world: the
    // nodes are killed and both private clusters stopped, nothing left running.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    let code = tokio::select! {
        r = run(args) => match r {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                println!("briefrail-faults cannot run: {e}");
                eprintln!("briefrail-faults cannot run: {e}");
                2
            }
        },
        _ = tokio::signal::ctrl_c() => {
            eprintln!("briefrail-faults: interrupted; nodes and clusters stopped");
            130
        }
        _ = term.recv() => {
            eprintln!("briefrail-faults: terminated; nodes and clusters stopped");
            143
        }
    };
    std::process::exit(code);
}

async fn run(args: Args) -> Result<bool, String> {
    let mut w = setup::world(&args).await?;
    let steps = schedule::schedule(args.seed, args.long, w.matters.len());
    for step in &steps {
        match step {
            Step::Burst { matter, demands } => {
                let m = w.matters[*matter];
                w.demand(m, *demands).await?;
            }
            Step::Pause(d) => tokio::time::sleep(*d).await,
            Step::Fault(f) => {
                let t = w.elapsed();
                match inject::inject(*f, &mut w).await {
                    Ok(what) => {
                        println!("  +{t:>6.1}s {}: {what}", f.name());
                        w.injected.entry(*f).or_default().push(what);
                    }
                    Err(why) => {
                        println!("  +{t:>6.1}s {} DID NOT LAND: {why}", f.name());
                        w.not_landed
                            .push(format!("{} (rows {:?}): {why}", f.name(), f.rows()));
                    }
                }
            }
        }
    }
    println!(
        "schedule done: {} bursts, {} demands, {} faults in {:.1} s",
        w.bursts.len(),
        w.demands_total,
        w.injected.values().map(Vec::len).sum::<usize>(),
        w.elapsed()
    );
    quiesce(&w, if args.long { 600 } else { 180 }).await;
    setup::prove_configuration(&mut w).await;
    let dead = setup::drain_dead_letters(&w).await?;
    let stranded = setup::stranded(&w).await;
    let mut verdicts = invariants::check_all(&w, &dead, stranded).await;
    let mut missed: Vec<u8> = w
        .missed
        .iter()
        .flat_map(|f| f.rows().iter().copied())
        .collect();
    missed.sort();
    missed.dedup();
    verdicts.push(Verdict {
        name: "every fault took effect",
        rows: missed,
        checked: (w.injected.values().map(Vec::len).sum::<usize>() + w.not_landed.len()) as i64,
        violations: w.not_landed.clone(),
    });
    let ok = report(&w, &verdicts, &dead);
    setup::tear_down(w, args.keep).await;
    Ok(ok)
}

/// Waits until everything is published, consumed and served (or the deadline passes; the
/// invariants then name what is not).
async fn quiesce(w: &World, seconds: u64) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let unpublished = w
            .count("SELECT count(*) AS n FROM ops.domain_event_outbox WHERE published_at IS NULL")
            .await;
        let unserved = w
            .count(
                "SELECT count(*) AS n FROM ops.matter_frame_jobs
                  WHERE landed_generation < requested_generation OR run_status <> 'idle'",
            )
            .await;
        let unconsumed = w
            .count(
                "SELECT count(*) AS n FROM ops.domain_event_outbox o WHERE NOT EXISTS
                   (SELECT 1 FROM ops.consumed_events c WHERE c.event_id = o.event_id)",
            )
            .await;
        if unpublished == 0 && unserved == 0 && unconsumed == 0 {
            break;
        }
        if Instant::now() > deadline {
            println!(
                "no quiescence after {seconds} s: {unpublished} unpublished events, \
                 {unconsumed} unconsumed, {unserved} matters unserved or busy"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!("quiescent after {:.1} s", w.elapsed());
}

/// The summary: one line per fault kind, then each invariant with its count.
fn report(w: &World, verdicts: &[Verdict], dead: &[DeadLetter]) -> bool {
    println!("faults:");
    for f in Fault::ALL {
        let n = w.injected.get(&f).map_or(0, Vec::len);
        println!("fault {}: {n} injected", f.name());
    }
    println!("invariants ({} dead letters read):", dead.len());
    let mut rows: Vec<u8> = Vec::new();
    for v in verdicts {
        let mark = if v.violations.is_empty() {
            "✓"
        } else {
            "✗"
        };
        let guards = if v.rows.is_empty() {
            String::new()
        } else {
            format!(
                " (rows {})",
                v.rows
                    .iter()
                    .map(u8::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        println!(
            "  {mark} {}{guards}: {} checked, {} violation(s)",
            v.name,
            v.checked,
            v.violations.len()
        );
        for x in v.violations.iter().take(10) {
            println!("      {x}");
        }
        if !v.violations.is_empty() {
            rows.extend_from_slice(&v.rows);
        }
    }
    let fenced = w.lost.runs.len();
    println!(
        "lost past of the moves: {} events, {} claims ({fenced} held at the switch)",
        w.lost.events.len(),
        w.lost.tokens.len()
    );
    let ok = verdicts.iter().all(|v| v.violations.is_empty());
    if ok {
        println!("all invariants held");
    } else {
        rows.sort();
        rows.dedup();
        println!(
            "INVARIANTS VIOLATED (catalogue rows {})",
            rows.iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    ok
}
