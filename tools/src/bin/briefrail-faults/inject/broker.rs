//! Faults of the private RabbitMQ cluster: the whole cluster's app stopped, connections
//! closed, a memory alarm, the trigger queue's leader killed or paused, a rolling restart.

use std::time::Duration;

use crate::world::World;

/// The trigger queue's name in this run's topology.
fn trigger_queue(w: &World) -> String {
    briefrail::transport::amqp::Topology::new(&w.prefix).trigger_queue
}

/// Row 19: `stop_app` on every member (no broker answers), then `start_app`.
pub async fn down(w: &mut World) -> Result<String, String> {
    w.broker.stop_app_all().await?;
    let refused = (0..w.broker.len()).all(|i| !w.broker.answers(i));
    tokio::time::sleep(Duration::from_secs(3)).await;
    w.broker.start_app_all().await?;
    if !refused {
        return Err("a broker member still accepted connections after stop_app".into());
    }
    let back = (0..w.broker.len()).all(|i| w.broker.answers(i));
    if !back {
        return Err("a broker member does not answer after start_app".into());
    }
    Ok(format!(
        "stop_app on all {} broker members for 3 s, then start_app",
        w.broker.len()
    ))
}

/// Row 19: every client connection of every member closed by the broker.
pub async fn connections_closed(w: &mut World) -> Result<String, String> {
    for i in 0..w.broker.len() {
        w.broker.close_all_connections(i).await?;
    }
    Ok(format!(
        "close_all_connections on all {} broker members",
        w.broker.len()
    ))
}

/// Row 20: a memory alarm (publishers blocked cluster-wide): the relay must wait, not spin
/// or lose; demands are still recorded meanwhile.
pub async fn memory_alarm(w: &mut World) -> Result<String, String> {
    let i = w.rng.below(w.broker.len() as u64) as usize;
    w.broker.set_memory_watermark(i, 0.0000001).await?;
    let alarmed = w.broker.memory_alarm_on().await;
    let m = w.any_matter();
    w.demand(m, 5).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cleared = w.broker.set_memory_watermark(i, 0.4).await;
    if !alarmed {
        return Err(format!("member {i} reported no memory alarm"));
    }
    cleared.map_err(|e| format!("the memory watermark could not be restored: {e}"))?;
    Ok(format!(
        "memory alarm on broker member {i} for 3 s, 5 demands recorded meanwhile"
    ))
}

/// Row 32: kill -9 of the member leading the trigger queue while demands flow; it is
/// restarted after 3 s and must rejoin.
pub async fn leader_kill(w: &mut World) -> Result<String, String> {
    let q = trigger_queue(w);
    let leader = w.broker.leader(&q).await?;
    w.broker.kill(leader).await?;
    let m = w.any_matter();
    w.demand(m, 10).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    w.broker.restart(leader).await?;
    Ok(format!(
        "kill -9 of broker member {leader} ({}), leader of the trigger queue, restarted after 3 s",
        w.broker.node_name(leader)
    ))
}

/// Row 32: SIGSTOP of the trigger queue's leader for five seconds.
pub async fn leader_pause(w: &mut World) -> Result<String, String> {
    let q = trigger_queue(w);
    let leader = w.broker.leader(&q).await?;
    w.broker.pause(leader).await?;
    let m = w.any_matter();
    let recorded = w.demand(m, 10).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    w.broker.resume(leader).await?;
    // A member paused past the net tick comes back partitioned; autoheal restarts its app.
    w.broker.wait_clustered().await?;
    recorded?;
    Ok(format!(
        "SIGSTOP of broker member {leader} ({}), leader of the trigger queue, for 5 s",
        w.broker.node_name(leader)
    ))
}

/// Row 32: every member stopped and started in turn, demands flowing.
pub async fn rolling_restart(w: &mut World) -> Result<String, String> {
    let m = w.any_matter();
    w.demand(m, 10).await?;
    w.broker.rolling_restart().await?;
    Ok(format!(
        "rolling restart of all {} broker members",
        w.broker.len()
    ))
}
