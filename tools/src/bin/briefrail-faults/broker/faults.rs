//! What the fault injectors do to the cluster: kill -9, restart, SIGSTOP and SIGCONT of one
//! member, a rolling restart, `stop_app`/`start_app` on every member, a memory watermark, closed
//! connections. Each waits for what it did to show (a killed member's port refusing, a paused
//! beam in state T, a restarted member clustered again), so the injector's next step starts from
//! a known state.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::member::{proc_state, signal};
use super::{BOOT_DEADLINE, BrokerCluster, all_ok, join_all};

impl BrokerCluster {
    /// kill -9 of member i's beam; Ok once it is gone and its AMQP port refuses.
    pub async fn kill(&mut self, i: usize) -> Result<(), String> {
        let name = self.members[i].name.clone();
        let pid = self.members[i]
            .pid
            .ok_or_else(|| format!("kill: member {i} ({name}) is not running"))?;
        signal("-KILL", pid).await?;
        self.members[i].paused.store(false, Ordering::SeqCst);
        self.reap(i, Duration::from_secs(15)).await?;
        self.members[i].pid = None;
        let _ = std::fs::remove_file(self.members[i].dir.join("pid"));
        self.wait_refuses(i, Duration::from_secs(10)).await
    }

    /// Starts member i again on its own data directory and waits until it has booted and is
    /// clustered with every member that is up.
    pub async fn restart(&mut self, i: usize) -> Result<(), String> {
        if self.members[i].pid.is_some() {
            return Err(format!(
                "restart: member {i} ({}) is still running",
                self.members[i].name
            ));
        }
        self.spawn_member(i)?;
        let expected = self.up_names_with(i);
        let ready = match self.wait_ready(i, &expected).await {
            Ok(()) => self.read_pid(i),
            Err(e) => Err(e),
        };
        match ready {
            Ok(pid) => {
                self.members[i].pid = Some(pid);
                Ok(())
            }
            Err(e) => {
                // Leave nothing half-started behind: the member counts as down.
                self.abort_member(i).await;
                Err(format!("restart of member {i}: {e}"))
            }
        }
    }

    /// SIGSTOP of member i's beam; Ok once `/proc/<pid>/stat` shows state T.
    pub async fn pause(&self, i: usize) -> Result<(), String> {
        let pid = self.running_pid(i, "pause")?;
        signal("-STOP", pid).await?;
        self.members[i].paused.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match proc_state(pid) {
                Some('T') | Some('t') => return Ok(()),
                None => return Err(format!("pause: beam {pid} of member {i} is gone")),
                Some(_) if Instant::now() > deadline => {
                    return Err(format!("pause: beam {pid} of member {i} did not stop"));
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// SIGCONT of member i's beam; Ok once it no longer shows state T.
    pub async fn resume(&self, i: usize) -> Result<(), String> {
        let pid = self.running_pid(i, "resume")?;
        signal("-CONT", pid).await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match proc_state(pid) {
                Some('T') | Some('t') if Instant::now() > deadline => {
                    return Err(format!("resume: beam {pid} of member {i} stays stopped"));
                }
                Some('T') | Some('t') => tokio::time::sleep(Duration::from_millis(20)).await,
                None => return Err(format!("resume: beam {pid} of member {i} is gone")),
                Some(_) => {
                    self.members[i].paused.store(false, Ordering::SeqCst);
                    return Ok(());
                }
            }
        }
    }

    /// Waits until every running member has booted and sees every running member as running:
    /// after a `resume` of a member paused past the net tick (it comes back partitioned and
    /// autoheal restarts its broker app, ~5-10 s), or to check health between faults.
    pub async fn wait_clustered(&self) -> Result<(), String> {
        self.check_none_paused("wait_clustered")?;
        let up = self.up_members();
        let expected = self.up_names();
        let results = join_all(
            up.iter()
                .map(|&i| self.wait_ready(i, &expected))
                .collect::<Vec<_>>(),
        )
        .await;
        all_ok(results, "wait_clustered")
    }

    /// Each member in turn: `rabbitmqctl stop` (graceful), start again on its data, wait until it
    /// has booted and is clustered, and until every quorum queue has all its replicas online
    /// again, before the next member goes down (so a rolling restart never costs a quorum).
    pub async fn rolling_restart(&mut self) -> Result<(), String> {
        self.check_none_paused("rolling_restart")?;
        for i in 0..self.len() {
            if self.members[i].pid.is_none() {
                continue;
            }
            self.ctl(i, &["stop"])
                .await
                .map_err(|e| format!("rolling_restart: stopping member {i}: {e}"))?;
            self.reap(i, Duration::from_secs(60))
                .await
                .map_err(|e| format!("rolling_restart: {e}"))?;
            self.members[i].pid = None;
            let _ = std::fs::remove_file(self.members[i].dir.join("pid"));
            self.restart(i)
                .await
                .map_err(|e| format!("rolling_restart: {e}"))?;
            self.wait_quorum_queues_online(i, Duration::from_secs(60))
                .await
                .map_err(|e| format!("rolling_restart: after member {i}: {e}"))?;
        }
        Ok(())
    }

    /// `stop_app` on every running member (concurrently): the Erlang nodes stay up, the broker
    /// application (listeners, queues) stops.
    pub async fn stop_app_all(&self) -> Result<(), String> {
        self.check_none_paused("stop_app_all")?;
        let up = self.up_members();
        let results = join_all(
            up.iter()
                .map(|&i| self.ctl(i, &["stop_app"]))
                .collect::<Vec<_>>(),
        )
        .await;
        all_ok(
            results.into_iter().map(|r| r.map(|_| ())).collect(),
            "stop_app_all",
        )
    }

    /// `start_app` on every running member *concurrently* (members that all stopped must find
    /// each other again: each waits for the others' tables), then waits until each has booted
    /// (what `await_startup` waits for) and sees every member running.
    pub async fn start_app_all(&self) -> Result<(), String> {
        self.check_none_paused("start_app_all")?;
        let up = self.up_members();
        let results = join_all(
            up.iter()
                .map(|&i| self.ctl(i, &["start_app"]))
                .collect::<Vec<_>>(),
        )
        .await;
        all_ok(
            results.into_iter().map(|r| r.map(|_| ())).collect(),
            "start_app_all",
        )?;
        // `start_app` returns once the app has booted; what is left to wait for is the
        // listeners and one member seeing all running (one CLI call instead of n).
        let results = join_all(
            up.iter()
                .map(|&i| self.wait_port(i, Instant::now() + BOOT_DEADLINE))
                .collect::<Vec<_>>(),
        )
        .await;
        all_ok(results, "start_app_all: awaiting listeners")?;
        let expected = self.up_names();
        match up.first() {
            Some(&first) => self
                .wait_ready(first, &expected)
                .await
                .map_err(|e| format!("start_app_all: {e}")),
            None => Ok(()),
        }
    }

    /// `set_vm_memory_high_watermark <fraction>` on member i (0.4 is the configured default).
    pub async fn set_memory_watermark(&self, i: usize, fraction: f64) -> Result<(), String> {
        if !fraction.is_finite() || fraction < 0.0 {
            return Err(format!("set_memory_watermark: bad fraction {fraction}"));
        }
        self.ctl(i, &["set_vm_memory_high_watermark", &format!("{fraction}")])
            .await
            .map(|_| ())
    }

    /// Whether any running member reports a memory alarm (`rabbit_alarm:get_alarms()` on every
    /// running node, asked through one member). False when no member can be asked.
    pub async fn memory_alarm_on(&self) -> bool {
        let expr = "rpc:multicall(rabbit_mnesia:cluster_nodes(running), rabbit_alarm, get_alarms, [], 10000).";
        for i in self.askable_members() {
            if let Ok(out) = self.ctl(i, &["eval", expr]).await {
                return out.contains("memory");
            }
        }
        false
    }

    /// Closes every client connection on member i (all vhosts: `close_all_connections --global`).
    pub async fn close_all_connections(&self, i: usize) -> Result<(), String> {
        self.ctl(
            i,
            &[
                "close_all_connections",
                "--global",
                "closed by briefrail-faults",
            ],
        )
        .await
        .map(|_| ())
    }
}
