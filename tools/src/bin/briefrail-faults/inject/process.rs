//! Faults of the node processes: pauses, crashes, a crash right after a commit, clocks.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use super::{fired, signal, stopped, wait_busy_node};
use crate::nodes::{self, NodeSpec};
use crate::schedule::Fault;
use crate::world::World;

/// Row 1: SIGSTOP the holder of a build for twice its lease; another node must take over and
/// the zombie's commit be refused.
pub async fn stop(w: &mut World) -> Result<String, String> {
    // The build may end between finding its holder and the signal: then it was no zombie, so
    // the holder is resumed at once and another build is picked (three tries).
    for _ in 0..3 {
        let idx = wait_busy_node(w, |n| n.spec.lease_seconds <= 2.0).await?;
        let (id, pid) = (w.nodes[idx].id().to_owned(), w.nodes[idx].pid());
        let from = w.db_now().await;
        signal("-STOP", &pid)?;
        let took = stopped(&pid).await;
        if !took {
            signal("-CONT", &pid)?;
            return Err(format!("{id} (pid {pid}) was not stopped after SIGSTOP"));
        }
        if !super::busy_nodes(w).await.contains(&id) {
            signal("-CONT", &pid)?;
            continue;
        }
        let pause = Duration::from_secs_f64(w.nodes[idx].spec.lease_seconds * 2.0);
        tokio::time::sleep(pause).await;
        signal("-CONT", &pid)?;
        w.window(Fault::Stop, Some(&id), from).await;
        return Ok(format!(
            "SIGSTOP {id} for {:.0} s (twice its lease) mid-build",
            pause.as_secs_f64()
        ));
    }
    Err("three times the build ended before its holder was stopped".into())
}

/// kill -9 of node `idx`, proven by its exit status, then the same node started again.
async fn kill_and_restart(w: &mut World, idx: usize, fault: Fault) -> Result<(), String> {
    let id = w.nodes[idx].id().to_owned();
    let from = w.db_now().await;
    w.nodes[idx]
        .child
        .kill()
        .map_err(|e| format!("kill -9 {id}: {e}"))?;
    let status = w.nodes[idx]
        .child
        .wait()
        .map_err(|e| format!("wait for {id}: {e}"))?;
    if status.signal() != Some(9) {
        return Err(format!("{id} did not die of SIGKILL: {status}"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    respawn(w, idx, w.node_spec(idx))?;
    w.window(fault, Some(&id), from).await;
    Ok(())
}

fn respawn(w: &mut World, idx: usize, spec: NodeSpec) -> Result<(), String> {
    let id = spec.id.clone();
    w.nodes[idx] =
        nodes::spawn(&w.bin, &spec, &w.dir).map_err(|e| format!("restarting {id} failed: {e}"))?;
    Ok(())
}

/// Row 3: kill -9 mid-build; no partial frame, the demand served by a survivor or the restart.
pub async fn kill_mid_build(w: &mut World) -> Result<String, String> {
    let idx = wait_busy_node(w, |_| true).await?;
    kill_and_restart(w, idx, Fault::Kill).await?;
    Ok(format!(
        "kill -9 {} mid-build and restart",
        w.nodes[idx].id()
    ))
}

/// Row 4: kill -9 the moment the database answered a build's COMMIT (the frame landed, the
/// follow-up claim committed with it, nothing after it ran).
pub async fn kill_after_commit(w: &mut World) -> Result<String, String> {
    let idx = wait_busy_node(w, |_| true).await?;
    let rx = w.proxies[idx].arm_notify_commit();
    let seen = fired(w, rx, Duration::from_secs(20)).await;
    if seen.is_none() {
        w.proxies[idx].disarm();
        return Err(format!(
            "{} committed no build within 20 s",
            w.nodes[idx].id()
        ));
    }
    kill_and_restart(w, idx, Fault::KillAfterCommit).await?;
    Ok(format!(
        "kill -9 {} right after its build's COMMIT was answered, and restart",
        w.nodes[idx].id()
    ))
}

/// The clocks node-0 cycles through at each clock-skew fault (row 14: +2 h, -2 h, 10x speed).
const SKEWS: [&str; 3] = ["+0 x10", "+2h", "-2h"];

/// Row 14: node-0 stopped cleanly (SIGTERM hands its claims back) and started under the next
/// libfaketime clock; libfaketime must show in the new process's memory map.
pub async fn clock_skew(w: &mut World) -> Result<String, String> {
    let idx = 0;
    let skew = SKEWS[w.skews % SKEWS.len()];
    w.skews += 1;
    let id = w.nodes[idx].id().to_owned();
    let from = w.db_now().await;
    signal("-TERM", &w.nodes[idx].pid())?;
    let status = w.nodes[idx]
        .child
        .wait()
        .map_err(|e| format!("wait for {id}: {e}"))?;
    if !status.success() {
        return Err(format!("{id} did not exit cleanly on SIGTERM: {status}"));
    }
    let mut spec = w.node_spec(idx);
    spec.skew = Some(skew.to_owned());
    respawn(w, idx, spec)?;
    w.window(Fault::ClockSkew, Some(&id), from).await;
    proven_skew(w, idx).await?;
    Ok(format!("{id} restarted under libfaketime {skew:?}"))
}

/// Whether node `idx` runs under libfaketime (polled: the loader maps it at exec, but a
/// loaded machine can take seconds to get there). A node that exited meanwhile is named as
/// such, not as a missing library.
pub async fn proven_skew(w: &World, idx: usize) -> Result<(), String> {
    let pid = w.nodes[idx].pid();
    for _ in 0..150 {
        if nodes::runs_faketime(&pid) {
            return Ok(());
        }
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(format!(
                "{} (pid {pid}) exited before it could be seen running under libfaketime",
                w.nodes[idx].id()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "{} does not have libfaketime mapped after 15 s ({} missing or not preloaded)",
        w.nodes[idx].id(),
        nodes::FAKETIME_LIB
    ))
}

/// Row 18: a backlog of 300 events, and a node killed -9 while the relays publish it (before
/// or after the broker's ack, before the mark): rows republished, applied once.
pub async fn relay_crash(w: &mut World) -> Result<String, String> {
    // A relay can drain 300 events before the pause ends: a backlog found drained is written
    // again, and the pause shortens, so the kill lands while events are unpublished.
    let mut backlog = 0;
    for attempt in 0..5u64 {
        let m = w.any_matter();
        w.demand(m, 300).await?;
        let pause = (20 + w.rng.below(60)) >> attempt;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        backlog = w
            .count("SELECT count(*) AS n FROM ops.domain_event_outbox WHERE published_at IS NULL")
            .await;
        if backlog > 0 {
            break;
        }
    }
    let idx = w.rng.below(w.nodes.len() as u64) as usize;
    kill_and_restart(w, idx, Fault::RelayCrash).await?;
    if backlog <= 0 {
        return Err("the outbox was already drained when the node was killed".into());
    }
    Ok(format!(
        "kill -9 {} with {backlog} events unpublished, and restart",
        w.nodes[idx].id()
    ))
}
