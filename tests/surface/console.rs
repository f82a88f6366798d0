//! The operator console over a real socket, against a real node and ledger: login and session
//! cookie, CSRF, 405 and 413, the pages' content (the Brief, states, search, pagination), the
//! retry of a matter out of retries, dead letters replayed and discarded, nodes alive and gone,
//! and a released run that is not a failure.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::eventually;
use briefrail::builders::brief::BriefBuilder;
use briefrail::config::{Settings, TransportKind};
use briefrail::ledger::matters::MatterState;
use briefrail::ledger::{dead_letters, facts, reads};
use briefrail::node::Node;
use briefrail::secret::SecretUrl;
use briefrail::testing::TestDb;
use chrono::NaiveDate;
use uuid::Uuid;

const TOKEN: &str = "console-admin-token";

struct Console {
    db: TestDb,
    node: Node,
    base: String,
    poisoned: Arc<AtomicBool>,
}

async fn console(token: &str) -> Console {
    let db = TestDb::new(8).await.unwrap();
    let (node, base, poisoned) = node_on(&db, token).await;
    Console {
        db,
        node,
        base,
        poisoned,
    }
}

/// A node with its console on `db`'s ledger (several may share one, as a fleet does).
async fn node_on(db: &TestDb, token: &str) -> (Node, String, Arc<AtomicBool>) {
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.transport.kind = TransportKind::Postgres;
    s.trigger.debounce_ms = 5;
    s.http.bind = "127.0.0.1:0".into();
    s.http.token = token.into();
    s.relay.poll_ms = 50;
    s.sweeper.interval_seconds = 0.2;
    s.node.id = format!("console-node-{}", &Uuid::new_v4().simple().to_string()[..6]);
    s.node.heartbeat_seconds = 0.2;
    let poisoned = Arc::new(AtomicBool::new(true));
    let node = Node::builder(
        Arc::new(s),
        Arc::new(common::flaky::Flaky {
            poisoned: poisoned.clone(),
        }),
    )
    .pool(db.pool.clone())
    .surface(briefrail::surface::http::admin())
    .start()
    .await
    .unwrap();
    let base = format!("http://{}", node.surface_addr().unwrap());
    (node, base, poisoned)
}

fn client() -> awc::Client {
    // No redirects followed: the test asserts each 303 itself.
    awc::Client::builder().disable_redirects().finish()
}

async fn body(
    r: &mut awc::ClientResponse<
        impl futures_util::Stream<Item = Result<actix_web::web::Bytes, awc::error::PayloadError>>
        + Unpin,
    >,
) -> String {
    String::from_utf8(r.body().limit(4 << 20).await.unwrap().to_vec()).unwrap()
}

fn header(r: &awc::ClientResponse<impl Sized>, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Logs in; returns the `Cookie` header value and the CSRF token of the overview's forms.
async fn log_in(base: &str) -> (String, String) {
    log_in_with(base, TOKEN).await
}

async fn log_in_with(base: &str, token: &str) -> (String, String) {
    let mut r = client()
        .post(format!("{base}/login"))
        .send_form(&[("token", token), ("next", "/")])
        .await
        .unwrap();
    if r.status() != 303 {
        let status = r.status();
        panic!("login answered {status}, not 303: {}", body(&mut r).await);
    }
    let set = header(&r, "set-cookie");
    let cookie = set.split(';').next().unwrap().to_owned();
    let mut r = client()
        .get(format!("{base}/"))
        .insert_header(("cookie", cookie.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let html = body(&mut r).await;
    (cookie, csrf_of(&html))
}

fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no CSRF field on the page: {html}"));
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

async fn get(base: &str, cookie: &str, path: &str) -> (u16, String) {
    let mut r = client()
        .get(format!("{base}{path}"))
        .insert_header(("cookie", cookie.to_owned()))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), body(&mut r).await)
}

async fn matter_with_documents(
    db: &TestDb,
    firm: Uuid,
    title: &str,
    docs: &[(&str, &str)],
) -> Uuid {
    let matter = Uuid::new_v4();
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, matter, title)
        .await
        .unwrap();
    for (doc, dated) in docs {
        facts::add_document(
            &mut c,
            facts::NewDocument {
                document_id: Uuid::new_v4(),
                firm_id: firm,
                matter_id: matter,
                title: (*doc).into(),
                dated: Some(NaiveDate::parse_from_str(dated, "%Y-%m-%d").unwrap()),
                body: format!("{doc} says the shipment arrived late. It was damaged."),
            },
        )
        .await
        .unwrap();
    }
    matter
}

async fn state(db: &TestDb, firm: Uuid, matter: Uuid) -> MatterState {
    let mut c = db.pool.get().await.unwrap();
    briefrail::ledger::matters::state_of(&mut c, firm, matter, 5)
        .await
        .unwrap()
        .unwrap()
}

async fn wait_state(db: &TestDb, firm: Uuid, matter: Uuid, want: MatterState) {
    eventually(
        Duration::from_secs(20),
        &format!("matter {matter} {want}"),
        || async { (state(db, firm, matter).await == want).then_some(()) },
    )
    .await;
}

/// Without a session every page redirects to the login form, which remembers where it was;
/// an off-site `next` is not followed, nor one a browser would turn into one (it drops tabs).
async fn assert_no_session_is_sent_to_login(base: &str, firm: Uuid, matter: Uuid) {
    for path in [
        "/",
        "/matters?q=acme",
        "/dead-letters",
        "/nodes",
        &format!("/firms/{firm}/matters/{matter}"),
    ] {
        let r = client().get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 303, "{path}");
        let to = header(&r, "location");
        assert!(to.starts_with("/login?next="), "{path} → {to}");
    }
    let (status, form) = get(base, "", "/login?next=/nodes").await;
    assert_eq!(status, 200);
    assert!(
        form.contains("name=\"token\"") && form.contains("type=\"password\""),
        "{form}"
    );
    assert!(
        form.contains("value=\"/nodes\""),
        "the form keeps where to go: {form}"
    );
    // An off-site `next` is not followed, nor one a browser would turn into one (it drops tabs).
    for next in [
        "//evil.example/x",
        "/%09/evil.example",
        "/%0a/evil.example",
        "/\\evil.example",
    ] {
        let (_, page) = get(base, "", &format!("/login?next={next}")).await;
        assert!(!page.contains("evil.example"), "{next}: {page}");
    }
    let r = client()
        .post(format!("{base}/login"))
        .send_form(&[("token", TOKEN), ("next", "/\t/evil.example")])
        .await
        .unwrap();
    assert_eq!(header(&r, "location"), "/", "a tab in next");
}

/// The JSON API keeps bearer tokens, the scheme in any case; a session cookie does not open it.
async fn assert_the_api_wants_a_bearer_token(base: &str, firm: Uuid, matter: Uuid, cookie: &str) {
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let r = client()
            .get(format!("{base}/api/firms/{firm}/matters/{matter}"))
            .insert_header(("authorization", format!("{scheme} {TOKEN}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{scheme}");
    }
    let r = client()
        .get(format!("{base}/api/firms/{firm}/matters/{matter}"))
        .insert_header(("cookie", cookie.to_owned()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

/// A state-changing form without the session's CSRF token, or from another site, is refused
/// and records nothing; with both, the demand is recorded and the page says so; a notice is a
/// code, never text from the link.
async fn assert_forms_need_the_csrf_token_and_this_origin(
    db: &TestDb,
    base: &str,
    firm: Uuid,
    matter: Uuid,
    cookie: &str,
    csrf: &str,
) {
    let rebuild = format!("{base}/firms/{firm}/matters/{matter}/rebuild");
    let events_before = count_events(db, matter).await;
    for (origin, token) in [
        (None, ""),
        (None, "wrong"),
        (Some("http://evil.example"), csrf),
    ] {
        let mut req = client()
            .post(&rebuild)
            .insert_header(("cookie", cookie.to_owned()));
        if let Some(o) = origin {
            req = req.insert_header(("origin", o));
        }
        let r = req.send_form(&[("csrf", token)]).await.unwrap();
        assert_eq!(r.status(), 403, "origin {origin:?} csrf {token:?}");
    }
    let r = client()
        .post(&rebuild)
        .send_form(&[("csrf", csrf)])
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "no session at all");
    assert_eq!(count_events(db, matter).await, events_before);
    // With both: the demand is recorded, and the page says so.
    let r = client()
        .post(&rebuild)
        .insert_header(("cookie", cookie.to_owned()))
        .insert_header(("origin", base))
        .send_form(&[("csrf", csrf)])
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let to = header(&r, "location");
    assert!(to.contains("notice=rebuild-requested&ref="), "{to}");
    let (_, page) = get(base, cookie, &to).await;
    assert!(page.contains("Rebuild requested (event "), "{page}");
    // A notice is a code, never text from the link: a crafted one says nothing.
    let (_, page) = get(
        base,
        cookie,
        &format!("/firms/{firm}/matters/{matter}?notice=Call%20support%20at%20evil.example"),
    )
    .await;
    assert!(
        !page.contains("evil.example") && !page.contains("class=\"notice\""),
        "{page}"
    );
    assert_eq!(count_events(db, matter).await, events_before + 1);
}

/// 405 with Allow for a wrong method; 413 past the body limit.
async fn assert_wrong_methods_and_big_bodies_are_refused(base: &str, firm: Uuid, matter: Uuid) {
    for (method, path, allow) in [
        ("PUT", "/matters", "GET"),
        ("POST", "/healthz", "GET"),
        ("DELETE", "/login", "GET, POST"),
        ("GET", "/logout", "POST"),
        (
            "GET",
            &format!("/api/firms/{firm}/matters/{matter}/brief-requests") as &str,
            "POST",
        ),
    ] {
        let r = client()
            .request(method.parse().unwrap(), format!("{base}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method} {path}");
        assert_eq!(header(&r, "allow"), allow, "{method} {path}");
    }
    let big = "x".repeat(20 * 1024);
    let r = client()
        .post(format!("{base}/login"))
        .send_form(&[("token", big.as_str())])
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
}

#[actix_rt::test]
async fn a_session_opens_with_the_token_and_guards_every_page_and_form() {
    let c = console(TOKEN).await;
    let base = &c.base;
    let firm = Uuid::new_v4();
    let matter = matter_with_documents(&c.db, firm, "Acme v. Globex", &[]).await;

    // Without a session: every page redirects to the login form, remembering where it was.
    assert_no_session_is_sent_to_login(base, firm, matter).await;

    // A wrong token: 401, the form again, no cookie.
    let mut r = client()
        .post(format!("{base}/login"))
        .send_form(&[("token", "guess"), ("next", "/")])
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(header(&r, "set-cookie").is_empty());
    assert!(body(&mut r).await.contains("not the admin token"));

    // The right one: a session cookie, HttpOnly, SameSite=Strict, expiring; back to `next`.
    let r = client()
        .post(format!("{base}/login"))
        .send_form(&[("token", TOKEN), ("next", "/nodes")])
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(header(&r, "location"), "/nodes");
    let set = header(&r, "set-cookie");
    for flag in [
        "briefrail_session=",
        "HttpOnly",
        "SameSite=Strict",
        "Max-Age=28800",
        "Path=/",
    ] {
        assert!(set.contains(flag), "{flag} missing from {set}");
    }
    let cookie = set.split(';').next().unwrap().to_owned();
    let (status, page) = get(base, &cookie, "/").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<h1>Overview</h1>") && page.contains("Log out"),
        "{page}"
    );
    let csrf = csrf_of(&page);

    // The JSON API keeps bearer tokens, the scheme in any case; a cookie does not open it.
    assert_the_api_wants_a_bearer_token(base, firm, matter, &cookie).await;

    // A state-changing form without the session's CSRF token, or from another site: refused,
    // and nothing recorded.
    assert_forms_need_the_csrf_token_and_this_origin(&c.db, base, firm, matter, &cookie, &csrf)
        .await;

    // 405 with Allow for a wrong method; 413 past the body limit.
    assert_wrong_methods_and_big_bodies_are_refused(base, firm, matter).await;

    // Logout revokes the session (in the ledger: on every node).
    let r = client()
        .post(format!("{base}/logout"))
        .insert_header(("cookie", cookie.clone()))
        .send_form(&[("csrf", csrf.as_str())])
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert!(header(&r, "set-cookie").contains("Max-Age=0"));
    let r = client()
        .get(format!("{base}/"))
        .insert_header(("cookie", cookie.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "the old cookie opens nothing");
    c.node.shutdown_within(Duration::from_secs(2)).await;
}

async fn count_events(db: &TestDb, matter: Uuid) -> i64 {
    use diesel_async::RunQueryDsl;
    let mut c = db.pool.get().await.unwrap();
    let n: crate::common::Count =
        diesel::sql_query("SELECT count(*) AS n FROM ops.domain_event_outbox WHERE matter_id = $1")
            .bind::<diesel::sql_types::Uuid, _>(matter)
            .get_result(&mut c)
            .await
            .unwrap();
    n.n
}

/// The Brief of `acme`, for a person: the chronology in the order of the dates the documents
/// bear, its state fresh, events and runs listed, nothing to retry.
async fn assert_the_brief_page(base: &str, cookie: &str, firm: Uuid, acme: Uuid) {
    let (status, page) = get(base, cookie, &format!("/firms/{firm}/matters/{acme}")).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<h1 id=\"matter-title\">Acme v. Globex</h1>"),
        "{page}"
    );
    assert!(page.contains("Parties: Acme; Globex"), "{page}");
    let (po, dr) = (
        page.find("Purchase order").unwrap(),
        page.find("Delivery receipt").unwrap(),
    );
    assert!(po < dr, "the chronology is in date order");
    assert!(
        page.contains("2024-01-15") && page.contains("says the shipment arrived late"),
        "{page}"
    );
    assert!(
        page.contains(">fresh</span>") && page.contains("every demand served"),
        "{page}"
    );
    assert!(
        page.contains("document.uploaded") && page.contains(">landed<"),
        "events and runs: {page}"
    );
    assert!(
        !page.contains("id=\"retry\""),
        "nothing to retry on a fresh matter"
    );
}

/// The overview counts the matter out of retries; the state filter finds it, and names the
/// valid states for one that is none.
async fn assert_the_overview_and_state_filter_find_it(base: &str, cookie: &str) {
    let (_, overview) = get(base, cookie, "/").await;
    assert!(
        overview.contains("1 matter(s) ran out of retries"),
        "{overview}"
    );
    let (_, list) = get(base, cookie, "/matters?state=retries_exhausted").await;
    assert!(
        list.contains("Poisoned Corp v. Initech") && !list.contains("Acme v. Globex"),
        "{list}"
    );
    let (status, bad) = get(base, cookie, "/matters?state=stuck").await;
    assert_eq!(status, 400);
    assert!(
        bad.contains("fresh, owed, unserved, running, failed, retries_exhausted, archived"),
        "{bad}"
    );
}

/// Search by title, case-insensitive; `%` is a letter; pages of 50 with a next link.
async fn assert_search_and_pages(db: &TestDb, base: &str, cookie: &str, firm: Uuid) {
    let (_, found) = get(base, cookie, "/matters?q=ACME").await;
    assert!(
        found.contains("Acme v. Globex") && !found.contains("Poisoned"),
        "{found}"
    );
    let (_, none) = get(base, cookie, "/matters?q=%25").await;
    assert!(none.contains("no matter matches"), "{none}");
    {
        let mut conn = db.pool.get().await.unwrap();
        for i in 0..55 {
            facts::create_matter(
                &mut conn,
                firm,
                Uuid::new_v4(),
                &format!("Bulk matter {i:02}"),
            )
            .await
            .unwrap();
        }
    }
    let (_, first) = get(base, cookie, "/matters?q=bulk").await;
    assert_eq!(first.matches("Bulk matter").count(), 50);
    assert!(
        first.contains("rel=\"next\"") && !first.contains("rel=\"prev\""),
        "{first}"
    );
    let (_, second) = get(base, cookie, "/matters?q=bulk&page=2").await;
    assert_eq!(second.matches("Bulk matter").count(), 5);
    assert!(second.contains("Bulk matter 54") && second.contains("rel=\"prev\""));
}

/// The firm filter takes the firm's name; a name nobody has is a styled page naming it.
async fn assert_the_firm_filter_takes_its_name(db: &TestDb, base: &str, cookie: &str, firm: Uuid) {
    {
        let mut conn = db.pool.get().await.unwrap();
        briefrail::ledger::fairness::set_firm(
            &mut conn,
            firm,
            &briefrail::ledger::fairness::FirmSettings {
                name: Some("Acme LLP".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    }
    let (status, named) = get(base, cookie, "/matters?q=acme&firm=Acme%20LLP").await;
    assert_eq!(status, 200);
    assert!(named.contains("Acme v. Globex"), "{named}");
    let (status, unknown) = get(base, cookie, "/matters?firm=Globex%20Partners").await;
    assert_eq!(status, 400);
    assert!(
        unknown.contains("<h1>400 Bad Request</h1>")
            && unknown.contains("no firm is named &#34;Globex Partners&#34;")
            && unknown.contains("/assets/console.css"),
        "{unknown}"
    );
}

#[actix_rt::test]
async fn the_matter_page_shows_the_brief_and_retry_restarts_a_matter_out_of_retries() {
    let c = console(TOKEN).await;
    let base = &c.base;
    let firm = Uuid::new_v4();
    let acme = matter_with_documents(
        &c.db,
        firm,
        "Acme v. Globex",
        &[
            ("Delivery receipt", "2024-03-02"),
            ("Purchase order", "2024-01-15"),
        ],
    )
    .await;
    let poisoned = matter_with_documents(
        &c.db,
        firm,
        "Poisoned Corp v. Initech",
        &[("Memo", "2024-05-01")],
    )
    .await;
    wait_state(&c.db, firm, acme, MatterState::Fresh).await;
    wait_state(&c.db, firm, poisoned, MatterState::RetriesExhausted).await;
    let (cookie, _) = log_in(base).await;

    // The Brief itself, for a person: the chronology in the order of the dates the documents bear.
    assert_the_brief_page(base, &cookie, firm, acme).await;

    // The poisoned matter: out of retries, said plainly, with what to do; its error escaped.
    let (_, page) = get(base, &cookie, &format!("/firms/{firm}/matters/{poisoned}")).await;
    assert!(
        page.contains("Retries exhausted") && page.contains("id=\"retry\""),
        "{page}"
    );
    assert!(page.contains("briefrail matter retry --firm"), "{page}");
    assert!(
        page.contains("&lt;b&gt;bad&lt;/b&gt;") || page.contains("&#60;b&#62;bad"),
        "{page}"
    );
    assert!(!page.contains("<b>bad</b>"));
    assert!(page.contains("No Brief has landed yet"), "{page}");
    let csrf = csrf_of(&page);

    // The overview counts it and sends the operator to it; the state filter finds it.
    assert_the_overview_and_state_filter_find_it(base, &cookie).await;

    // The cause fixed, Retry: a demand that restarts its retries, and the Brief lands.
    c.poisoned.store(false, Ordering::SeqCst);
    let r = client()
        .post(format!("{base}/firms/{firm}/matters/{poisoned}/retry"))
        .insert_header(("cookie", cookie.clone()))
        .send_form(&[("csrf", csrf.as_str())])
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let to = header(&r, "location");
    assert!(to.contains("notice=retry-recorded&ref="), "{to}");
    wait_state(&c.db, firm, poisoned, MatterState::Fresh).await;
    let (_, page) = get(base, &cookie, &to).await;
    assert!(
        page.contains("Retry recorded") && page.contains("Memo"),
        "{page}"
    );
    {
        let mut conn = c.db.pool.get().await.unwrap();
        let job = reads::job(&mut conn, firm, poisoned)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(job.consecutive_failures, 0);
        assert_eq!(job.landed_generation, job.requested_generation);
    }
    // Retry of a fresh matter: refused, saying why; nothing recorded.
    let before = count_events(&c.db, acme).await;
    let r = client()
        .post(format!("{base}/firms/{firm}/matters/{acme}/retry"))
        .insert_header(("cookie", cookie.clone()))
        .send_form(&[("csrf", csrf.as_str())])
        .await
        .unwrap();
    assert!(header(&r, "location").contains("notice=nothing-to-retry"));
    assert_eq!(count_events(&c.db, acme).await, before);

    // Search by title, case-insensitive; `%` is a letter; pages of 50 with a next link.
    assert_search_and_pages(&c.db, base, &cookie, firm).await;

    // The firm filter takes the firm's name; a name nobody has is a styled page naming it.
    assert_the_firm_filter_takes_its_name(&c.db, base, &cookie, firm).await;
    c.node.shutdown_within(Duration::from_secs(2)).await;
}

/// A real event's message refused once (say the row was not visible yet on a standby), and a
/// malformed one, recorded as dead letters: the event's id and both dead letters' ids.
async fn two_dead_letters(db: &TestDb, firm: Uuid, matter: Uuid) -> (Uuid, Uuid, Uuid) {
    let mut conn = db.pool.get().await.unwrap();
    let event = facts::request_brief(&mut conn, firm, matter).await.unwrap();
    let row = briefrail::ledger::outbox::events(&mut conn, &[event])
        .await
        .unwrap()
        .remove(0);
    let good = serde_json::to_vec(&serde_json::json!({
        "event_id": row.event_id, "event_name": row.event_name, "firm_id": row.firm_id,
        "matter_id": row.matter_id, "occurred_at": row.created_at,
    }))
    .unwrap();
    let refusal = |body: &'static [u8], reason: &'static str| dead_letters::Refusal {
        consumer: briefrail::ledger::inbox::BRIEF_RAIL,
        event_id: None,
        routing_key: "brief.requested",
        body,
        traceparent: None,
        reason,
        node_id: "amqp-node",
    };
    let good: &'static [u8] = Box::leak(good.into_boxed_slice());
    let replayable = dead_letters::record(
        &mut conn,
        &dead_letters::Refusal {
            event_id: Some(event),
            ..refusal(good, "event is not in the ledger's outbox")
        },
    )
    .await
    .unwrap();
    let malformed = dead_letters::record(
        &mut conn,
        &refusal(b"{\"event_id\": 42, \x1b[31m", "not a nudge: invalid type"),
    )
    .await
    .unwrap();
    (event, replayable, malformed)
}

#[actix_rt::test]
async fn dead_letters_are_listed_replayed_and_discarded() {
    let c = console(TOKEN).await;
    let base = &c.base;
    let firm = Uuid::new_v4();
    let matter = matter_with_documents(&c.db, firm, "Wayne v. Kord", &[]).await;
    wait_state(&c.db, firm, matter, MatterState::Fresh).await;
    // A real event's message refused once (say the row was not visible yet on a standby),
    // and a malformed one.
    let (event, replayable, malformed) = two_dead_letters(&c.db, firm, matter).await;

    let (cookie, _) = log_in(base).await;
    let (_, page) = get(base, &cookie, "/dead-letters").await;
    assert!(
        page.contains(&replayable.to_string()) && page.contains(&malformed.to_string()),
        "{page}"
    );
    assert!(
        page.contains("not a nudge: invalid type") && page.contains(&event.to_string()),
        "{page}"
    );
    assert!(
        !page.contains('\x1b'),
        "control characters are shown escaped"
    );
    let csrf = csrf_of(&page);
    let (_, overview) = get(base, &cookie, "/").await;
    assert!(
        overview.contains("<span class=\"n\">2</span><span class=\"what\">dead letters"),
        "{overview}"
    );

    let post = |path: String| {
        let cookie = cookie.clone();
        let csrf = csrf.clone();
        async move {
            let r = client()
                .post(path)
                .insert_header(("cookie", cookie))
                .send_form(&[("csrf", csrf.as_str())])
                .await
                .unwrap();
            assert_eq!(r.status(), 303);
            header(&r, "location")
        }
    };
    // Replayed: applied through the inbox (the event is real), resolved.
    let to = post(format!("{base}/dead-letters/{replayable}/replay")).await;
    assert!(to.contains("notice=replayed&ref="), "{to}");
    // The malformed one, replayed: refused again, still open, counted.
    let to = post(format!("{base}/dead-letters/{malformed}/replay")).await;
    assert!(to.contains("notice=refused-again&ref="), "{to}");
    let mut conn = c.db.pool.get().await.unwrap();
    let open = dead_letters::list(&mut conn, false, 10).await.unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!((open[0].dead_letter_id, open[0].replays), (malformed, 1));
    assert!(
        briefrail::ledger::inbox::consumed(&mut conn, briefrail::ledger::inbox::BRIEF_RAIL, event)
            .await
            .unwrap()
    );
    // Discarded: resolved, kept for the record; a second discard is refused.
    post(format!("{base}/dead-letters/{malformed}/discard")).await;
    assert!(
        dead_letters::list(&mut conn, false, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let all = dead_letters::list(&mut conn, true, 10).await.unwrap();
    assert_eq!(all.len(), 2);
    let to = post(format!("{base}/dead-letters/{malformed}/discard")).await;
    assert!(to.contains("notice=already-resolved&ref="), "{to}");
    let (_, page) = get(base, &cookie, &to).await;
    assert!(
        page.contains(&format!("Dead letter {malformed} is already resolved.")),
        "{page}"
    );
    let (_, page) = get(base, &cookie, "/dead-letters?all=1").await;
    assert!(
        page.contains("discarded") && page.contains("replayed"),
        "{page}"
    );
    c.node.shutdown_within(Duration::from_secs(2)).await;
}

#[actix_rt::test]
async fn nodes_are_listed_alive_and_gone_from_their_own_heartbeats() {
    let c = console(TOKEN).await;
    let base = &c.base;
    let me = c.node.node_id().to_owned();
    // A node that stopped cleanly, and one that went silent an hour ago.
    let mut s = (*c.node.context().settings).clone();
    s.node.id = "stopped-node".into();
    s.http.bind = "127.0.0.1:0".into();
    let other = Node::builder(Arc::new(s), Arc::new(BriefBuilder))
        .pool(c.db.pool.clone())
        .without_transport()
        .start()
        .await
        .unwrap();
    other.shutdown_within(Duration::from_secs(1)).await;
    {
        use diesel_async::RunQueryDsl;
        let mut conn = c.db.pool.get().await.unwrap();
        diesel::sql_query(
            "INSERT INTO ops.nodes (node_id, version, transport, heartbeat_seconds, started_at, last_seen_at)
             VALUES ('silent-node', '0.0.9', 'amqp', 5, ops.now() - interval '2 hours', ops.now() - interval '1 hour')",
        )
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let (cookie, _) = log_in(base).await;
    let page = eventually(Duration::from_secs(10), "the nodes page", || {
        let cookie = cookie.clone();
        async move {
            let (_, page) = get(base, &cookie, "/nodes").await;
            page.contains("stopped-node").then_some(page)
        }
    })
    .await;
    let row = |id: &str| {
        let at = page
            .find(&format!("<td>{id}</td>"))
            .unwrap_or_else(|| panic!("{id}: {page}"));
        page[at..at + page[at..].find("</tr>").unwrap()].to_owned()
    };
    let mine = row(&me);
    assert!(
        mine.contains(">alive<")
            && mine.contains(env!("CARGO_PKG_VERSION"))
            && mine.contains("postgres"),
        "{mine}"
    );
    assert!(row("stopped-node").contains("gone: stopped"), "{page}");
    assert!(
        row("silent-node").contains("gone: no heartbeat for"),
        "{page}"
    );
    let (_, overview) = get(base, &cookie, "/").await;
    assert!(
        overview.contains("<span class=\"n\">1</span><span class=\"what\">live nodes"),
        "{overview}"
    );
    c.node.shutdown_within(Duration::from_secs(2)).await;
    let mut conn = c.db.pool.get().await.unwrap();
    let gone = briefrail::ledger::presence::nodes(&mut conn).await.unwrap();
    assert!(
        gone.iter().all(|n| !n.alive),
        "every node stopped: {gone:?}"
    );
}

#[actix_rt::test]
async fn without_a_token_the_console_opens_a_session_itself_and_still_checks_forms() {
    let c = console("").await;
    let base = &c.base;
    let firm = Uuid::new_v4();
    let matter = matter_with_documents(&c.db, firm, "Stark v. Hammer", &[]).await;
    let mut r = client().get(format!("{base}/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let set = header(&r, "set-cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let page = body(&mut r).await;
    assert!(!page.contains("Log out"), "no token: nothing to log out of");
    let cookie = set.split(';').next().unwrap().to_owned();
    let csrf = csrf_of(
        &get(base, &cookie, &format!("/firms/{firm}/matters/{matter}"))
            .await
            .1,
    );
    let rebuild = format!("{base}/firms/{firm}/matters/{matter}/rebuild");
    let r = client()
        .post(&rebuild)
        .send_form(&[("csrf", "")])
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "a cross-site form carries no session");
    // A page that rebound its own name to 127.0.0.1 (DNS rebinding) reaches this node with its
    // own Host: refused, pages, forms and the API alike, even with a valid session, and
    // whatever X-Forwarded-Host its script adds.
    let port = base.rsplit(':').next().unwrap();
    for path in [
        "/".to_owned(),
        format!("/firms/{firm}/matters/{matter}"),
        format!("/api/firms/{firm}/matters/{matter}"),
    ] {
        let r = client()
            .get(format!("{base}{path}"))
            .insert_header(("host", format!("evil.example:{port}")))
            .insert_header(("x-forwarded-host", format!("127.0.0.1:{port}")))
            .insert_header(("cookie", cookie.clone()))
            .send()
            .await
            .unwrap();
        assert!(
            matches!(r.status().as_u16(), 401 | 421),
            "{path}: {}",
            r.status()
        );
    }
    let r = client()
        .post(&rebuild)
        .insert_header(("host", format!("evil.example:{port}")))
        .insert_header(("cookie", cookie.clone()))
        .send_form(&[("csrf", csrf.as_str())])
        .await
        .unwrap();
    assert_eq!(r.status(), 421, "a rebound form");
    let (status, _) = get(base, &cookie, "/").await;
    assert_eq!(status, 200, "127.0.0.1 itself is served");
    let r = client()
        .post(&rebuild)
        .insert_header(("cookie", cookie))
        .send_form(&[("csrf", csrf.as_str())])
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    c.node.shutdown_within(Duration::from_secs(2)).await;
}

/// What a session cookie opens on a node: for each page and for the rebuild form, whether it
/// was served (a page 200, the form taken: 303 back to its matter) and what was answered.
async fn opens(
    base: &str,
    cookie: &str,
    csrf: &str,
    firm: Uuid,
    matter: Uuid,
) -> Vec<(bool, String)> {
    let mut seen = Vec::new();
    for path in [
        "/".to_owned(),
        format!("/firms/{firm}/matters/{matter}"),
        "/dead-letters".to_owned(),
    ] {
        let (status, _) = get(base, cookie, &path).await;
        seen.push((status == 200, format!("GET {path}: {status}")));
    }
    let r = client()
        .post(format!("{base}/firms/{firm}/matters/{matter}/rebuild"))
        .insert_header(("cookie", cookie.to_owned()))
        .send_form(&[("csrf", csrf)])
        .await
        .unwrap();
    let to = header(&r, "location");
    // Taken: sent back to its matter page (a refused form is sent to the login page, whose
    // `next` names the matter too).
    let taken = r.status() == 303 && to.starts_with(&format!("/firms/{firm}/matters/{matter}"));
    seen.push((taken, format!("POST rebuild: {} {to}", r.status().as_u16())));
    seen
}

/// The session a token-less node opens by itself for a page, and the CSRF token of the
/// matter page's forms.
async fn tokenless_session(base: &str, firm: Uuid, matter: Uuid) -> (String, String) {
    let r = client().get(format!("{base}/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let cookie = header(&r, "set-cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = get(base, &cookie, &format!("/firms/{firm}/matters/{matter}")).await;
    (cookie, csrf_of(&page.1))
}

fn all_refused(seen: &[(bool, String)]) -> bool {
    seen.iter().all(|(served, _)| !served)
}

fn all_served(seen: &[(bool, String)]) -> bool {
    seen.iter().all(|(served, _)| *served)
}

#[actix_rt::test]
async fn a_session_opened_without_the_token_opens_no_node_that_has_one() {
    // Two nodes on one ledger: one without a token (it opens sessions by itself on
    // loopback), one with a token.
    let db = TestDb::new(16).await.unwrap();
    let (open_node, open_base, _) = node_on(&db, "").await;
    let (guarded, guarded_base, _) = node_on(&db, TOKEN).await;
    let firm = Uuid::new_v4();
    let matter = matter_with_documents(&db, firm, "Wayne v. Kyle", &[]).await;
    let (cookie, csrf) = tokenless_session(&open_base, firm, matter).await;
    let before = count_events(&db, matter).await;
    let seen = opens(&guarded_base, &cookie, &csrf, firm, matter).await;
    assert!(
        all_refused(&seen),
        "a token-less session on the guarded node: {seen:?}"
    );
    assert_eq!(
        count_events(&db, matter).await,
        before,
        "no rebuild was requested through the guarded node"
    );
    // The token-less node still knows its own session.
    let (status, _) = get(&open_base, &cookie, "/").await;
    assert_eq!(status, 200);
    // And a session opened with the token is good on the guarded node only: the token-less
    // node opens its own instead (it never adopts one opened under a credential).
    let (logged, logged_csrf) = log_in(&guarded_base).await;
    let seen = opens(&guarded_base, &logged, &logged_csrf, firm, matter).await;
    assert!(
        all_served(&seen),
        "the guarded node's own session: {seen:?}"
    );
    guarded.shutdown_within(Duration::from_secs(2)).await;
    open_node.shutdown_within(Duration::from_secs(2)).await;
}

#[actix_rt::test]
async fn a_token_change_revokes_every_session_opened_under_the_old_one() {
    let db = TestDb::new(16).await.unwrap();
    let firm = Uuid::new_v4();
    let matter = matter_with_documents(&db, firm, "Kent v. Luthor", &[]).await;
    // A session opened before any token was configured...
    let (node, base, _) = node_on(&db, "").await;
    let (tokenless, tokenless_csrf) = tokenless_session(&base, firm, matter).await;
    node.shutdown_within(Duration::from_secs(2)).await;
    // ...and one opened under the first token...
    let (node, base, _) = node_on(&db, "first-token").await;
    let (first, first_csrf) = log_in_with(&base, "first-token").await;
    node.shutdown_within(Duration::from_secs(2)).await;
    // ...open nothing once the token is changed.
    let (node, base, _) = node_on(&db, "second-token").await;
    let seen = opens(&base, &tokenless, &tokenless_csrf, firm, matter).await;
    assert!(all_refused(&seen), "the token-less session: {seen:?}");
    let seen = opens(&base, &first, &first_csrf, firm, matter).await;
    assert!(all_refused(&seen), "the first token's session: {seen:?}");
    let (second, second_csrf) = log_in_with(&base, "second-token").await;
    let seen = opens(&base, &second, &second_csrf, firm, matter).await;
    assert!(all_served(&seen), "the new token's session: {seen:?}");
    node.shutdown_within(Duration::from_secs(2)).await;
}

/// A form posted with the session's cookie and CSRF token; the answer's status, `Location` and
/// body.
async fn post_form(
    base: &str,
    cookie: &str,
    path: &str,
    fields: &[(&str, &str)],
) -> (u16, String, String) {
    let mut r = client()
        .post(format!("{base}{path}"))
        .insert_header(("cookie", cookie.to_owned()))
        .send_form(&fields)
        .await
        .unwrap();
    let to = header(&r, "location");
    (r.status().as_u16(), to, body(&mut r).await)
}

/// A bulk form with nothing ticked: 422, the styled page saying `says`.
async fn nothing_ticked_is_refused(base: &str, cookie: &str, csrf: &str, path: &str, says: &str) {
    let (status, _, page) =
        post_form(base, cookie, path, &[("csrf", csrf), ("scope", "selected")]).await;
    assert_eq!(status, 422, "{path}");
    assert!(
        page.contains(says) && page.contains("/assets/console.css"),
        "{path}: {page}"
    );
}

/// A JSON body posted with the bearer token (or none): status and answer.
async fn post_json(
    base: &str,
    token: Option<&str>,
    path: &str,
    json: &serde_json::Value,
) -> (u16, serde_json::Value) {
    let mut req = client().post(format!("{base}{path}"));
    if let Some(t) = token {
        req = req.insert_header(("authorization", format!("Bearer {t}")));
    }
    let mut r = req.send_json(json).await.unwrap();
    let status = r.status().as_u16();
    let text = body(&mut r).await;
    let v = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, v)
}

/// The "N–M of T" a list page shows.
fn range_of(page: &str) -> String {
    let at = page
        .find("<span id=\"range\">")
        .unwrap_or_else(|| panic!("no range on the page: {page}"));
    let rest = &page[at + "<span id=\"range\">".len()..];
    rest[..rest.find('<').unwrap()].to_owned()
}

/// Matters of `firm`: "Acme v. Globex", fresh, and three whose builds fail (while the console's
/// builder is poisoned), out of retries.
async fn one_fresh_and_three_exhausted(db: &TestDb, firm: Uuid) -> (Uuid, Vec<Uuid>) {
    let acme = matter_with_documents(db, firm, "Acme v. Globex", &[]).await;
    let mut stuck = Vec::new();
    for title in ["Poisoned A v. X", "Poisoned B v. X", "Poisoned C v. X"] {
        stuck.push(matter_with_documents(db, firm, title, &[("Memo", "2024-05-01")]).await);
    }
    wait_state(db, firm, acme, MatterState::Fresh).await;
    for m in &stuck {
        wait_state(db, firm, *m, MatterState::RetriesExhausted).await;
    }
    (acme, stuck)
}

/// The bulk retry API wants the token, then a body that names something, within the cap,
/// with real ids: each refusal names what is wrong.
async fn assert_bulk_retry_api_refusals(base: &str, firm: Uuid, acme: Uuid) {
    let (status, _) = post_json(base, None, "/api/matters/retry", &serde_json::json!({})).await;
    assert_eq!(status, 401, "no token");
    let too_many: Vec<_> = (0..1001)
        .map(|_| serde_json::json!({"firm": firm, "matter": Uuid::new_v4()}))
        .collect();
    for (body, named) in [
        (serde_json::json!({}), "names no matters to retry"),
        (
            serde_json::json!({"matters": []}),
            "the list of matters is empty",
        ),
        (
            serde_json::json!({"matters": [{"firm": "acme", "matter": acme}]}),
            "matters[0].firm \"acme\" is not a UUID",
        ),
        (
            serde_json::json!({"matters": too_many}),
            "1001 matters named: at most 1000",
        ),
        (
            serde_json::json!({"filter": {"state": "stuck"}}),
            "state \"stuck\" is not one of",
        ),
        (serde_json::json!({"filter": {}, "limit": 0}), "limit 0"),
        (serde_json::json!({"filter": {"colour": "red"}}), "colour"),
    ] {
        let (status, e) = post_json(base, Some(TOKEN), "/api/matters/retry", &body).await;
        assert_eq!(status, 422, "{e}");
        assert!(
            e["error"].as_str().is_some_and(|t| t.contains(named)),
            "{named}: {e}"
        );
    }
}

/// The console's bulk retry form: nothing ticked is refused, naming it; a wrong CSRF token is
/// refused.
async fn assert_nothing_ticked_and_a_wrong_csrf_are_refused(base: &str, cookie: &str, csrf: &str) {
    nothing_ticked_is_refused(
        base,
        cookie,
        csrf,
        "/matters/retry",
        "no matter is selected",
    )
    .await;
    let (status, _, _) = post_form(
        base,
        cookie,
        "/matters/retry",
        &[("csrf", "wrong"), ("scope", "filter")],
    )
    .await;
    assert_eq!(status, 403, "the CSRF token is checked");
}

#[actix_rt::test]
async fn bulk_retry_retries_only_exhausted_matters_and_respects_its_cap() {
    let c = console(TOKEN).await;
    let base = &c.base;
    let firm = Uuid::new_v4();
    let (acme, stuck) = one_fresh_and_three_exhausted(&c.db, firm).await;
    let (cookie, _) = log_in(base).await;
    let (_, list) = get(base, &cookie, "/matters?state=retries_exhausted").await;
    assert_eq!(range_of(&list), "1–3 of 3", "{list}");
    assert_eq!(
        list.matches("type=\"checkbox\" name=\"m\"").count(),
        3,
        "a box on each exhausted row: {list}"
    );
    let csrf = csrf_of(&list);

    // The API: the token, then a body that names something, within the cap, with real ids.
    assert_bulk_retry_api_refusals(base, firm, acme).await;
    let acme_events = count_events(&c.db, acme).await;

    // The cause fixed: all of the firm's matching matters, two at most. The fresh one is
    // skipped, untouched; one exhausted matter is left for the next call.
    c.poisoned.store(false, Ordering::SeqCst);
    let (status, r) = post_json(
        base,
        Some(TOKEN),
        "/api/matters/retry",
        &serde_json::json!({"filter": {"firm": firm.to_string()}, "limit": 2}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (&r["retried"], &r["skipped"], &r["cap"], &r["more"]),
        (
            &serde_json::json!(2),
            &serde_json::json!(1),
            &serde_json::json!(2),
            &serde_json::json!(true)
        ),
        "{r}"
    );
    assert_eq!(
        count_events(&c.db, acme).await,
        acme_events,
        "acme untouched"
    );
    wait_state(&c.db, firm, stuck[0], MatterState::Fresh).await;
    wait_state(&c.db, firm, stuck[1], MatterState::Fresh).await;
    assert_eq!(
        state(&c.db, firm, stuck[2]).await,
        MatterState::RetriesExhausted
    );

    // The console: nothing ticked is refused, naming it; the two ticked are retried or skipped.
    assert_nothing_ticked_and_a_wrong_csrf_are_refused(base, &cookie, &csrf).await;
    let (keep, retry) = (format!("{firm}:{acme}"), format!("{firm}:{}", stuck[2]));
    let (status, to, _) = post_form(
        base,
        &cookie,
        "/matters/retry",
        &[
            ("csrf", &csrf),
            ("scope", "selected"),
            ("state", "retries_exhausted"),
            ("m", &keep),
            ("m", &retry),
        ],
    )
    .await;
    assert_eq!(status, 303);
    assert!(
        to.starts_with("/matters?") && to.contains("state=retries_exhausted"),
        "back to the same filter: {to}"
    );
    let (_, page) = get(base, &cookie, &to).await;
    assert!(
        page.contains("Retried 1 matter(s)") && page.contains("Skipped 1"),
        "{page}"
    );
    wait_state(&c.db, firm, stuck[2], MatterState::Fresh).await;
    assert_eq!(
        count_events(&c.db, acme).await,
        acme_events,
        "acme untouched"
    );
    let (_, list) = get(base, &cookie, "/matters?state=retries_exhausted").await;
    assert_eq!(range_of(&list), "0 of 0", "{list}");
    c.node.shutdown_within(Duration::from_secs(2)).await;
}

/// Dead letters: two refused nudges, one refused fact of another outbox and a crowd of 52 from
/// another installation; their ids.
async fn fifty_five_dead_letters(db: &TestDb) -> (Uuid, Uuid, Uuid, Vec<Uuid>) {
    let mut conn = db.pool.get().await.unwrap();
    let mut record = async |reason: &str, key: &str| {
        dead_letters::record(
            &mut conn,
            &dead_letters::Refusal {
                consumer: briefrail::ledger::inbox::BRIEF_RAIL,
                event_id: None,
                routing_key: key,
                body: b"{}",
                traceparent: None,
                reason,
                node_id: "amqp-node",
            },
        )
        .await
        .unwrap()
    };
    let nudge_a = record("not a nudge: missing field", "brief.requested").await;
    let nudge_b = record("not a nudge: invalid type", "brief.requested").await;
    let foreign = record("event is not in the ledger's outbox", "document.uploaded").await;
    let mut crowd = Vec::new();
    for _ in 0..52 {
        crowd.push(record("unknown installation", "other.prefix.key").await);
    }
    (nudge_a, nudge_b, foreign, crowd)
}

/// The discard API wants the token, then a body that names something: each refusal names what
/// is wrong, an empty body too.
async fn assert_discard_api_refusals(base: &str, path: &str, foreign: Uuid) {
    let (status, _) = post_json(base, None, path, &serde_json::json!({"ids": [foreign]})).await;
    assert_eq!(status, 401, "no token");
    for (body, named) in [
        (serde_json::json!({}), "names no dead letters to discard"),
        (
            serde_json::json!({"ids": []}),
            "the list of dead letters is empty",
        ),
        (
            serde_json::json!({"ids": ["x"]}),
            "ids[0] \"x\" is not a UUID",
        ),
        (
            serde_json::json!({"ids": [foreign], "filter": {}}),
            "not both",
        ),
    ] {
        let (status, e) = post_json(base, Some(TOKEN), path, &body).await;
        assert_eq!(status, 422, "{e}");
        assert!(
            e["error"].as_str().is_some_and(|t| t.contains(named)),
            "{named}: {e}"
        );
    }
    let r = client()
        .post(format!("{base}{path}"))
        .insert_header(("authorization", format!("Bearer {TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422, "an empty body names nothing");
}

#[actix_rt::test]
async fn dead_letters_are_filtered_counted_and_discarded_in_bulk() {
    let c = console(TOKEN).await;
    let base = &c.base;
    let (nudge_a, nudge_b, foreign, crowd) = fifty_five_dead_letters(&c.db).await;

    let (cookie, _) = log_in(base).await;
    // Counted and paginated; filtered by reason and by routing key.
    let (_, page) = get(base, &cookie, "/dead-letters").await;
    assert_eq!(range_of(&page), "1–50 of 55", "{page}");
    assert!(page.contains("rel=\"next\""), "{page}");
    let (_, second) = get(base, &cookie, "/dead-letters?page=2").await;
    assert_eq!(range_of(&second), "51–55 of 55", "{second}");
    let (_, nudges) = get(base, &cookie, "/dead-letters?reason=NOT%20A%20NUDGE").await;
    assert_eq!(range_of(&nudges), "1–2 of 2", "{nudges}");
    assert!(
        nudges.contains(&nudge_a.to_string()) && !nudges.contains(&foreign.to_string()),
        "{nudges}"
    );
    let (_, keyed) = get(base, &cookie, "/dead-letters?routing_key=document").await;
    assert_eq!(range_of(&keyed), "1–1 of 1", "{keyed}");
    let csrf = csrf_of(&page);

    // The API: the token, a body that names something.
    let path = "/api/dead-letters/discard";
    assert_discard_api_refusals(base, path, foreign).await;
    // By id: the named open one; an unknown one is skipped.
    let (status, r) = post_json(
        base,
        Some(TOKEN),
        path,
        &serde_json::json!({"ids": [nudge_a, Uuid::new_v4()]}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (&r["discarded"], &r["skipped"]),
        (&serde_json::json!(1), &serde_json::json!(1))
    );

    // The console: nothing ticked is refused; by filter, only the matching open ones.
    nothing_ticked_is_refused(
        base,
        &cookie,
        &csrf,
        "/dead-letters/discard",
        "no dead letter is selected",
    )
    .await;
    let (status, to, _) = post_form(
        base,
        &cookie,
        "/dead-letters/discard",
        &[("csrf", &csrf), ("scope", "filter"), ("reason", "nudge")],
    )
    .await;
    assert_eq!(status, 303);
    let (_, page) = get(base, &cookie, &to).await;
    assert!(page.contains("Discarded 1 dead letter(s)"), "{page}");
    // Ticked ones, by id.
    let (status, _, _) = post_form(
        base,
        &cookie,
        "/dead-letters/discard",
        &[
            ("csrf", &csrf),
            ("scope", "selected"),
            ("id", &crowd[0].to_string()),
            ("id", &crowd[1].to_string()),
        ],
    )
    .await;
    assert_eq!(status, 303);
    let mut conn = c.db.pool.get().await.unwrap();
    let open: Vec<Uuid> = dead_letters::list(&mut conn, false, 100)
        .await
        .unwrap()
        .iter()
        .map(|d| d.dead_letter_id)
        .collect();
    assert_eq!(open.len(), 51, "55 less the four discarded");
    for gone in [nudge_a, nudge_b, crowd[0], crowd[1]] {
        assert!(!open.contains(&gone), "{gone} discarded");
    }
    assert!(open.contains(&foreign) && open.contains(&crowd[2]));
    let all = dead_letters::list(&mut conn, true, 100).await.unwrap();
    assert_eq!(all.len(), 55, "discarded letters are kept");
    c.node.shutdown_within(Duration::from_secs(2)).await;
}

#[actix_rt::test]
async fn a_firm_has_a_page_by_id_and_by_name_and_an_unknown_one_is_a_styled_404() {
    let c = console(TOKEN).await;
    let base = &c.base;
    let firm = Uuid::new_v4();
    matter_with_documents(&c.db, firm, "Acme v. Globex", &[]).await;
    let stuck =
        matter_with_documents(&c.db, firm, "Poisoned v. Y", &[("Memo", "2024-05-01")]).await;
    wait_state(&c.db, firm, stuck, MatterState::RetriesExhausted).await;
    {
        let mut conn = c.db.pool.get().await.unwrap();
        briefrail::ledger::fairness::set_firm(
            &mut conn,
            firm,
            &briefrail::ledger::fairness::FirmSettings {
                name: Some("Acme LLP".into()),
                weight: Some(3),
                paused: Some(true),
            },
        )
        .await
        .unwrap();
    }
    let (cookie, _) = log_in(base).await;
    for path in [format!("/firms/{firm}"), "/firms/Acme%20LLP".to_owned()] {
        let (status, page) = get(base, &cookie, &path).await;
        assert_eq!(status, 200, "{path}: {page}");
        for want in [
            "<h1 id=\"firm-name\">Acme LLP</h1>",
            &firm.to_string(),
            "<td id=\"firm-weight\">3</td>",
            ">paused</td>",
            &format!("href=\"/matters?firm={firm}\""),
        ] {
            assert!(page.contains(want), "{path}: {want} missing: {page}");
        }
        assert!(
            page.contains("id=\"firm-exhausted\"><a href=") && page.contains(">1</a>"),
            "one matter out of retries: {page}"
        );
    }
    // The firms page and the matters list link to it.
    let (_, firms) = get(base, &cookie, "/firms").await;
    assert!(
        firms.contains(&format!("href=\"/firms/{firm}\"")),
        "{firms}"
    );
    let (_, matters) = get(base, &cookie, "/matters").await;
    assert!(
        matters.contains(&format!("href=\"/firms/{firm}\"")),
        "{matters}"
    );
    let (_, one) = get(base, &cookie, &format!("/firms/{firm}/matters/{stuck}")).await;
    assert!(one.contains(&format!("href=\"/firms/{firm}\"")), "{one}");
    for unknown in [
        "/firms/Globex%20Partners",
        &format!("/firms/{}", Uuid::new_v4()),
    ] {
        let mut r = client()
            .get(format!("{base}{unknown}"))
            .insert_header(("cookie", cookie.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{unknown}");
        assert!(
            header(&r, "content-type").starts_with("text/html"),
            "{unknown}"
        );
        let page = body(&mut r).await;
        assert!(
            page.contains("<h1>404 Not Found</h1>") && page.contains("/assets/console.css"),
            "{page}"
        );
    }
    // A query string that cannot be read is the styled page too, not text/plain.
    let mut r = client()
        .get(format!("{base}/matters?page=abc"))
        .insert_header(("cookie", cookie.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(header(&r, "content-type").starts_with("text/html"));
    assert!(body(&mut r).await.contains("page"), "names the field");
    c.node.shutdown_within(Duration::from_secs(2)).await;
}
