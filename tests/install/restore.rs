//! Backup and restore (docs/backup-and-restore.md): a `pg_dump -Fc` of the ledger taken
//! while builds are in flight, the original going on after it, then `pg_restore` into a new
//! database and a node started there. The rail recovers: a claim of the lost past is fenced by
//! its run id although its token number is handed out again, the claims that were running in
//! the dump (ghosts: their builder is gone) are taken over at their recorded deadline, and
//! every demand the restored ledger holds is served. What the dump did not hold (facts
//! recorded after it) is gone from the record: operators record it again, or recover to a
//! point in time instead.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{add_document, eventually, ids, scratch_dir, spawn_node};
use briefrail::db::{self, admin};
use briefrail::ledger::transitions::{self as t, ClaimRequest, Frame, Landed};
use briefrail::ledger::{Claim, ClaimKind, RunOutcome, RunStatus, facts, reads};
use briefrail::testing::{TestDb, server_url};
use diesel::sql_types::{BigInt, Text, Uuid as SqlUuid};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::json;
use uuid::Uuid;

/// The lease of the node whose claims end up in the dump: far longer than the test, so only the
/// ledger clock can bring their deadline.
const GHOST_LEASE_SECS: u64 = 600;
/// The lease of the node on the restored ledger: shorter than the ghosts', which expire at the
/// deadline on their row, never at this node's setting.
const RESTORED_LEASE_SECS: &str = "30";
const WAIT: Duration = Duration::from_secs(60);

/// A PostgreSQL client program: from the server's `pg_config --bindir`, else from `PATH`. A
/// missing one fails the test, naming it.
fn pg_program(name: &str) -> PathBuf {
    let bindir = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(p) = bindir.map(|d| d.join(name)).filter(|p| p.is_file()) {
        return p;
    }
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!("{name} is missing (not in `pg_config --bindir`, not on PATH): install PostgreSQL's client programs")
        })
}

fn run(program: &Path, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `command` builder behind a gate: it reads its context at once, waits until the file
/// `$GATE` exists, then prints a frame that carries the whole context (so the test can read
/// which documents each Brief was built from).
fn gated_builder(dir: &Path) -> PathBuf {
    let path = dir.join("gated-builder.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\nctx=$(cat)\nwhile [ ! -e \"$GATE\" ]; do sleep 0.05; done\n\
         printf '{\"built_by\":\"%s\",\"token\":%s,\"context\":%s}' \"$NODE\" \"$BRIEFRAIL_TOKEN\" \"$ctx\"\n",
    )
    .expect("write the gated builder");
    path
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, diesel::QueryableByName)]
struct Held {
    #[diesel(sql_type = SqlUuid)]
    matter_id: Uuid,
    #[diesel(sql_type = BigInt)]
    token: i64,
    #[diesel(sql_type = SqlUuid)]
    run_id: Uuid,
}

/// Every running claim of the ledger: matter → (token, run id).
async fn running_claims(c: &mut AsyncPgConnection) -> BTreeMap<Uuid, (i64, Uuid)> {
    let rows: Vec<Held> = diesel::sql_query(
        "SELECT matter_id, claimed_generation AS token, claimed_run_id AS run_id
           FROM ops.matter_frame_jobs WHERE run_status = 'running'",
    )
    .load(c)
    .await
    .unwrap();
    rows.into_iter()
        .map(|h| (h.matter_id, (h.token, h.run_id)))
        .collect()
}

#[derive(diesel::QueryableByName)]
struct Line {
    #[diesel(sql_type = Text)]
    line: String,
}

/// The job rows, one line each, for assertion messages.
async fn job_lines(c: &mut AsyncPgConnection) -> String {
    let rows: Vec<Line> = diesel::sql_query(
        "SELECT format('%s %s requested=%s claimed=%s landed=%s run=%s deadline-now=%s',
                       matter_id, run_status, requested_generation, claimed_generation,
                       landed_generation, claimed_run_id, lease_expires_at - ops.now()) AS line
           FROM ops.matter_frame_jobs ORDER BY matter_id",
    )
    .load(c)
    .await
    .unwrap();
    rows.into_iter()
        .map(|r| r.line)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every run of the ledger: (matter, token) → run id.
async fn tokens(c: &mut AsyncPgConnection) -> BTreeMap<(Uuid, i64), Uuid> {
    let rows: Vec<Held> =
        diesel::sql_query("SELECT matter_id, token, run_id FROM ops.matter_frame_runs")
            .load(c)
            .await
            .unwrap();
    rows.into_iter()
        .map(|h| ((h.matter_id, h.token), h.run_id))
        .collect()
}

/// Every demand of the matter served and nothing running.
async fn caught_up(c: &mut AsyncPgConnection, firm: Uuid, matter: Uuid) -> bool {
    reads::job(c, firm, matter).await.unwrap().is_some_and(|j| {
        j.landed_generation == j.requested_generation && j.run_status != RunStatus::Running
    })
}

/// The documents the record holds for the matter, and those the latest frame was built from.
async fn documents_and_frame(
    c: &mut AsyncPgConnection,
    firm: Uuid,
    matter: Uuid,
) -> (BTreeSet<Uuid>, Option<(BTreeSet<Uuid>, Uuid)>) {
    let record = ids(
        c,
        &format!(
            "SELECT document_id AS id FROM record.documents
              WHERE firm_id = '{firm}' AND matter_id = '{matter}'"
        ),
    )
    .await;
    let frame = reads::latest_frame(c, firm, matter)
        .await
        .unwrap()
        .map(|f| {
            let built_from = f.body["context"]["documents"]
                .as_array()
                .map(|docs| {
                    docs.iter()
                        .filter_map(|d| d["document_id"].as_str()?.parse().ok())
                        .collect()
                })
                .unwrap_or_default();
            (built_from, f.run_id)
        });
    (record, frame)
}

fn claim_request(firm: Uuid, matter: Uuid, node: &str) -> ClaimRequest {
    ClaimRequest {
        firm_id: firm,
        matter_id: matter,
        lease: Duration::from_secs(GHOST_LEASE_SECS),
        node_id: node.into(),
        trace_id: None,
        event_ids: vec![],
        kind: ClaimKind::NewDemand,
        max_attempts: 5,
    }
}

/// Matter F is built once with the gate open and is idle in the dump: it will carry the claim
/// of the lost past. Then, the gate closed, four matters with documents, each build held
/// mid-flight. F, the four, and the claims in flight.
async fn matters_in_flight(
    original: &TestDb,
    firm: Uuid,
    gate: &Path,
) -> (Uuid, Vec<Uuid>, BTreeMap<Uuid, (i64, Uuid)>) {
    let mut c = original.pool.get().await.unwrap();
    std::fs::write(gate, "").unwrap();
    let fence = Uuid::new_v4();
    facts::create_matter(&mut c, firm, fence, "Fence v. Fence")
        .await
        .unwrap();
    add_document(&mut c, firm, fence, "F-1").await;
    eventually(WAIT, "matter F served on the original", || async {
        let mut c = original.pool.get().await.unwrap();
        caught_up(&mut c, firm, fence).await.then_some(())
    })
    .await;

    // Gate closed: four matters with documents, each build held mid-flight.
    std::fs::remove_file(gate).unwrap();
    let mut building = Vec::new();
    for i in 1..=4 {
        let m = Uuid::new_v4();
        facts::create_matter(&mut c, firm, m, &format!("Matter {i}"))
            .await
            .unwrap();
        add_document(&mut c, firm, m, &format!("M{i}-1")).await;
        building.push(m);
    }
    let in_flight = eventually(WAIT, "four builds in flight on the original", || async {
        let mut c = original.pool.get().await.unwrap();
        let held = running_claims(&mut c).await;
        building
            .iter()
            .all(|m| held.contains_key(m))
            .then_some(held)
    })
    .await;
    assert!(!in_flight.contains_key(&fence));
    (fence, building, in_flight)
}

/// The original goes on after the dump. (a) A claim of the lost past, held open across the
/// switch: taken by the library on the original, after the dump, never committed there. The
/// held builds land, new facts are recorded and served (tokens handed out after the dump),
/// including a matter the dump never saw. That claim, the documents and the matter.
async fn after_the_dump(
    original: &TestDb,
    firm: Uuid,
    fence: Uuid,
    building: &[Uuid],
    gate: &Path,
) -> (Claim, BTreeSet<Uuid>, Uuid) {
    let mut c = original.pool.get().await.unwrap();
    // The original goes on after the dump.
    // (a) A claim of the lost past, held open across the switch: taken by the library on the
    // original, after the dump, never committed there.
    let zombie: Claim = t::claim(&mut c, &claim_request(firm, fence, "zombie"))
        .await
        .unwrap()
        .expect("matter F is idle on the original");
    // The held builds land, new facts are recorded and served (tokens handed out after the
    // dump), including a matter the dump never saw.
    std::fs::write(gate, "").unwrap();
    let mut lost_documents = BTreeSet::new();
    for m in &building[..2] {
        lost_documents.insert(add_document(&mut c, firm, *m, "uploaded after the dump").await);
    }
    let lost_matter = Uuid::new_v4();
    facts::create_matter(&mut c, firm, lost_matter, "Created after the dump")
        .await
        .unwrap();
    lost_documents.insert(add_document(&mut c, firm, lost_matter, "L-1").await);
    let mut after_dump: Vec<Uuid> = building.to_vec();
    after_dump.push(lost_matter);
    eventually(
        WAIT,
        "every matter but F served on the original",
        || async {
            let mut c = original.pool.get().await.unwrap();
            for m in &after_dump {
                if !caught_up(&mut c, firm, *m).await {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    (zombie, lost_documents, lost_matter)
}

/// `pg_restore` of `dump` into a new database (dropped at the end, also on panic: TestDb's
/// drop). The dump carries the migration history: `briefrail migrate` afterwards applies
/// nothing.
async fn restore_into_a_new_database(pg_restore: &Path, dump: &Path) -> TestDb {
    let restored_name = format!("br_t_{}", &Uuid::new_v4().simple().to_string()[..16]);
    let restored_url = admin::with_database(&server_url(), &restored_name).unwrap();
    assert!(
        admin::create_database_if_missing(&restored_url)
            .await
            .unwrap()
    );
    let restored = TestDb {
        name: restored_name,
        url: restored_url.clone(),
        pool: db::connect(&db::PoolOptions::new(restored_url.clone()).size(4))
            .await
            .unwrap(),
    };
    run(
        pg_restore,
        &[
            "--exit-on-error",
            "--no-owner",
            "-d",
            &restored_url,
            dump.to_str().unwrap(),
        ],
    );
    // The dump carries the migration history: `briefrail migrate` afterwards applies nothing.
    assert_eq!(
        db::migrate::run_pending(&restored_url).await.unwrap(),
        Vec::<String>::new()
    );
    restored
}

/// (c) Facts recorded after the dump are not in the restored record.
async fn assert_the_facts_after_the_dump_are_gone(
    restored: &TestDb,
    firm: Uuid,
    lost_matter: Uuid,
    lost_documents: &BTreeSet<Uuid>,
    original_events: &BTreeSet<Uuid>,
) {
    let mut r = restored.pool.get().await.unwrap();
    let restored_documents = ids(&mut r, "SELECT document_id AS id FROM record.documents").await;
    let restored_events = ids(&mut r, "SELECT event_id AS id FROM ops.domain_event_outbox").await;
    let lost_events: BTreeSet<Uuid> = original_events
        .difference(&restored_events)
        .copied()
        .collect();
    assert!(
        restored_documents.is_disjoint(lost_documents)
            && facts::matter(&mut r, firm, lost_matter)
                .await
                .unwrap()
                .is_none()
            && reads::job(&mut r, firm, lost_matter)
                .await
                .unwrap()
                .is_none()
            && lost_events.len() >= lost_documents.len(),
        "facts recorded after the backup's instant are gone from the restored record: the \
         guide must tell operators to record the uploads made after the backup again, or to \
         use point-in-time recovery (documents {lost_documents:?}, restored {restored_documents:?})"
    );
}

/// (a) The restored ledger hands token number T out again, to another claim: the zombie's
/// heartbeat and commit are fenced by the run id, and nothing of it lands. The same claim was
/// good on the ledger that issued it; the successor, holding the same number, lands.
async fn assert_the_lost_claim_is_fenced_by_its_identity(
    original: &TestDb,
    restored: &TestDb,
    firm: Uuid,
    fence: Uuid,
    zombie: &Claim,
) {
    let mut r = restored.pool.get().await.unwrap();
    let successor: Claim = t::claim(&mut r, &claim_request(firm, fence, "successor"))
        .await
        .unwrap()
        .expect("matter F is idle on the restored ledger");
    assert_eq!(
        successor.token, zombie.token,
        "the restored ledger hands the lost claim's token number out again"
    );
    assert_ne!(successor.run_id, zombie.run_id);
    let beat = t::heartbeat(&mut r, zombie).await;
    assert!(
        matches!(beat, Err(briefrail::Error::Fenced { .. })),
        "the lost claim's heartbeat on the restored ledger: {beat:?}"
    );
    let committed = t::commit(
        &restored.pool,
        zombie,
        "zombie",
        &Frame::new(json!({"zombie": true})),
    )
    .await;
    assert!(
        matches!(committed, Err(briefrail::Error::Fenced { .. })),
        "the lost claim's commit on the restored ledger: {committed:?}"
    );
    let f_job = reads::job(&mut r, firm, fence).await.unwrap().unwrap();
    assert_eq!(
        (
            f_job.run_status,
            f_job.claimed_generation,
            f_job.claimed_run_id
        ),
        (RunStatus::Running, successor.token, Some(successor.run_id)),
        "the successor still holds F: {f_job:?}"
    );
    assert!(
        f_job.landed_generation < zombie.token,
        "nothing landed with the lost claim: {f_job:?}"
    );
    assert!(
        ids(
            &mut r,
            &format!(
                "SELECT run_id AS id FROM ops.matter_frames WHERE run_id = '{}'
                 UNION SELECT run_id FROM ops.matter_frame_runs WHERE run_id = '{}'",
                zombie.run_id, zombie.run_id
            ),
        )
        .await
        .is_empty(),
        "no frame and no run of the lost claim on the restored ledger"
    );
    // The same claim was good on the ledger that issued it: it is its identity that fences it.
    assert_eq!(
        t::commit(
            &original.pool,
            zombie,
            "zombie",
            &Frame::new(json!({"zombie": true}))
        )
        .await
        .unwrap(),
        Landed::Idle
    );
    // The successor, holding the same number, lands.
    assert_eq!(
        t::commit(
            &restored.pool,
            &successor,
            "successor",
            &Frame::new(json!({"successor": true}))
        )
        .await
        .unwrap(),
        Landed::Idle
    );
    let f_frame = reads::frame_meta(&mut r, firm, fence, zombie.token)
        .await
        .unwrap()
        .expect("token T landed on the restored ledger");
    assert_eq!(f_frame.run_id, successor.run_id);
}

/// A new fact on a ghost's matter is recorded on the ghost's running row (and F, with a new
/// fact too, is served by the node on the restored ledger).
async fn assert_a_new_demand_waits_on_the_ghosts_row(
    restored: &TestDb,
    firm: Uuid,
    ghost: Uuid,
    fence: Uuid,
) {
    let mut r = restored.pool.get().await.unwrap();
    let ghost_row = reads::job(&mut r, firm, ghost).await.unwrap().unwrap();
    add_document(&mut r, firm, ghost, "uploaded after the restore").await;
    add_document(&mut r, firm, fence, "F-2, after the restore").await;
    eventually(
        WAIT,
        "F served by the node on the restored ledger",
        || async {
            let mut r = restored.pool.get().await.unwrap();
            let (record, frame) = documents_and_frame(&mut r, firm, fence).await;
            (caught_up(&mut r, firm, fence).await
                && frame.is_some_and(|(built, _)| built == record))
            .then_some(())
        },
    )
    .await;
    eventually(
        WAIT,
        "the new document's demand on the ghost's row",
        || async {
            let mut r = restored.pool.get().await.unwrap();
            let j = reads::job(&mut r, firm, ghost).await.unwrap().unwrap();
            (j.requested_generation > ghost_row.requested_generation).then_some(())
        },
    )
    .await;
    let demanded = reads::job(&mut r, firm, ghost).await.unwrap().unwrap();
    assert!(
        demanded.rebuild_needed
            && demanded.run_status == RunStatus::Running
            && demanded.claimed_run_id == ghost_row.claimed_run_id,
        "the new document's demand waits on the ghost's row: {demanded:?}"
    );
}

/// The ghosts hold their matters until their own deadline: not at the restored node's shorter
/// lease, so a sweep past it takes none of them.
async fn assert_the_ghosts_wait_for_their_deadline(
    restored: &TestDb,
    ghosts: &BTreeMap<Uuid, (i64, Uuid)>,
) {
    let mut r = restored.pool.get().await.unwrap();
    restored
        .advance_ledger_clock(Duration::from_secs(60))
        .await
        .unwrap();
    let swept = t::sweep(&mut r, 100).await.unwrap();
    assert!(
        swept
            .iter()
            .all(|(m, _)| !ghosts.contains_key(&m.matter_id)),
        "a ghost was swept before its deadline: {swept:?}"
    );
    assert_eq!(
        running_claims(&mut r).await,
        *ghosts,
        "{}",
        job_lines(&mut r).await
    );
}

/// No running claim is left; each ghost's run expired, and its matter was rebuilt on the
/// restored ledger by node-b, reading every restored document, with a newer token.
async fn assert_the_ghosts_expired_and_were_rebuilt(
    restored: &TestDb,
    firm: Uuid,
    ghosts: &BTreeMap<Uuid, (i64, Uuid)>,
) {
    let mut r = restored.pool.get().await.unwrap();
    assert!(
        running_claims(&mut r).await.is_empty(),
        "no running claim left: {}",
        job_lines(&mut r).await
    );
    for (m, (token, run_id)) in ghosts {
        let ghost = reads::run(&mut r, *run_id).await.unwrap().unwrap();
        assert_eq!(
            (ghost.token, ghost.outcome),
            (*token, RunOutcome::LeaseExpired),
            "the ghost of matter {m} was expired"
        );
        let (record, frame) = documents_and_frame(&mut r, firm, *m).await;
        let (built, by) = frame.expect("a frame");
        assert_eq!(
            built, record,
            "matter {m}: the Brief reads every restored document"
        );
        let by = reads::run(&mut r, by).await.unwrap().unwrap();
        assert_eq!(
            by.node_id, "node-b",
            "matter {m} rebuilt on the restored ledger"
        );
        assert!(by.token > *token);
    }
}

/// Token numbers of the lost past came round again on the restored node's own claims too; no
/// claim of the lost past ever landed on (or was recorded by) the restored ledger; its events
/// were all consumed and none of the lost ones came back.
async fn assert_no_claim_of_the_lost_past_came_back(
    restored: &TestDb,
    original_tokens: &BTreeMap<(Uuid, i64), Uuid>,
    lost_runs: &BTreeSet<Uuid>,
    fence: Uuid,
) {
    let mut r = restored.pool.get().await.unwrap();
    let lost_tokens: BTreeSet<(Uuid, i64)> = original_tokens
        .iter()
        .filter(|(_, run)| lost_runs.contains(run))
        .map(|(key, _)| *key)
        .collect();
    let reissued: Vec<(Uuid, i64)> = tokens(&mut r)
        .await
        .into_iter()
        .filter(|(key, _)| lost_tokens.contains(key))
        .map(|(key, _)| key)
        .collect();
    assert!(
        reissued.iter().any(|(m, _)| *m != fence),
        "the node on the restored ledger handed out a lost claim's number again: {reissued:?}"
    );
    // No claim of the lost past ever landed on (or was recorded by) the restored ledger.
    let landed_runs = ids(&mut r, "SELECT run_id AS id FROM ops.matter_frames").await;
    let restored_runs = ids(&mut r, "SELECT run_id AS id FROM ops.matter_frame_runs").await;
    assert!(
        landed_runs.is_disjoint(lost_runs) && restored_runs.is_disjoint(lost_runs),
        "a claim of the lost past reached the restored ledger"
    );
    // The restored ledger's events were all consumed; none of the lost ones came back.
    let unconsumed = ids(
        &mut r,
        "SELECT o.event_id AS id FROM ops.domain_event_outbox o
          WHERE o.published_at IS NULL
             OR NOT EXISTS (SELECT 1 FROM ops.consumed_events i WHERE i.event_id = o.event_id)",
    )
    .await;
    assert!(unconsumed.is_empty(), "unconsumed events: {unconsumed:?}");
}

/// A `briefrail run` node with the gated builder: on the original (`ghost_lease`) with the
/// ghosts' long lease, four builders and a pool of eight; on the restored ledger, the shorter
/// lease.
fn gated_node(
    db: &TestDb,
    dir: &Path,
    id: &str,
    command: &str,
    gate_env: &str,
    ghost_lease: bool,
) -> common::NodeProcess {
    if ghost_lease {
        let ghost_lease = GHOST_LEASE_SECS.to_string();
        spawn_node(
            db,
            dir,
            id,
            &[
                ("BRIEFRAIL__BUILDER__COMMAND", command),
                ("GATE", gate_env),
                ("BRIEFRAIL__LEASE__SECONDS", &ghost_lease),
                ("BRIEFRAIL__BUILDERS__CONCURRENCY", "4"),
                ("BRIEFRAIL__DATABASE__POOL_SIZE", "8"),
            ],
        )
    } else {
        spawn_node(
            db,
            dir,
            id,
            &[
                ("BRIEFRAIL__BUILDER__COMMAND", command),
                ("GATE", gate_env),
                ("BRIEFRAIL__LEASE__SECONDS", RESTORED_LEASE_SECS),
            ],
        )
    }
}

/// Past the ghosts' deadline: the restored node's sweeper takes them over and serves every
/// demand the restored ledger holds (F and the four built at the dump).
async fn every_matter_caught_up_past_the_ghosts_deadline(restored: &TestDb, firm: Uuid) {
    let mut r = restored.pool.get().await.unwrap();
    restored
        .advance_ledger_clock(Duration::from_secs(GHOST_LEASE_SECS))
        .await
        .unwrap();
    let matters = ids(
        &mut r,
        &format!("SELECT matter_id AS id FROM record.matters WHERE firm_id = '{firm}'"),
    )
    .await;
    assert_eq!(matters.len(), 5, "F and the four built at the dump");
    eventually(
        WAIT,
        "every matter of the restored ledger caught up",
        || async {
            let mut r = restored.pool.get().await.unwrap();
            for m in &matters {
                let (record, frame) = documents_and_frame(&mut r, firm, *m).await;
                if !caught_up(&mut r, firm, *m).await
                    || frame.is_none_or(|(built, _)| built != record)
                {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_of_a_dump_taken_mid_build_fences_the_lost_past_and_serves_every_demand() {
    let pg_dump = pg_program("pg_dump");
    let pg_restore = pg_program("pg_restore");
    let original = TestDb::new(4).await.unwrap();
    let dir = scratch_dir("restore");
    let script = gated_builder(&dir);
    let command = format!("/bin/sh {}", script.display());
    let gate = dir.join("gate");
    let gate_env = gate.to_str().unwrap().to_owned();
    let node_a = gated_node(&original, &dir, "node-a", &command, &gate_env, true);
    let mut c = original.pool.get().await.unwrap();
    let firm = Uuid::new_v4();

    let (fence, building, in_flight) = matters_in_flight(&original, firm, &gate).await;

    // The backup, taken while those builds run.
    let dump = dir.join("ledger.dump");
    run(
        &pg_dump,
        &["-Fc", "-f", dump.to_str().unwrap(), &original.url],
    );

    let (zombie, lost_documents, lost_matter) =
        after_the_dump(&original, firm, fence, &building, &gate).await;
    drop(node_a); // the original's builders are gone (SIGKILL)
    let original_runs = ids(&mut c, "SELECT run_id AS id FROM ops.matter_frame_runs").await;
    let original_tokens = tokens(&mut c).await;
    let original_events = ids(&mut c, "SELECT event_id AS id FROM ops.domain_event_outbox").await;

    let restored = restore_into_a_new_database(&pg_restore, &dump).await;
    let mut r = restored.pool.get().await.unwrap();

    // The dump holds the claims that were running at its instant: the ghosts.
    let ghosts = running_claims(&mut r).await;
    assert_eq!(
        ghosts, in_flight,
        "the restored ledger holds exactly the claims in flight at the dump"
    );
    let kept_runs = ids(&mut r, "SELECT run_id AS id FROM ops.matter_frame_runs").await;
    let lost_runs: BTreeSet<Uuid> = original_runs.difference(&kept_runs).copied().collect();
    assert!(
        lost_runs.contains(&zombie.run_id) && lost_runs.len() > 1,
        "claims were taken on the original after the dump: {lost_runs:?}"
    );

    // (c) Facts recorded after the dump are not in the restored record.
    assert_the_facts_after_the_dump_are_gone(
        &restored,
        firm,
        lost_matter,
        &lost_documents,
        &original_events,
    )
    .await;

    // (a) The restored ledger hands token number T out again, to another claim: the zombie's
    // heartbeat and commit are fenced by the run id, and nothing of it lands.
    assert_the_lost_claim_is_fenced_by_its_identity(&original, &restored, firm, fence, &zombie)
        .await;

    // (b) A node on the restored ledger. New facts there: one on a ghost's matter (recorded on
    // the ghost's running row) and one on F.
    let node_b = gated_node(&restored, &dir, "node-b", &command, &gate_env, false);
    assert_a_new_demand_waits_on_the_ghosts_row(&restored, firm, building[0], fence).await;
    // The ghosts hold their matters until their own deadline: not at the restored node's
    // shorter lease, so a sweep past it takes none of them.
    assert_the_ghosts_wait_for_their_deadline(&restored, &ghosts).await;

    // Past the ghosts' deadline: the restored node's sweeper takes them over and serves every
    // demand the restored ledger holds.
    every_matter_caught_up_past_the_ghosts_deadline(&restored, firm).await;
    drop(node_b);

    assert_the_ghosts_expired_and_were_rebuilt(&restored, firm, &ghosts).await;
    // Token numbers of the lost past came round again on the restored node's own claims too.
    assert_no_claim_of_the_lost_past_came_back(&restored, &original_tokens, &lost_runs, fence)
        .await;
    drop(r);
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The claim-identity mutations (a fence that ignores the run id) must fail the restore test:
/// after a restore, token numbers repeat and only the run id fences the lost past.
#[tokio::test]
async fn every_planted_bug_fails_a_guarantee_test() {
    common::mutations::assert_caught(module_path!()).await;
}
