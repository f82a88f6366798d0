//! `briefrail demo`: the seed article's three scenes, played with the real machinery on a
//! database of its own, narrated as a timeline. Exits 0 only if every guarantee held.
//!
//! 1. Three PDFs uploaded to a new matter: the events coalesce into one build whose Brief
//!    lists all three.
//! 2. Two lawyers click Regenerate in the same second during a build: one follow-up, not two.
//! 3. The zombie: worker-a freezes mid-build past its lease (no heartbeats, like a long
//!    stop-the-world pause); worker-b's sweeper takes the matter with token n+1 and lands;
//!    worker-a wakes, tries to write, and the ledger refuses it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::LocalBoxFuture;
use tokio::sync::watch;
use uuid::Uuid;

use crate::actors::Nudge;
use crate::builders::brief::BriefBuilder;
use crate::builders::{BuildContext, Builder};
use crate::config::{Settings, TransportKind};
use crate::db::{self, Pool, admin};
use crate::error::{Error, Result};
use crate::ledger::facts::{self, NewDocument};
use crate::ledger::transitions as t;
use crate::ledger::{Frame, RunOutcome, RunRow, RunStatus, reads};
use crate::metrics::Metrics;
use crate::node::Node;
use crate::secret::SecretUrl;

/// The Brief builder, slowed to the pace of a model panel, and able to freeze once on demand.
struct DemoBuilder {
    pace: Duration,
    /// While true, the next build to start freezes until it turns false.
    freeze: watch::Receiver<bool>,
    frozen: watch::Sender<Option<i64>>,
}

impl Builder for DemoBuilder {
    fn build<'a>(&'a self, ctx: &'a BuildContext) -> LocalBoxFuture<'a, Result<Frame>> {
        async move {
            if *self.freeze.borrow() {
                let _ = self.frozen.send(Some(ctx.token));
                let mut f = self.freeze.clone();
                let _ = f.wait_for(|on| !*on).await;
                // It wakes with its work done (it froze at the end) and writes at once.
            } else {
                tokio::time::sleep(self.pace).await;
            }
            BriefBuilder.build(ctx).await
        }
        .boxed_local()
    }
}

struct Timeline {
    start: Instant,
    failures: Vec<String>,
}

impl Timeline {
    fn say(&self, what: impl AsRef<str>) {
        println!(
            "  +{:>5.2}s  {}",
            self.start.elapsed().as_secs_f64(),
            what.as_ref()
        );
    }
    fn check(&mut self, ok: bool, what: &str) {
        println!("  {} {what}", if ok { "✓" } else { "✗" });
        if !ok {
            self.failures.push(what.to_owned());
        }
    }
}

async fn runs(pool: &Pool, firm: Uuid, matter: Uuid) -> Result<Vec<RunRow>> {
    let mut c = pool.get().await?;
    let mut r = reads::runs(&mut c, firm, matter, 100).await?;
    r.reverse();
    Ok(r)
}

/// Waits (polling the ledger) until the matter's demand is served and nothing is running.
async fn until_served(pool: &Pool, firm: Uuid, matter: Uuid, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let mut c = pool.get().await?;
        if let Some(j) = reads::job(&mut c, firm, matter).await? {
            if !j.unserved() && j.run_status == RunStatus::Idle {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            return Err(Error::internal(format!(
                "matter {matter} was not served within {limit:?}"
            )));
        }
        drop(c);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn until_running(pool: &Pool, firm: Uuid, matter: Uuid, after_token: i64) -> Result<RunRow> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(r) = runs(pool, firm, matter)
            .await?
            .into_iter()
            .find(|r| r.outcome == RunOutcome::Running && r.token > after_token)
        {
            return Ok(r);
        }
        if Instant::now() > deadline {
            return Err(Error::internal("no build started within 20 s"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the demo. Must be called inside an actix `System`.
pub async fn run(base: &Settings) -> Result<()> {
    let start = Instant::now();
    let mut tl = Timeline {
        start,
        failures: Vec::new(),
    };
    // A database of its own, fresh every time: `<database.url's name>_demo`.
    let name = format!("{}_demo", admin::split_url(base.database.url.expose())?.0);
    let url = admin::with_database(base.database.url.expose(), &name)?;
    admin::drop_database(&url, &name).await?;
    admin::create_database_if_missing(&url).await?;
    db::migrate::run_pending(&url).await?;

    let mut s = base.clone();
    s.database.url = SecretUrl::new(url.clone());
    s.database.pool_size = 12;
    s.lease.seconds = 2.0;
    s.lease.heartbeat_seconds = Some(0.5);
    s.sweeper.interval_seconds = 0.5;
    s.trigger.debounce_ms = 300;
    s.trigger.max_wait_ms = 1500;
    s.relay.poll_ms = 250;
    s.transport.prefix = format!(
        "briefrail-demo-{}",
        &Uuid::new_v4().simple().to_string()[..8]
    );
    #[cfg(feature = "amqp")]
    let broker_up = matches!(
        tokio::time::timeout(
            Duration::from_secs(3),
            crate::transport::amqp::connect(&s.transport.amqp_url, "briefrail-demo-probe")
        )
        .await,
        Ok(Ok(_))
    );
    #[cfg(not(feature = "amqp"))]
    let broker_up = false;
    s.transport.kind = if broker_up {
        TransportKind::Amqp
    } else {
        TransportKind::Postgres
    };
    println!(
        "briefrail demo: database {name} (fresh), lease 2 s, heartbeat 0.5 s, sweep every 0.5 s"
    );
    if broker_up {
        println!("transport: RabbitMQ at {}", s.transport.amqp_url);
    } else {
        println!(
            "notice: no RabbitMQ answered at {}; using the postgres transport (LISTEN/NOTIFY)",
            s.transport.amqp_url
        );
    }
    let pool = db::connect(&db::PoolOptions::from(&s.database)).await?;
    let metrics = Arc::new(Metrics::default());

    // worker-b: healthy, fed by the transport. worker-a: freezes when told to.
    let (_never, calm) = watch::channel(false);
    let (freeze_tx, freeze) = watch::channel(false);
    let (frozen_tx, mut frozen) = watch::channel(None);
    let (idle_tx, _) = watch::channel(None);
    let pace = Duration::from_millis(1200);
    let mut sb = s.clone();
    sb.node.id = "worker-b".into();
    let b = Node::builder(
        Arc::new(sb),
        Arc::new(DemoBuilder {
            pace,
            freeze: calm,
            frozen: idle_tx,
        }),
    )
    .pool(pool.clone())
    .metrics(metrics.clone())
    .start()
    .await?;
    let mut sa = s.clone();
    sa.node.id = "worker-a".into();
    // A frozen process sends no heartbeats: worker-a's would come only every 60 s, so its
    // claim's own 2 s deadline (written on the row) passes and worker-b's sweeper takes it.
    sa.lease.seconds = 2.0;
    sa.lease.heartbeat_seconds = Some(60.0);
    sa.trigger.debounce_ms = 0;
    // worker-a hears nothing from the bus and sweeps nothing: it is nudged by hand below.
    let a = Node::builder(
        Arc::new(sa),
        Arc::new(DemoBuilder {
            pace,
            freeze,
            frozen: frozen_tx,
        }),
    )
    .pool(pool.clone())
    .without_transport()
    .without_periodic_sweeper()
    .start()
    .await?;

    let firm = Uuid::new_v4();
    let matter = Uuid::new_v4();
    let mut c = pool.get().await?;

    // Scene 1.
    println!("\nScene 1: counsel uploads three PDFs and walks away");
    facts::create_matter(&mut c, firm, matter, "Acme Corp. v. Globex LLC").await?;
    tl.say("fact matter.created      Acme Corp. v. Globex LLC");
    let docs = [
        (
            "Supply Agreement",
            "2024-01-10",
            "Acme and Globex agree that Globex delivers 400 widgets by March 1. Time is of the essence.",
        ),
        (
            "Invoice 7",
            "2024-05-02",
            "Globex invoices Acme for 400 widgets delivered May 1. Payment is due in 30 days.",
        ),
        (
            "Complaint",
            "2025-01-15",
            "Acme alleges that Globex breached the agreement by delivering two months late. Acme seeks damages.",
        ),
    ];
    for (title, dated, body) in docs {
        facts::add_document(
            &mut c,
            NewDocument {
                document_id: Uuid::new_v4(),
                firm_id: firm,
                matter_id: matter,
                title: title.into(),
                dated: dated.parse().ok(),
                body: body.into(),
            },
        )
        .await?;
        tl.say(format!("fact document.uploaded   {title} ({dated}.pdf)"));
    }
    until_served(&pool, firm, matter, Duration::from_secs(20)).await?;
    let scene1 = runs(&pool, firm, matter).await?;
    for r in &scene1 {
        tl.say(format!(
            "build token {} {} on {} serving {} event(s)",
            r.token,
            r.outcome,
            r.node_id,
            r.event_ids.len()
        ));
    }
    let brief = reads::latest_frame(&mut c, firm, matter)
        .await?
        .map(|f| f.body)
        .unwrap_or_default();
    let listed: Vec<String> = brief["chronology"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d["title"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    tl.say(format!("the Brief lists: {}", listed.join(" → ")));
    tl.check(
        scene1.len() == 1,
        &format!("4 facts, {} build (expected 1)", scene1.len()),
    );
    tl.check(
        listed.len() == 3,
        "the Brief lists all three documents, in the order of their dates",
    );

    // Scene 2.
    println!("\nScene 2: two lawyers click Regenerate in the same second, during a build");
    let before = scene1.iter().map(|r| r.token).max().unwrap_or(0);
    facts::request_brief(&mut c, firm, matter).await?;
    tl.say("fact brief.requested     (a paralegal asks for a fresh Brief)");
    let running = until_running(&pool, firm, matter, before).await?;
    tl.say(format!(
        "build token {} running on {}",
        running.token, running.node_id
    ));
    let (p1, p2) = (pool.clone(), pool.clone());
    let (r1, r2) = tokio::join!(
        async move { facts::request_brief(&mut *p1.get().await?, firm, matter).await },
        async move { facts::request_brief(&mut *p2.get().await?, firm, matter).await },
    );
    r1?;
    r2?;
    tl.say("fact brief.requested ×2  (two lawyers click Regenerate in the same second)");
    until_served(&pool, firm, matter, Duration::from_secs(20)).await?;
    let scene2: Vec<RunRow> = runs(&pool, firm, matter)
        .await?
        .into_iter()
        .filter(|r| r.token > before)
        .collect();
    for r in &scene2 {
        tl.say(format!(
            "build token {} {} on {}",
            r.token, r.outcome, r.node_id
        ));
    }
    tl.check(
        scene2.len() == 2,
        &format!(
            "the running build and {} follow-up (expected exactly 1)",
            scene2.len().saturating_sub(1)
        ),
    );

    // Scene 3.
    println!("\nScene 3: the zombie");
    let _ = freeze_tx.send(true);
    t::demand(&mut c, firm, matter).await?;
    a.nudge(Nudge::matter(firm, matter));
    tl.say("a Regenerate click reaches worker-a");
    let _ = frozen.wait_for(|t| t.is_some()).await;
    let zombie_token = frozen.borrow().unwrap_or_default();
    tl.say(format!("worker-a claims token {zombie_token} and freezes mid-build: no heartbeats (a long GC pause)"));
    let taking_over = loop {
        let rs = runs(&pool, firm, matter).await?;
        if let Some(r) = rs
            .iter()
            .find(|r| r.token > zombie_token && r.outcome == RunOutcome::Running)
        {
            break r.clone();
        }
        if start.elapsed() > Duration::from_secs(50) {
            return Err(Error::internal("worker-b never took the matter over"));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    tl.say(format!(
        "worker-b's sweeper expired token {zombie_token}'s lease; worker-b claimed token {} and builds",
        taking_over.token
    ));
    let _ = freeze_tx.send(false);
    tl.say(format!(
        "worker-a wakes while worker-b builds, and writes its stale frame with token {zombie_token}..."
    ));
    let zombie_run = loop {
        let rs = runs(&pool, firm, matter).await?;
        if let Some(r) = rs
            .iter()
            .find(|r| r.token == zombie_token && r.outcome == RunOutcome::Fenced)
        {
            break r.clone();
        }
        if start.elapsed() > Duration::from_secs(55) {
            return Err(Error::internal("worker-a's write was never settled"));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    tl.say(format!(
        "...refused at the ledger: run {} is {} ({})",
        zombie_token,
        zombie_run.outcome,
        zombie_run.error.as_deref().unwrap_or("")
    ));
    let successor = loop {
        let rs = runs(&pool, firm, matter).await?;
        if let Some(r) = rs
            .iter()
            .find(|r| r.run_id == taking_over.run_id && r.outcome == RunOutcome::Landed)
        {
            break r.clone();
        }
        if start.elapsed() > Duration::from_secs(58) {
            return Err(Error::internal("worker-b's build never landed"));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    tl.say(format!("worker-b lands token {}", successor.token));
    tl.check(
        zombie_run
            .finished_at
            .is_some_and(|t| t < successor.finished_at.unwrap_or(t)),
        "the zombie wrote while the successor's claim was running",
    );
    let stale = reads::frame_meta(&mut c, firm, matter, zombie_token).await?;
    tl.check(
        successor.token == zombie_token + 1,
        &format!(
            "the successor's token is n+1 ({} = {} + 1)",
            successor.token, zombie_token
        ),
    );
    tl.check(stale.is_none(), "no frame with the zombie's token exists");

    // The ledger as it stands.
    until_served(&pool, firm, matter, Duration::from_secs(10)).await?;
    let job = reads::job(&mut c, firm, matter)
        .await?
        .ok_or_else(|| Error::NotFound("job row".into()))?;
    let all = runs(&pool, firm, matter).await?;
    let frames = reads::frames(&mut c, firm, matter).await?;
    println!("\nThe job row (ops.matter_frame_jobs):");
    println!(
        "  run_status {} | requested {} | claimed {} | landed {} | rebuild_needed {}",
        job.run_status,
        job.requested_generation,
        job.claimed_generation,
        job.landed_generation,
        job.rebuild_needed
    );
    println!("\nThe runs (ops.matter_frame_runs):");
    println!(
        "  {:>5}  {:<13} {:<9} {:>6}  error",
        "token", "outcome", "node", "frame"
    );
    for r in &all {
        let has_frame = frames.iter().any(|f| f.generation == r.token);
        println!(
            "  {:>5}  {:<13} {:<9} {:>6}  {}",
            r.token,
            r.outcome,
            r.node_id,
            if has_frame { "yes" } else { "-" },
            r.error.as_deref().unwrap_or("")
        );
    }
    println!("\nGuarantees:");
    let landed_ok = frames.iter().all(|f| {
        all.iter()
            .any(|r| r.token == f.generation && r.outcome == RunOutcome::Landed)
    });
    tl.check(
        landed_ok,
        "every frame's generation is the token of a landed run",
    );
    tl.check(
        !all.iter().any(|r| {
            (r.outcome == RunOutcome::Fenced || r.outcome == RunOutcome::LeaseExpired)
                && frames.iter().any(|f| f.generation == r.token)
        }),
        "no fenced or expired run has a frame",
    );
    tl.check(
        frames.windows(2).all(|w| w[0].generation < w[1].generation),
        "frames landed in increasing token order",
    );
    tl.check(
        !job.unserved(),
        "every demand is served (landed_generation = requested_generation)",
    );

    b.stop_intake().await;
    a.shutdown_within(Duration::from_secs(1)).await;
    b.shutdown_within(Duration::from_secs(1)).await;
    #[cfg(feature = "amqp")]
    if broker_up {
        crate::transport::amqp::Topology::new(&s.transport.prefix)
            .delete(&s.transport.amqp_url)
            .await;
    }
    println!("\ndemo finished in {:.1} s", start.elapsed().as_secs_f64());
    if tl.failures.is_empty() {
        Ok(())
    } else {
        Err(Error::internal(format!(
            "guarantee broken: {}",
            tl.failures.join("; ")
        )))
    }
}
