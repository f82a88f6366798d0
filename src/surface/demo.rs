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
use crate::db::{self, Conn, Pool, admin};
use crate::error::{Error, Result};
use crate::ledger::facts::{self, NewDocument};
use crate::ledger::transitions as t;
use crate::ledger::{Frame, FrameMeta, JobRow, RunOutcome, RunRow, RunStatus, reads};
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
        if let Some(j) = reads::job(&mut c, firm, matter).await?
            && !j.unserved()
            && j.run_status == RunStatus::Idle
        {
            return Ok(());
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
    let mut demo = Demo::set_up(base, start).await?;
    let scene1 = demo.scene_1().await?;
    demo.scene_2(&scene1).await?;
    demo.scene_3().await?;
    let ledger = demo.read_ledger().await?;
    print_ledger(&ledger);
    demo.check_guarantees(&ledger);
    demo.tear_down().await;
    println!("\ndemo finished in {:.1} s", start.elapsed().as_secs_f64());
    demo.verdict()
}

/// The three documents of scene 1: title, the date each bears, and its text.
const DOCUMENTS: [(&str, &str, &str); 3] = [
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

/// What the scenes share: the demo's settings and pool (with one connection held throughout),
/// the two workers and the levers that freeze worker-a, the narrated timeline, and the one
/// matter every scene plays on.
struct Demo {
    settings: Settings,
    /// Whether RabbitMQ carries the events (else the postgres transport does).
    broker_up: bool,
    pool: Pool,
    conn: Conn<'static>,
    /// worker-a: hears nothing from the bus, sweeps nothing, freezes when told to.
    a: Node,
    /// worker-b: healthy, fed by the transport, sweeping.
    b: Node,
    freezer: Freezer,
    tl: Timeline,
    firm: Uuid,
    matter: Uuid,
}

/// The levers on worker-a's builder.
struct Freezer {
    /// While true, worker-a's next build freezes.
    freeze: watch::Sender<bool>,
    /// The token worker-a froze with, once it has.
    frozen: watch::Receiver<Option<i64>>,
    /// worker-b's switch, kept alive and never thrown.
    _calm: watch::Sender<bool>,
}

/// What the ledger holds once the scenes have played.
struct Ledger {
    job: JobRow,
    runs: Vec<RunRow>,
    frames: Vec<FrameMeta>,
}

/// Creates `<database.url's name>_demo` afresh (dropping any left over) and migrates it;
/// returns its name and URL.
async fn fresh_database(base: &Settings) -> Result<(String, String)> {
    let name = format!("{}_demo", admin::split_url(base.database.url.expose())?.0);
    let url = admin::with_database(base.database.url.expose(), &name)?;
    admin::drop_database(&url, &name).await?;
    admin::create_database_if_missing(&url).await?;
    db::migrate::run_pending(&url).await?;
    Ok((name, url))
}

/// `base` pointed at the demo's database, with lease, sweep, debounce and relay short enough
/// for the scenes to play in seconds, and a broker prefix of its own.
fn demo_settings(base: &Settings, url: String) -> Settings {
    let mut s = base.clone();
    s.database.url = SecretUrl::new(url);
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
    s
}

/// Whether a RabbitMQ answers at `transport.amqp_url` within 3 s (never, without `amqp`).
async fn broker_answers(s: &Settings) -> bool {
    #[cfg(feature = "amqp")]
    {
        matches!(
            tokio::time::timeout(
                Duration::from_secs(3),
                crate::transport::amqp::connect(&s.transport.amqp_url, "briefrail-demo-probe")
            )
            .await,
            Ok(Ok(_))
        )
    }
    #[cfg(not(feature = "amqp"))]
    {
        let _ = s;
        false
    }
}

/// Deletes the demo's exchanges and queues, if RabbitMQ carried the events.
async fn delete_topology(s: &Settings, broker_up: bool) {
    #[cfg(feature = "amqp")]
    if broker_up {
        crate::transport::amqp::Topology::new(&s.transport.prefix)
            .delete(&s.transport.amqp_url)
            .await;
    }
    #[cfg(not(feature = "amqp"))]
    let _ = (s, broker_up);
}

/// Prints the header: the database, the timings, and which transport carries the events.
fn announce(name: &str, s: &Settings, broker_up: bool) {
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
}

/// Starts worker-b: the demo's settings as they are, fed by the transport, sweeping.
async fn start_worker_b(s: &Settings, pool: &Pool, builder: DemoBuilder) -> Result<Node> {
    let metrics = Arc::new(Metrics::default());
    let mut sb = s.clone();
    sb.node.id = "worker-b".into();
    Node::builder(Arc::new(sb), Arc::new(builder))
        .pool(pool.clone())
        .metrics(metrics)
        .start()
        .await
}

/// Starts worker-a: no transport, no periodic sweeper (it is nudged by hand), and heartbeats
/// too rare to keep its 2 s lease, like a frozen process.
async fn start_worker_a(s: &Settings, pool: &Pool, builder: DemoBuilder) -> Result<Node> {
    let mut sa = s.clone();
    sa.node.id = "worker-a".into();
    // A frozen process sends no heartbeats: worker-a's would come only every 60 s, so its
    // claim's own 2 s deadline (written on the row) passes and worker-b's sweeper takes it.
    sa.lease.seconds = 2.0;
    sa.lease.heartbeat_seconds = Some(60.0);
    sa.trigger.debounce_ms = 0;
    // worker-a hears nothing from the bus and sweeps nothing: it is nudged by hand below.
    Node::builder(Arc::new(sa), Arc::new(builder))
        .pool(pool.clone())
        .without_transport()
        .without_periodic_sweeper()
        .start()
        .await
}

/// Prints the job row and the runs table, each run marked with whether it has a frame.
fn print_ledger(ledger: &Ledger) {
    let job = &ledger.job;
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
    for r in &ledger.runs {
        let has_frame = ledger.frames.iter().any(|f| f.generation == r.token);
        println!(
            "  {:>5}  {:<13} {:<9} {:>6}  {}",
            r.token,
            r.outcome,
            r.node_id,
            if has_frame { "yes" } else { "-" },
            r.error.as_deref().unwrap_or("")
        );
    }
}

impl Demo {
    /// A fresh database, the demo's settings, both workers started, and a new matter's ids.
    async fn set_up(base: &Settings, start: Instant) -> Result<Self> {
        let tl = Timeline {
            start,
            failures: Vec::new(),
        };
        let (name, url) = fresh_database(base).await?;
        let mut settings = demo_settings(base, url);
        let broker_up = broker_answers(&settings).await;
        settings.transport.kind = if broker_up {
            TransportKind::Amqp
        } else {
            TransportKind::Postgres
        };
        announce(&name, &settings, broker_up);
        let pool = db::connect(&db::PoolOptions::from(&settings.database)).await?;

        // worker-b: healthy, fed by the transport. worker-a: freezes when told to.
        let (calm_tx, calm) = watch::channel(false);
        let (freeze_tx, freeze) = watch::channel(false);
        let (frozen_tx, frozen) = watch::channel(None);
        let (idle_tx, _) = watch::channel(None);
        let pace = Duration::from_millis(1200);
        let b = start_worker_b(
            &settings,
            &pool,
            DemoBuilder {
                pace,
                freeze: calm,
                frozen: idle_tx,
            },
        )
        .await?;
        let a = start_worker_a(
            &settings,
            &pool,
            DemoBuilder {
                pace,
                freeze,
                frozen: frozen_tx,
            },
        )
        .await?;

        let firm = Uuid::new_v4();
        let matter = Uuid::new_v4();
        let conn = pool.get_owned().await?;
        Ok(Self {
            settings,
            broker_up,
            pool,
            conn,
            a,
            b,
            freezer: Freezer {
                freeze: freeze_tx,
                frozen,
                _calm: calm_tx,
            },
            tl,
            firm,
            matter,
        })
    }

    /// The matter's runs, oldest first.
    async fn runs(&self) -> Result<Vec<RunRow>> {
        runs(&self.pool, self.firm, self.matter).await
    }

    /// Waits until the matter's demand is served and nothing is running.
    async fn until_served(&self, limit: Duration) -> Result<()> {
        until_served(&self.pool, self.firm, self.matter, limit).await
    }

    /// Polls the runs until one matches `found`; fails with `missing` once the demo has been
    /// running longer than `deadline_s` seconds.
    async fn until_run(
        &self,
        found: impl Fn(&RunRow) -> bool,
        deadline_s: u64,
        missing: &'static str,
    ) -> Result<RunRow> {
        loop {
            if let Some(r) = self.runs().await?.iter().find(|r| found(r)) {
                return Ok(r.clone());
            }
            if self.tl.start.elapsed() > Duration::from_secs(deadline_s) {
                return Err(Error::internal(missing));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Scene 1: a new matter and three documents, recorded in quick succession, coalesce into
    /// one build whose Brief lists all three. Returns the scene's runs.
    async fn scene_1(&mut self) -> Result<Vec<RunRow>> {
        println!("\nScene 1: counsel uploads three PDFs and walks away");
        facts::create_matter(
            &mut self.conn,
            self.firm,
            self.matter,
            "Acme Corp. v. Globex LLC",
        )
        .await?;
        self.tl
            .say("fact matter.created      Acme Corp. v. Globex LLC");
        self.upload_documents().await?;
        self.until_served(Duration::from_secs(20)).await?;
        let scene1 = self.runs().await?;
        for r in &scene1 {
            self.tl.say(format!(
                "build token {} {} on {} serving {} event(s)",
                r.token,
                r.outcome,
                r.node_id,
                r.event_ids.len()
            ));
        }
        let listed = self.brief_titles().await?;
        self.tl
            .say(format!("the Brief lists: {}", listed.join(" → ")));
        self.tl.check(
            scene1.len() == 1,
            &format!("4 facts, {} build (expected 1)", scene1.len()),
        );
        self.tl.check(
            listed.len() == 3,
            "the Brief lists all three documents, in the order of their dates",
        );
        Ok(scene1)
    }

    /// Records the three [`DOCUMENTS`] on the matter, one `document.uploaded` fact each.
    async fn upload_documents(&mut self) -> Result<()> {
        for (title, dated, body) in DOCUMENTS {
            facts::add_document(
                &mut self.conn,
                NewDocument {
                    document_id: Uuid::new_v4(),
                    firm_id: self.firm,
                    matter_id: self.matter,
                    title: title.into(),
                    dated: dated.parse().ok(),
                    body: body.into(),
                },
            )
            .await?;
            self.tl
                .say(format!("fact document.uploaded   {title} ({dated}.pdf)"));
        }
        Ok(())
    }

    /// The titles in the latest Brief's chronology, in its order (none without a Brief).
    async fn brief_titles(&mut self) -> Result<Vec<String>> {
        let brief = reads::latest_frame(&mut self.conn, self.firm, self.matter)
            .await?
            .map(|f| f.body)
            .unwrap_or_default();
        Ok(brief["chronology"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|d| d["title"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Scene 2: two requests in the same second, during a build, make one follow-up build,
    /// not two. `scene1` holds the runs before it.
    async fn scene_2(&mut self, scene1: &[RunRow]) -> Result<()> {
        println!("\nScene 2: two lawyers click Regenerate in the same second, during a build");
        let before = scene1.iter().map(|r| r.token).max().unwrap_or(0);
        facts::request_brief(&mut self.conn, self.firm, self.matter).await?;
        self.tl
            .say("fact brief.requested     (a paralegal asks for a fresh Brief)");
        let running = until_running(&self.pool, self.firm, self.matter, before).await?;
        self.tl.say(format!(
            "build token {} running on {}",
            running.token, running.node_id
        ));
        self.request_twice_at_once().await?;
        self.tl
            .say("fact brief.requested ×2  (two lawyers click Regenerate in the same second)");
        self.until_served(Duration::from_secs(20)).await?;
        let scene2: Vec<RunRow> = self
            .runs()
            .await?
            .into_iter()
            .filter(|r| r.token > before)
            .collect();
        for r in &scene2 {
            self.tl.say(format!(
                "build token {} {} on {}",
                r.token, r.outcome, r.node_id
            ));
        }
        self.tl.check(
            scene2.len() == 2,
            &format!(
                "the running build and {} follow-up (expected exactly 1)",
                scene2.len().saturating_sub(1)
            ),
        );
        Ok(())
    }

    /// Records two `brief.requested` facts concurrently, each on a connection of its own.
    async fn request_twice_at_once(&self) -> Result<()> {
        let (firm, matter) = (self.firm, self.matter);
        let (p1, p2) = (self.pool.clone(), self.pool.clone());
        let (r1, r2) = tokio::join!(
            async move { facts::request_brief(&mut *p1.get().await?, firm, matter).await },
            async move { facts::request_brief(&mut *p2.get().await?, firm, matter).await },
        );
        r1?;
        r2?;
        Ok(())
    }

    /// Scene 3: worker-a freezes past its lease, worker-b takes the matter over with token
    /// n+1, worker-a wakes and writes, and the ledger refuses the stale write.
    async fn scene_3(&mut self) -> Result<()> {
        println!("\nScene 3: the zombie");
        let zombie_token = self.freeze_worker_a().await?;
        let taking_over = self
            .until_run(
                |r| r.token > zombie_token && r.outcome == RunOutcome::Running,
                50,
                "worker-b never took the matter over",
            )
            .await?;
        self.tl.say(format!(
            "worker-b's sweeper expired token {zombie_token}'s lease; worker-b claimed token {} and builds",
            taking_over.token
        ));
        let _ = self.freezer.freeze.send(false);
        self.tl.say(format!(
            "worker-a wakes while worker-b builds, and writes its stale frame with token {zombie_token}..."
        ));
        let zombie_run = self
            .until_run(
                |r| r.token == zombie_token && r.outcome == RunOutcome::Fenced,
                55,
                "worker-a's write was never settled",
            )
            .await?;
        self.tl.say(format!(
            "...refused at the ledger: run {} is {} ({})",
            zombie_token,
            zombie_run.outcome,
            zombie_run.error.as_deref().unwrap_or("")
        ));
        let successor = self
            .until_run(
                |r| r.run_id == taking_over.run_id && r.outcome == RunOutcome::Landed,
                58,
                "worker-b's build never landed",
            )
            .await?;
        self.tl
            .say(format!("worker-b lands token {}", successor.token));
        self.check_fencing(&zombie_run, &successor).await
    }

    /// Arms the freeze, demands a build and nudges worker-a, which claims it and freezes;
    /// returns the token it froze with.
    async fn freeze_worker_a(&mut self) -> Result<i64> {
        let _ = self.freezer.freeze.send(true);
        t::demand(&mut self.conn, self.firm, self.matter).await?;
        self.a.nudge(Nudge::matter(self.firm, self.matter));
        self.tl.say("a Regenerate click reaches worker-a");
        let _ = self.freezer.frozen.wait_for(|t| t.is_some()).await;
        let zombie_token = self.freezer.frozen.borrow().unwrap_or_default();
        self.tl.say(format!("worker-a claims token {zombie_token} and freezes mid-build: no heartbeats (a long GC pause)"));
        Ok(zombie_token)
    }

    /// Scene 3's guarantees: the zombie wrote during the successor's claim, the successor's
    /// token is n+1, and no frame carries the zombie's token.
    async fn check_fencing(&mut self, zombie_run: &RunRow, successor: &RunRow) -> Result<()> {
        let zombie_token = zombie_run.token;
        self.tl.check(
            zombie_run
                .finished_at
                .is_some_and(|t| t < successor.finished_at.unwrap_or(t)),
            "the zombie wrote while the successor's claim was running",
        );
        let stale = reads::frame_meta(&mut self.conn, self.firm, self.matter, zombie_token).await?;
        self.tl.check(
            successor.token == zombie_token + 1,
            &format!(
                "the successor's token is n+1 ({} = {} + 1)",
                successor.token, zombie_token
            ),
        );
        self.tl
            .check(stale.is_none(), "no frame with the zombie's token exists");
        Ok(())
    }

    /// Once the matter is served again: its job row, every run and every frame.
    async fn read_ledger(&mut self) -> Result<Ledger> {
        self.until_served(Duration::from_secs(10)).await?;
        let job = reads::job(&mut self.conn, self.firm, self.matter)
            .await?
            .ok_or_else(|| Error::NotFound("job row".into()))?;
        let runs = self.runs().await?;
        let frames = reads::frames(&mut self.conn, self.firm, self.matter).await?;
        Ok(Ledger { job, runs, frames })
    }

    /// The guarantees over the whole ledger: frames only from landed runs, none from fenced
    /// or expired ones, in increasing token order, and every demand served.
    fn check_guarantees(&mut self, ledger: &Ledger) {
        let Ledger { job, runs, frames } = ledger;
        println!("\nGuarantees:");
        let landed_ok = frames.iter().all(|f| {
            runs.iter()
                .any(|r| r.token == f.generation && r.outcome == RunOutcome::Landed)
        });
        self.tl.check(
            landed_ok,
            "every frame's generation is the token of a landed run",
        );
        self.tl.check(
            !runs.iter().any(|r| {
                (r.outcome == RunOutcome::Fenced || r.outcome == RunOutcome::LeaseExpired)
                    && frames.iter().any(|f| f.generation == r.token)
            }),
            "no fenced or expired run has a frame",
        );
        self.tl.check(
            frames.windows(2).all(|w| w[0].generation < w[1].generation),
            "frames landed in increasing token order",
        );
        self.tl.check(
            !job.unserved(),
            "every demand is served (landed_generation = requested_generation)",
        );
    }

    /// Stops both workers and deletes the demo's exchanges and queues from the broker.
    async fn tear_down(&self) {
        self.b.stop_intake().await;
        self.a.shutdown_within(Duration::from_secs(1)).await;
        self.b.shutdown_within(Duration::from_secs(1)).await;
        delete_topology(&self.settings, self.broker_up).await;
    }

    /// Ok only if every guarantee held; else an error naming the broken ones.
    fn verdict(&self) -> Result<()> {
        if self.tl.failures.is_empty() {
            Ok(())
        } else {
            Err(Error::internal(format!(
                "guarantee broken: {}",
                self.tl.failures.join("; ")
            )))
        }
    }
}
