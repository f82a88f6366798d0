//! `briefrail`'s command line. Parsing and dispatch only: every command is a call into the
//! library (the operator's reads and actions print through `cli/operator.rs`). Exit codes: 0 success, 2 bad arguments or config, 1 runtime failure, each failure
//! with a one-line reason on stderr.

use std::path::PathBuf;

use chrono::NaiveDate;
use clap::{Args, Parser, Subcommand};
use diesel_async::AsyncPgConnection;
use uuid::Uuid;

use crate::config::Settings;
use crate::db;
use crate::error::{Error, Result};
use crate::ledger::matters::{self, MatterState};
use crate::ledger::{DemandClass, facts, reads};

mod firms;
mod operator;

#[derive(Debug, Parser)]
#[command(
    name = "briefrail",
    version,
    about = "Keeps every matter's Brief current, fenced by tokens in Postgres"
)]
pub struct Cli {
    /// A TOML file layered over the built-in defaults (environment BRIEFRAIL__SECTION__KEY wins over both).
    #[arg(
        short = 'c',
        long,
        global = true,
        value_name = "FILE",
        env = "BRIEFRAIL_CONFIG"
    )]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the database if it does not exist and apply pending migrations (idempotent).
    Migrate {
        /// Only list the migrations, applied (and when) or pending, and any version a newer
        /// release applied; creates and applies nothing.
        #[arg(long)]
        status: bool,
    },
    /// Run a node: claim, build and commit Briefs until SIGTERM or Ctrl-C.
    Run,
    /// Play the seed article's three scenes on a fresh database of its own, narrated.
    Demo,
    /// Matters of the record.
    #[command(subcommand)]
    Matter(MatterCommand),
    /// Documents of a matter.
    #[command(subcommand)]
    Document(DocumentCommand),
    /// Ask for fresh Briefs.
    #[command(subcommand)]
    Brief(BriefCommand),
    /// The transactional outbox.
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Messages the trigger refused: list, replay through the inbox, discard.
    #[command(subcommand, name = "dead-letters")]
    DeadLetters(DeadLettersCommand),
    /// Firms: names, weights (their share of scarce build slots), pause and resume, and what
    /// each has waiting.
    #[command(subcommand)]
    Firm(FirmCommand),
    /// The whole rail: pause it (demands are recorded and wait) or resume it.
    #[command(subcommand)]
    Rail(RailCommand),
    /// Every node that ran against this ledger: version, start, last seen, builds in flight,
    /// alive or gone.
    Nodes {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Ask the node on `http.bind` whether it is ready (`GET /readyz`; `--live`: only alive,
    /// `GET /healthz`). Exit 0 when it answers 200, 1 otherwise (also for a bad config: Docker
    /// reserves 2). For container health checks: the image has no curl.
    Healthcheck {
        /// Only ask whether the process answers (`/healthz`), not whether it is ready.
        #[arg(long)]
        live: bool,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
        timeout: f64,
    },
    /// Show a matter's state, job row, unserved demand, recent runs and latest frame.
    Status {
        #[command(flatten)]
        matter: MatterArgs,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How many recent runs to show.
        #[arg(long, default_value_t = 10)]
        runs: i64,
    },
}

#[derive(Debug, Args)]
pub struct MatterArgs {
    /// The firm the matter belongs to (its id).
    #[arg(long, value_name = "UUID")]
    pub firm: Uuid,
    /// The matter (its id).
    #[arg(long, value_name = "UUID")]
    pub matter: Uuid,
}

#[derive(Debug, Subcommand)]
pub enum MatterCommand {
    /// Create a matter (records matter.created).
    Create {
        #[command(flatten)]
        matter: MatterArgs,
        /// The matter's title, as the console and `matter list` show it.
        #[arg(long)]
        title: String,
    },
    /// Archive a matter (records matter.archived); its Brief is no longer rebuilt.
    Archive {
        #[command(flatten)]
        matter: MatterArgs,
    },
    /// A firm's matters, by title, with their state.
    List {
        /// The firm whose matters to list (its id).
        #[arg(long, value_name = "UUID")]
        firm: Uuid,
        /// Only matters in this state.
        #[arg(long, value_name = "STATE", value_parser = parse_state)]
        state: Option<MatterState>,
        /// Only matters whose title contains this text (case-insensitive).
        #[arg(long, value_name = "TEXT")]
        query: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Retry a matter whose retries ran out (or that is failing): records a new demand, which
    /// restarts its retries.
    Retry {
        #[command(flatten)]
        matter: MatterArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum DeadLettersCommand {
    /// The open dead letters, newest first (with --all, the resolved ones too).
    List {
        /// The resolved (replayed or discarded) dead letters too, not only the open ones.
        #[arg(long)]
        all: bool,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Apply a dead letter through the inbox again; refused again, it stays open.
    Replay {
        /// The dead letter's id, as `dead-letters list` shows it.
        #[arg(value_name = "ID")]
        id: Uuid,
    },
    /// Mark a dead letter handled without applying it.
    Discard {
        /// The dead letter's id, as `dead-letters list` shows it.
        #[arg(value_name = "ID")]
        id: Uuid,
    },
}

fn parse_state(s: &str) -> std::result::Result<MatterState, String> {
    s.parse::<MatterState>().map_err(|e| match e {
        Error::InvalidInput(m) => m,
        other => other.to_string(),
    })
}

#[derive(Debug, Subcommand)]
pub enum DocumentCommand {
    /// Add a document's text to a matter (records document.uploaded).
    #[command(group(clap::ArgGroup::new("body").required(true).args(["file", "text"])))]
    Add {
        #[command(flatten)]
        matter: MatterArgs,
        /// The document's title.
        #[arg(long)]
        title: String,
        /// The date the document bears (YYYY-MM-DD): its place in the chronology.
        #[arg(long, value_name = "YYYY-MM-DD")]
        dated: Option<NaiveDate>,
        /// A UTF-8 text file holding the document's text (or give --text).
        #[arg(long, value_name = "PATH")]
        file: Option<PathBuf>,
        /// The document's text (or give --file).
        #[arg(long, value_name = "TEXT")]
        text: Option<String>,
        /// The document's id (default: a new one).
        #[arg(long, value_name = "UUID")]
        id: Option<Uuid>,
        /// How urgently its Brief is rebuilt: interactive (a person uploaded it; the default)
        /// or background (an import: served after every firm's interactive demands).
        #[arg(long, value_name = "CLASS", default_value = "interactive")]
        class: DemandClass,
    },
}

#[derive(Debug, Subcommand)]
pub enum FirmCommand {
    /// Every firm the ledger knows, with its weight, pause, unserved matters, builds running
    /// and the age of its oldest unserved interactive demand.
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One firm, as `firm list` shows it.
    Show {
        #[command(flatten)]
        firm: FirmArg,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Name a firm or change its weight.
    Set {
        #[command(flatten)]
        firm: FirmArg,
        /// What operators call the firm (a client's name; unique). An empty name clears it.
        #[arg(long)]
        name: Option<String>,
        /// The firm's share of scarce build slots against other firms' (1 to 1000; default 1).
        #[arg(long, value_name = "N")]
        weight: Option<i32>,
    },
    /// Pause a firm: its demands are recorded and wait; builds already running finish.
    Pause {
        #[command(flatten)]
        firm: FirmArg,
    },
    /// Resume a paused firm: its waiting demands are served in their fair order.
    Resume {
        #[command(flatten)]
        firm: FirmArg,
    },
}

#[derive(Debug, Args)]
pub struct FirmArg {
    /// The firm: its id, or the name `firm set --name` gave it.
    #[arg(long, value_name = "UUID|NAME")]
    pub firm: String,
}

#[derive(Debug, Subcommand)]
pub enum RailCommand {
    /// Pause the whole rail: no demand of any firm is claimed until it is resumed.
    Pause,
    /// Resume the rail.
    Resume,
    /// Whether the rail is paused, the limits toward the builder, and its hold if any.
    Status,
    /// The limits toward the builder, for every node together: show them, or set what is
    /// given (`none` lifts one). Nodes read them within a second.
    Limits(LimitsArgs),
    /// Lift the builder's hold now (it asked the rail to wait: a 429, a 503 with
    /// Retry-After, exit code 75), once the endpoint is known to be back.
    ReleaseBuilder,
}

#[derive(Debug, Args)]
pub struct LimitsArgs {
    /// Builds running at once on every node together (the model endpoint's concurrency).
    #[arg(long, value_name = "N|none", value_parser = parse_limit)]
    pub max_running: Option<Limit>,
    /// Builds started per minute on every node together (the endpoint's rate limit).
    #[arg(long, value_name = "N|none", value_parser = parse_limit)]
    pub starts_per_minute: Option<Limit>,
}

/// A limit as the command line gives it: a count, or `none` for no limit.
#[derive(Debug, Clone, Copy)]
pub struct Limit(pub Option<u32>);

fn parse_limit(s: &str) -> std::result::Result<Limit, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(Limit(None));
    }
    match s.parse::<u32>() {
        Ok(n) if n > 0 => Ok(Limit(Some(n))),
        _ => Err(format!(
            "{s:?} is not a limit: a whole number of at least 1, or none"
        )),
    }
}

#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// Make stranded events (republished to the cap, never consumed) publishable again, once
    /// whatever kept the trigger from consuming them is fixed; the alert then clears.
    RepublishStranded,
}

#[derive(Debug, Subcommand)]
pub enum BriefCommand {
    /// Ask for a fresh Brief (records brief.requested) of one matter, or of every live matter
    /// of a firm with --all.
    Request {
        /// The firm (its id).
        #[arg(long, value_name = "UUID")]
        firm: Uuid,
        /// The matter whose Brief to rebuild (its id); or --all.
        #[arg(
            long,
            value_name = "UUID",
            required_unless_present = "all",
            conflicts_with = "all"
        )]
        matter: Option<Uuid>,
        /// Every live (not archived) matter of the firm, instead of one --matter.
        #[arg(long)]
        all: bool,
        /// interactive or background. Default: interactive for one matter, background with
        /// --all (a bulk request never holds up counsel's uploads).
        #[arg(long, value_name = "CLASS")]
        class: Option<DemandClass>,
    },
    /// Print a matter's current Brief (its latest landed frame) for a person, or as JSON.
    Show {
        #[command(flatten)]
        matter: MatterArgs,
        /// Print the frame's JSON body instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Exit code for an error: 2 when the input (arguments, config, ids) is wrong, 1 otherwise.
pub fn exit_code(e: &Error) -> i32 {
    match e.kind() {
        crate::error::ErrorKind::Input => 2,
        _ => 1,
    }
}

/// Runs a ledger command to completion. `run` and `demo` are dispatched by the binary.
pub async fn execute(command: Command, settings: &Settings) -> Result<()> {
    if let Command::Healthcheck { live, timeout } = command {
        return healthcheck(settings, live, timeout).await;
    }
    let url = settings.database.url.expose().to_owned();
    if let Command::Migrate { status } = command {
        // A refused connection or rejected credentials named as such (a missing database is
        // fine: migrate creates it, `--status` says so).
        db::reach::reach_server(&url, db::reach::TIMEOUT).await?;
        return if status {
            migrate_status(&url).await
        } else {
            migrate(&url).await
        };
    }
    // Name an unreachable database by its cause, and an unmigrated one by its remedy, before
    // a statement fails on a missing relation.
    db::reach::reach(&url, db::reach::TIMEOUT).await?;
    db::migrate::require_current(&url).await?;
    let pool = db::connect(&db::PoolOptions::from(&settings.database).size(2)).await?;
    let mut conn = pool.get().await?;
    match command {
        Command::Migrate { .. } | Command::Healthcheck { .. } => unreachable!("handled above"),
        Command::Run | Command::Demo => {
            return Err(Error::InvalidInput(
                "`run` needs the actor system: call surface::run::run".into(),
            ));
        }
        Command::Matter(MatterCommand::Create { matter, title }) => {
            let event = facts::create_matter(&mut conn, matter.firm, matter.matter, &title).await?;
            println!("matter {} created (event {event})", matter.matter);
        }
        Command::Matter(MatterCommand::Archive { matter }) => {
            let event = facts::archive_matter(&mut conn, matter.firm, matter.matter).await?;
            println!("matter {} archived (event {event})", matter.matter);
        }
        Command::Document(DocumentCommand::Add {
            matter,
            title,
            dated,
            file,
            text,
            id,
            class,
        }) => {
            let body = document_body(file, text)?;
            let doc = facts::NewDocument {
                document_id: id.unwrap_or_else(Uuid::new_v4),
                firm_id: matter.firm,
                matter_id: matter.matter,
                title,
                dated,
                body,
            };
            add_document(&mut conn, doc, class).await?;
        }
        Command::Brief(BriefCommand::Request {
            firm,
            matter,
            all,
            class,
        }) => {
            request_brief(&mut conn, firm, matter, all, class).await?;
        }
        Command::Firm(c) => firms::firm(&mut conn, c).await?,
        Command::Rail(c) => firms::rail(&mut conn, c).await?,
        Command::Brief(BriefCommand::Show { matter, json }) => {
            operator::brief_show(&mut conn, &matter, json).await?;
        }
        Command::Matter(MatterCommand::List {
            firm,
            state,
            query,
            limit,
            json,
        }) => {
            let q = matters::MatterQuery {
                firm_id: Some(firm),
                text: query,
                state,
                limit,
                offset: 0,
            };
            operator::matter_list(&mut conn, &q, settings.retry.max_attempts, json).await?;
        }
        Command::Matter(MatterCommand::Retry { matter }) => {
            let event = matters::retry(
                &mut conn,
                matter.firm,
                matter.matter,
                settings.retry.max_attempts,
            )
            .await?;
            println!(
                "retry recorded for matter {} (event {event}): its retries start again",
                matter.matter
            );
        }
        Command::DeadLetters(c) => operator::dead_letters(&mut conn, c).await?,
        Command::Nodes { json } => operator::nodes(&mut conn, json).await?,
        Command::Outbox(OutboxCommand::RepublishStranded) => {
            republish_stranded(&mut conn).await?;
        }
        Command::Status { matter, json, runs } => {
            status(&mut conn, &matter, json, runs, settings.retry.max_attempts).await?;
        }
    }
    Ok(())
}

/// `healthcheck`: one `GET` on the node at `http.bind`; prints its answer when it is 200.
async fn healthcheck(settings: &Settings, live: bool, timeout: f64) -> Result<()> {
    let timeout = std::time::Duration::try_from_secs_f64(timeout)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| {
            Error::InvalidInput(format!(
                "--timeout {timeout}: must be a positive number of seconds"
            ))
        })?;
    let path = if live { "/healthz" } else { "/readyz" };
    let answer = crate::surface::healthcheck::check(&settings.http.bind, path, timeout).await?;
    println!("healthy: {answer}");
    Ok(())
}

/// `migrate`: creates the database if missing and applies pending migrations, saying which.
async fn migrate(url: &str) -> Result<()> {
    let created = db::admin::create_database_if_missing(url).await?;
    let applied = db::migrate::run_pending(url).await?;
    let name = db::admin::split_url(url)?.0;
    println!(
        "database {name}: {}; {} migration(s) applied",
        if created { "created" } else { "exists" },
        applied.len()
    );
    Ok(())
}

/// `migrate --status`: every migration of this binary, applied (when) or pending, and any
/// version the database has that this binary does not know. Reads only.
async fn migrate_status(url: &str) -> Result<()> {
    let status = db::migrate::status(url).await?;
    let name = db::admin::split_url(url)?.0;
    print!("{}", render_migration_status(&name, &status));
    Ok(())
}

/// The text of `briefrail migrate --status`: a summary line, then one line per migration.
pub fn render_migration_status(database: &str, status: &[db::migrate::MigrationStatus]) -> String {
    use db::migrate::MigrationState as S;
    use std::fmt::Write;
    let count = |f: fn(&S) -> bool| status.iter().filter(|m| f(&m.state)).count();
    let applied = count(|s| matches!(s, S::Applied { .. }));
    let pending = count(|s| matches!(s, S::Pending));
    let newer = count(|s| matches!(s, S::AppliedByNewerRelease { .. }));
    let mut out = String::new();
    let _ = write!(
        out,
        "database {database}: {applied} applied, {pending} pending"
    );
    if newer > 0 {
        let _ = write!(out, ", {newer} applied by a newer release");
    }
    let pre_release = count(|s| matches!(s, S::PreRelease { .. }));
    if pre_release > 0 {
        let _ = write!(
            out,
            ", {pre_release} pre-release squashed into the baseline"
        );
    }
    out.push('\n');
    for m in status {
        let name = m.name.as_deref().unwrap_or("-");
        let when = |t: &chrono::NaiveDateTime| t.format("%Y-%m-%d %H:%M:%S").to_string();
        let _ = match &m.state {
            S::Applied { run_on } => writeln!(out, "applied  {name}  (run on {})", when(run_on)),
            S::Pending => writeln!(out, "pending  {name}  (`briefrail migrate` applies it)"),
            S::AppliedByNewerRelease { run_on } => writeln!(
                out,
                "newer    {}  (run on {}; not in this binary: a newer release migrated, fine during a rolling upgrade)",
                m.version,
                when(run_on)
            ),
            S::PreRelease { run_on } => writeln!(
                out,
                "squashed {}  (run on {}; a pre-release migration, part of 0.1.0's baseline)",
                m.version,
                when(run_on)
            ),
        };
    }
    if pending > 0 {
        let _ = writeln!(
            out,
            "{pending} pending: nodes of this binary refuse to start until `briefrail migrate` applies them"
        );
    }
    out
}

/// The text of `document add`: the `--file`'s contents, else `--text`.
fn document_body(file: Option<PathBuf>, text: Option<String>) -> Result<String> {
    match (file, text) {
        (Some(path), _) => read_text(&path),
        (None, Some(t)) => Ok(t),
        (None, None) => Err(Error::InvalidInput(
            "give --file PATH or --text TEXT".into(),
        )),
    }
}

/// `document add`: records `document.uploaded` and prints the document's id and event.
async fn add_document(
    conn: &mut AsyncPgConnection,
    doc: facts::NewDocument,
    class: DemandClass,
) -> Result<()> {
    let document_id = doc.document_id;
    let event = facts::add_document_as(conn, doc, class).await?;
    println!("document {document_id} added (event {event})");
    Ok(())
}

/// `brief request`: records `brief.requested` for one matter, or every live matter with `--all`.
async fn request_brief(
    conn: &mut AsyncPgConnection,
    firm: Uuid,
    matter: Option<Uuid>,
    all: bool,
    class: Option<DemandClass>,
) -> Result<()> {
    if all {
        let class = class.unwrap_or(DemandClass::Background);
        let events = facts::request_brief_all_as(conn, firm, class).await?;
        println!(
            "brief requested for {} live matter(s) of firm {firm} ({class})",
            events.len()
        );
    } else if let Some(matter) = matter {
        let class = class.unwrap_or(DemandClass::Interactive);
        let event = facts::request_brief_as(conn, firm, matter, class).await?;
        println!("brief requested for matter {matter} (event {event}, {class})");
    }
    Ok(())
}

/// `outbox republish-stranded`: makes stranded events publishable again and says how many.
async fn republish_stranded(conn: &mut AsyncPgConnection) -> Result<()> {
    let n = crate::ledger::outbox::republish_stranded(
        conn,
        crate::ledger::inbox::BRIEF_RAIL,
        crate::ledger::outbox::REPUBLISH_CAP,
    )
    .await?;
    println!("{n} stranded event(s) made publishable again");
    Ok(())
}

/// `status`: the matter's state, job row, demand, recent runs and latest frame, as text or
/// JSON. An unknown matter is an error (exit 2), like every other command's.
async fn status(
    conn: &mut AsyncPgConnection,
    matter: &MatterArgs,
    json: bool,
    runs: i64,
    max_attempts: u32,
) -> Result<()> {
    let state = matters::state_of(conn, matter.firm, matter.matter, max_attempts).await?;
    let status = reads::status(conn, matter.firm, matter.matter, runs).await?;
    let Some(state) = state.or(status.job.as_ref().map(|_| matters::MatterState::Unserved)) else {
        return Err(Error::NotFound(format!(
            "matter {} of firm {} (no such matter in the record, and no job row)",
            matter.matter, matter.firm
        )));
    };
    if json {
        let mut value = serde_json::to_value(&status)
            .map_err(|e| Error::internal_from("serialising the status", e))?;
        value["state"] = serde_json::json!(state.as_str());
        let text = serde_json::to_string_pretty(&value)
            .map_err(|e| Error::internal_from("serialising the status", e))?;
        println!("{text}");
    } else {
        println!("state: {}", state.label());
        if state == matters::MatterState::Owed {
            println!("{}", matters::owed_advice());
        }
        if state == matters::MatterState::RetriesExhausted {
            println!(
                "{}",
                matters::exhausted_advice(matter.firm, matter.matter, max_attempts)
            );
        }
        print!("{}", render_status(&status));
    }
    Ok(())
}

fn read_text(path: &std::path::Path) -> Result<String> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::InvalidInput(format!("--file {}: {e}", path.display())))?;
    String::from_utf8(bytes).map_err(|_| {
        Error::InvalidInput(format!(
            "--file {}: not UTF-8 text (extract a PDF's text first)",
            path.display()
        ))
    })
}

/// The text form of `briefrail status`.
pub fn render_status(s: &reads::MatterStatus) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    match &s.job {
        None => out.push_str("job: no row yet (no demand recorded)\n"),
        Some(j) => {
            let _ = writeln!(
                out,
                "job: {} | requested {} | claimed {} | landed {} | rebuild_needed {} | failures {}",
                j.run_status,
                j.requested_generation,
                j.claimed_generation,
                j.landed_generation,
                j.rebuild_needed,
                j.consecutive_failures
            );
            let _ = writeln!(
                out,
                "     claimed_at {} | not_before {}",
                j.claimed_at
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_else(|| "-".into()),
                j.not_before
                    .map(|t| t.to_rfc3339())
                    .unwrap_or_else(|| "-".into())
            );
        }
    }
    let _ = writeln!(
        out,
        "unserved demand: {}",
        if s.unserved { "yes" } else { "no" }
    );
    match &s.latest_frame {
        Some(f) => {
            let _ = writeln!(
                out,
                "latest frame: generation {} (run {}, {})",
                f.generation,
                f.run_id,
                f.created_at.to_rfc3339()
            );
        }
        None => out.push_str("latest frame: none\n"),
    }
    let _ = writeln!(out, "runs (newest first):");
    for r in &s.runs {
        let _ = writeln!(
            out,
            "  token {:>4}  {:<13}  node {}  started {}{}",
            r.token,
            r.outcome,
            r.node_id,
            r.started_at.to_rfc3339(),
            r.error
                .as_deref()
                .map(|e| format!("  error: {e}"))
                .unwrap_or_default()
        );
    }
    out
}

/// The `briefrail` binary's whole life: parse the flags, load the settings, set up the logs,
/// run the command and turn its outcome into an exit status (0 success, 2 bad arguments or
/// settings, 1 a failure, with its one-line reason on stderr). The binary is this call, so an
/// application that ships its own binary with briefrail's commands gets the same behaviour.
#[cfg(feature = "http")]
pub fn main() -> std::process::ExitCode {
    use std::process::ExitCode;

    let args = match Cli::try_parse() {
        Ok(args) => args,
        Err(e) => {
            end_quietly_when_the_reader_goes();
            e.exit()
        }
    };
    if !matches!(args.command, Command::Run) {
        end_quietly_when_the_reader_goes();
    }
    // A health check answers 0 or 1 only: Docker reserves 2.
    let healthcheck = matches!(args.command, Command::Healthcheck { .. });
    let mut settings = match Settings::load(args.config.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("briefrail: {e}");
            return ExitCode::from(if healthcheck { 1 } else { 2 });
        }
    };
    if matches!(args.command, Command::Demo) && std::env::var_os("RUST_LOG").is_none() {
        // The demo narrates on stdout; logs would only interleave with it.
        settings.log.level = "error,lapin=off".into();
    }
    let logging = crate::surface::logging::init(&settings);
    if let Command::Run = args.command {
        let settings = std::sync::Arc::new(settings);
        let builder = match crate::builders::from_settings(&settings.builder) {
            Ok(b) => b,
            Err(e) => return finish(Err(e)),
        };
        let system = actix_rt::System::new();
        let result = system.block_on(async {
            let result = crate::surface::run::run(
                settings,
                builder,
                crate::surface::run::termination(),
            )
            .await;
            // The node has stopped and its last builds' spans are queued: send them.
            logging.flush().await;
            result
        });
        return finish(result);
    }
    if let Command::Demo = args.command {
        let system = actix_rt::System::new();
        return finish(system.block_on(async {
            let result = crate::surface::demo::run(&settings).await;
            logging.flush().await;
            result
        }));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("briefrail: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(execute(args.command, &settings));
    match finish(result) {
        code if healthcheck && code != ExitCode::SUCCESS => ExitCode::from(1),
        code => code,
    }
}

/// Exit status and the one-line reason on stderr.
#[cfg(feature = "http")]
fn finish(result: Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "briefrail: {}",
                crate::secret::redact_urls(&crate::error::report(&e))
            );
            std::process::ExitCode::from(exit_code(&e) as u8)
        }
    }
}

/// `briefrail status … | head -1`: once the reader is gone, a command ends as a Unix tool does,
/// by SIGPIPE and silently, instead of panicking in `println!` with a backtrace. Rust's runtime
/// ignores SIGPIPE; this puts back the default. Not for `run`: a node writes to its command
/// builders' pipes and must meet a child that stopped reading as an error it handles, not die
/// of it. (The demo's builders are in-process, and sockets send with `MSG_NOSIGNAL`.)
#[cfg(feature = "http")]
fn end_quietly_when_the_reader_goes() {
    // SAFETY: called on the main thread before any other thread or runtime is started, with
    // the default disposition, which needs no handler to stay valid.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
