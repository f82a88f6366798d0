//! Injecting one fault, and proving it took effect: `Ok(what happened)`, or `Err(why the
//! fault did not land)`, which fails the run (a fault that silently did nothing would let the
//! invariants pass for the wrong reason).

mod broker;
mod bus;
mod database;
mod process;

pub use process::proven_skew;

use std::time::{Duration, Instant};

use crate::schedule::Fault;
use crate::world::World;

pub async fn inject(f: Fault, w: &mut World) -> Result<String, String> {
    match f {
        Fault::Stop => process::stop(w).await,
        Fault::Kill => process::kill_mid_build(w).await,
        Fault::KillAfterCommit => process::kill_after_commit(w).await,
        Fault::ClockSkew => process::clock_skew(w).await,
        Fault::RelayCrash => process::relay_crash(w).await,
        Fault::StallInCommit => database::stall_before_commit(w).await,
        Fault::Partition => database::partition(w).await,
        Fault::CommitAnswerLost => database::commit_answer_lost(w).await,
        Fault::BackendKill => database::backend_kill(w).await,
        Fault::DbRestart => database::restart(w).await,
        Fault::WideLoad => database::wide_load(w).await,
        Fault::RefusedFrame => database::refused_frame(w).await,
        Fault::LogicalMove => database::logical_move(w).await,
        Fault::BrokerDown => broker::down(w).await,
        Fault::BrokerConnectionsClosed => broker::connections_closed(w).await,
        Fault::MemoryAlarm => broker::memory_alarm(w).await,
        Fault::BrokerLeaderKill => broker::leader_kill(w).await,
        Fault::BrokerLeaderPause => broker::leader_pause(w).await,
        Fault::BrokerRollingRestart => broker::rolling_restart(w).await,
        Fault::QueuePurge => bus::purge(w).await,
        Fault::Unroutable => bus::unroutable(w).await,
        Fault::DuplicateDelivery => bus::duplicates(w).await,
        Fault::Malformed => bus::malformed(w).await,
        Fault::Forged => bus::forged(w).await,
        Fault::PoolExhaustion | Fault::MixedLeases => {
            Err(format!("{} is a configuration, not scheduled", f.name()))
        }
    }
}

/// The nodes holding a live claim now (a run still `running` that is its row's current
/// claim), newest first.
pub async fn busy_nodes(w: &World) -> Vec<String> {
    w.lines(
        "SELECT r.node_id AS what FROM ops.matter_frame_runs r
           JOIN ops.matter_frame_jobs j ON j.firm_id = r.firm_id AND j.matter_id = r.matter_id
          WHERE r.outcome = 'running' AND j.run_status = 'running' AND j.claimed_run_id = r.run_id
          ORDER BY r.started_at DESC",
    )
    .await
    .into_iter()
    .filter(|l| !l.starts_with("query failed") && !l.starts_with("no connection"))
    .collect()
}

/// A node holding a running claim, among those `fit` accepts, waiting up to 30 s for one: a
/// pause or a kill of an idle node makes no zombie, so it would not be the fault asked for.
pub async fn wait_busy_node(
    w: &mut World,
    fit: impl Fn(&crate::nodes::NodeProc) -> bool,
) -> Result<usize, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for id in busy_nodes(w).await {
            if let Some(i) = w.nodes.iter().position(|n| n.id() == id && fit(n)) {
                return Ok(i);
            }
        }
        if Instant::now() > deadline {
            return Err("no node held a running claim within 30 s".into());
        }
        // Keep work flowing: a quiet ledger has no claim to hit.
        let m = w.any_matter();
        w.demand(m, 1).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn signal(sig: &str, pid: &str) -> Result<(), String> {
    match std::process::Command::new("kill").args([sig, pid]).status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("kill {sig} {pid} exited {s}")),
        Err(e) => Err(format!("kill {sig} {pid}: {e}")),
    }
}

/// Whether process `pid` is stopped (state `T` in `/proc/<pid>/stat`) within two seconds: a
/// signal is delivered asynchronously, so the state is polled, not read once.
pub async fn stopped(pid: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let state_t = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                stat.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('T')
            })
            .unwrap_or(false);
        if state_t || Instant::now() > deadline {
            return state_t;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for a fault point the proxy reports, up to `within`, keeping demands flowing.
pub async fn fired<T>(
    w: &mut World,
    mut rx: tokio::sync::oneshot::Receiver<T>,
    within: Duration,
) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout(Duration::from_millis(300), &mut rx).await {
            Ok(Ok(v)) => return Some(v),
            Ok(Err(_)) => return None,
            Err(_) if Instant::now() > deadline => return None,
            Err(_) => {
                let m = w.any_matter();
                let _ = w.demand(m, 1).await;
            }
        }
    }
}
