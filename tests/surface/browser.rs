//! The console in a real browser: Debian's headless Chromium, driven over WebDriver
//! (chromedriver), logs in, searches, opens a matter's page and reads its Brief, and retries a
//! matter out of retries, watching the page's live refresh show it fresh. Needs the packages
//! `chromium` and `chromium-driver` (`.ci/run` installs them); without them the test fails and
//! says so. `BRIEFRAIL_SCREENSHOT=path.png` saves the matter page (the README's picture).

use crate::common::{self, free_port};

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use briefrail::config::{Settings, TransportKind};
use briefrail::ledger::facts;
use briefrail::node::Node;
use briefrail::secret::SecretUrl;
use briefrail::testing::TestDb;
use chrono::NaiveDate;
use serde_json::{Value, json};
use uuid::Uuid;

const TOKEN: &str = "browser-admin-token";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// chromedriver on a port of its own, killed when dropped.
struct Driver {
    child: Child,
    base: String,
    profile: std::path::PathBuf,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

async fn driver() -> Driver {
    for tool in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            std::path::Path::new(tool).exists(),
            "{tool} is missing: the browser test needs Debian's chromium and chromium-driver \
             (apt-get install -y chromium chromium-driver; .ci/run installs them)"
        );
    }
    let port = free_port();
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let d = Driver {
        child,
        base: format!("http://127.0.0.1:{port}"),
        profile: common::scratch_dir("chromium-profile"),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut r) = awc::Client::default()
            .get(format!("{}/status", d.base))
            .send()
            .await
        {
            let v: Value = r.json().await.unwrap_or_default();
            if v["value"]["ready"] == true {
                return d;
            }
        }
        assert!(
            Instant::now() < deadline,
            "chromedriver did not become ready in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One browser session (W3C WebDriver over HTTP).
struct Browser<'a> {
    driver: &'a Driver,
    session: String,
}

impl<'a> Browser<'a> {
    async fn open(driver: &'a Driver) -> Browser<'a> {
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,1500",
                         format!("--user-data-dir={}", driver.profile.display())]
            }
        }}});
        let v = call(&driver.base, "POST", "/session", Some(caps)).await;
        let session = v["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {v}"))
            .to_owned();
        Browser { driver, session }
    }

    async fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        call(
            &self.driver.base,
            method,
            &format!("/session/{}{path}", self.session),
            body,
        )
        .await
    }

    async fn go(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({"url": url}))).await;
    }

    async fn url(&self) -> String {
        self.cmd("GET", "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Whether the page shows an element matching `css` now (a WebDriver "no such element"
    /// is an answer, not a failure).
    async fn present(&self, css: &str) -> bool {
        let path = format!("/session/{}/element", self.session);
        let body = json!({"using": "css selector", "value": css});
        match try_call(&self.driver.base, "POST", &path, Some(body)).await {
            Ok(v) => v[ELEMENT].is_string(),
            Err(v) if v["error"] == "no such element" => false,
            Err(v) => panic!("webdriver find {css}: {v}"),
        }
    }

    async fn find(&self, css: &str) -> String {
        let v = self
            .cmd(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        match v[ELEMENT].as_str() {
            Some(e) => e.to_owned(),
            None => panic!("no element {css} on {}: {v}", self.url().await),
        }
    }

    /// The element's text. The live refresh replaces the page's live region every few
    /// seconds, so an element found a moment ago may be gone: find it again then.
    async fn text(&self, css: &str) -> String {
        for _ in 0..10 {
            let e = self.find(css).await;
            let path = format!("/session/{}/element/{e}/text", self.session);
            match try_call(&self.driver.base, "GET", &path, None).await {
                Ok(v) => return v.as_str().unwrap_or_default().to_owned(),
                Err(v) if v["error"] == "stale element reference" => continue,
                Err(v) => panic!("webdriver text of {css}: {v}"),
            }
        }
        panic!("{css} went stale ten times in a row")
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.cmd("POST", &format!("/element/{e}/clear"), Some(json!({})))
            .await;
        self.cmd(
            "POST",
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.cmd("POST", &format!("/element/{e}/click"), Some(json!({})))
            .await;
    }

    /// Waits until the element's text satisfies `ok` (the page refreshes itself).
    async fn wait_text(&self, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // A click's navigation may still be under way: the element is not there yet.
            let t = if self.present(css).await {
                self.text(css).await
            } else {
                format!("(no element {css} yet)")
            };
            if ok(&t) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "{css} never showed {what}; it shows {t:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the address satisfies `ok` (a click's navigation may finish after it returns).
    async fn wait_url(&self, what: &str, ok: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let u = self.url().await;
            if ok(&u) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the browser never reached {what}; it is at {u}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn screenshot(&self) -> Vec<u8> {
        let v = self.cmd("GET", "/screenshot", None).await;
        base64(v.as_str().expect("a base64 screenshot"))
    }

    async fn close(self) {
        call(
            &self.driver.base,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        )
        .await;
    }
}

async fn call(base: &str, method: &str, path: &str, body: Option<Value>) -> Value {
    try_call(base, method, path, body)
        .await
        .unwrap_or_else(|v| panic!("webdriver {method} {path}: {v}"))
}

/// A WebDriver command: its `value`, or the error `value` the driver answered with.
async fn try_call(
    base: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Result<Value, Value> {
    let c = awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .finish();
    let req = c.request(method.parse().unwrap(), format!("{base}{path}"));
    let mut r = match body {
        Some(b) => req.send_json(&b).await,
        None => req.send().await,
    }
    .unwrap_or_else(|e| panic!("webdriver {method} {path}: {e}"));
    let v: Value = r.json().limit(32 << 20).await.expect("a webdriver answer");
    if r.status().is_success() {
        Ok(v["value"].clone())
    } else {
        Err(v["value"].clone())
    }
}

fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let v: Vec<u32> = chunk.iter().map(|c| val(*c) as u32).collect();
        let n = v
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, x)| acc | (x << (18 - 6 * i)));
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

async fn matter(db: &TestDb, firm: Uuid, title: &str, docs: &[(&str, &str, &str)]) -> Uuid {
    let m = Uuid::new_v4();
    let mut c = db.pool.get().await.unwrap();
    facts::create_matter(&mut c, firm, m, title).await.unwrap();
    for (t, dated, body) in docs {
        facts::add_document(
            &mut c,
            facts::NewDocument {
                document_id: Uuid::new_v4(),
                firm_id: firm,
                matter_id: m,
                title: (*t).into(),
                dated: Some(NaiveDate::parse_from_str(dated, "%Y-%m-%d").unwrap()),
                body: (*body).into(),
            },
        )
        .await
        .unwrap();
    }
    m
}

/// A node `id` on a fresh ledger, its console on a port of its own, building with the
/// [`common::flaky::Flaky`] builder, matters named "Poisoned…" failing while the flag is set.
async fn flaky_node(id: &str) -> (TestDb, Node, String, Arc<AtomicBool>) {
    let db = TestDb::new(8).await.unwrap();
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.transport.kind = TransportKind::Postgres;
    s.trigger.debounce_ms = 5;
    s.http.bind = "127.0.0.1:0".into();
    s.http.token = TOKEN.into();
    s.relay.poll_ms = 50;
    s.sweeper.interval_seconds = 0.2;
    s.node.id = id.into();
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
    (db, node, base, poisoned)
}

/// Matters of `firm`: "Acme Corp. v. Globex LLC" with three dated documents, served (fresh),
/// and one whose builds fail while the node's builder is poisoned, out of retries.
async fn acme_and_a_stuck_matter(db: &TestDb, firm: Uuid) -> (Uuid, Uuid) {
    let acme = matter(
        db,
        firm,
        "Acme Corp. v. Globex LLC",
        &[
            (
                "Purchase order 4471",
                "2024-01-15",
                "Acme ordered 400 valves from Globex for delivery by 1 March. Payment on delivery.",
            ),
            (
                "Delivery receipt",
                "2024-03-09",
                "Globex delivered 400 valves on 9 March, eight days late. 37 were cracked.",
            ),
            (
                "Notice of breach",
                "2024-03-20",
                "Acme gave notice of breach and rejected the cracked valves. It demands a refund.",
            ),
        ],
    )
    .await;
    let stuck = matter(
        db,
        firm,
        "Poisoned Holdings v. Initech",
        &[("Memo", "2024-05-01", "A memo.")],
    )
    .await;
    common::eventually(Duration::from_secs(20), "both matters settled", || {
        let db = &db;
        async move {
            let mut c = db.pool.get().await.unwrap();
            let a = briefrail::ledger::matters::state_of(&mut c, firm, acme, 5)
                .await
                .unwrap();
            let p = briefrail::ledger::matters::state_of(&mut c, firm, stuck, 5)
                .await
                .unwrap();
            use briefrail::ledger::matters::MatterState::*;
            (a == Some(Fresh) && p == Some(RetriesExhausted)).then_some(())
        }
    })
    .await;
    (acme, stuck)
}

/// `/matters` without a session lands on the login form; a wrong token is refused, the
/// right one logs in and returns there.
async fn log_in_from_a_page_without_a_session(b: &Browser<'_>, base: &str) {
    b.go(&format!("{base}/matters")).await;
    assert!(
        b.url().await.contains("/login?next=/matters"),
        "{}",
        b.url().await
    );
    b.type_into("#token", "not-it").await;
    b.click("button[type=submit]").await;
    b.wait_text("[role=alert]", "the refusal", |t| {
        t.contains("not the admin token")
    })
    .await;
    b.type_into("#token", TOKEN).await;
    b.click("button[type=submit]").await;
    b.wait_url("/matters", |u| u.ends_with("/matters")).await;
}

#[actix_rt::test]
async fn an_operator_logs_in_finds_a_matter_reads_its_brief_and_retries_another() {
    let (db, node, base, poisoned) = flaky_node("node-a").await;
    let firm = Uuid::new_v4();
    let (acme, stuck) = acme_and_a_stuck_matter(&db, firm).await;

    let driver = driver().await;
    let b = Browser::open(&driver).await;
    // A page without a session lands on the login form; the token logs in and returns there.
    log_in_from_a_page_without_a_session(&b, &base).await;

    // Search by title, open the matter.
    b.type_into("input[name=q]", "globex").await;
    b.click(".search button").await;
    b.wait_url("the search", |u| u.contains("q=globex")).await;
    let list = b.text("table.matters").await;
    assert!(
        list.contains("Acme Corp. v. Globex LLC") && !list.contains("Poisoned"),
        "{list}"
    );
    b.click("table.matters a").await;
    b.wait_url("the matter page", |u| u.contains(&acme.to_string()))
        .await;
    assert_eq!(b.text("#matter-title").await, "Acme Corp. v. Globex LLC");
    assert_eq!(b.text("#matter-state").await, "fresh");
    let brief = b.text("#brief").await;
    assert!(brief.contains("Parties: Acme Corp.; Globex LLC"), "{brief}");
    let order: Vec<usize> = [
        "Purchase order 4471",
        "Delivery receipt",
        "Notice of breach",
    ]
    .iter()
    .map(|t| {
        brief
            .find(t)
            .unwrap_or_else(|| panic!("{t} missing from the Brief: {brief}"))
    })
    .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "chronology out of order: {brief}"
    );
    assert!(brief.contains("eight days late"), "{brief}");
    if let Ok(path) = std::env::var("BRIEFRAIL_SCREENSHOT") {
        std::fs::write(&path, b.screenshot().await).expect("write the screenshot");
    }
    let png = b.screenshot().await;
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real rendering"
    );

    // The stuck matter says it ran out of retries and what to do; Retry, and the page's live
    // refresh shows it fresh once the Brief lands.
    b.go(&format!("{base}/matters?state=retries_exhausted"))
        .await;
    b.click("table.matters a").await;
    b.wait_url("the stuck matter's page", |u| {
        u.contains(&stuck.to_string())
    })
    .await;
    assert_eq!(b.text("#matter-state").await, "retries exhausted");
    assert!(
        b.text("#exhausted")
            .await
            .contains("nothing rebuilds this matter until a new demand")
    );
    poisoned.store(false, Ordering::SeqCst);
    b.click("#retry").await;
    b.wait_url("the page after Retry", |u| u.contains("notice="))
        .await;
    assert!(b.text(".notice").await.contains("Retry recorded"));
    b.wait_text("#matter-state", "fresh", |t| t == "fresh")
        .await;
    assert!(b.text("#brief").await.contains("Memo"));
    b.close().await;
    node.shutdown_within(Duration::from_secs(2)).await;
}

/// A node `node-firms` serving the console, whose builder succeeds, with the embedded transport.
async fn firms_node(db: &TestDb) -> Node {
    let mut s = Settings::defaults();
    s.database.url = SecretUrl::new(db.url.clone());
    s.transport.kind = TransportKind::Postgres;
    s.trigger.debounce_ms = 5;
    s.http.bind = "127.0.0.1:0".into();
    s.http.token = TOKEN.into();
    s.node.id = "node-firms".into();
    Node::builder(
        Arc::new(s),
        Arc::new(common::flaky::Flaky {
            poisoned: Arc::new(AtomicBool::new(false)),
        }),
    )
    .pool(db.pool.clone())
    .surface(briefrail::surface::http::admin())
    .start()
    .await
    .unwrap()
}

/// The state of the matter.
async fn state(
    db: &TestDb,
    firm: Uuid,
    m: Uuid,
) -> Option<briefrail::ledger::matters::MatterState> {
    let mut c = db.pool.get().await.unwrap();
    briefrail::ledger::matters::state_of(&mut c, firm, m, 5)
        .await
        .unwrap()
}

/// On the firms page: the firm named "Initech Legal", then paused.
async fn name_and_pause(b: &Browser<'_>, paused_firm: Uuid) {
    let id = paused_firm.to_string();
    b.wait_text("#firms", "the firm's row", |t| t.contains(&id))
        .await;
    let row = format!("form[action='/firms/{paused_firm}/set']");
    b.type_into(&format!("{row} input[name=name]"), "Initech Legal")
        .await;
    b.click(&format!("{row} button")).await;
    b.wait_text("#firms", "the firm's name", |t| t.contains("Initech Legal"))
        .await;
    b.click(&format!("form[action='/firms/{paused_firm}/pause'] button"))
        .await;
    b.wait_text("#firms", "paused", |t| t.contains("paused"))
        .await;
}

/// The firms page: an operator names a firm, pauses it (its upload waits while another firm's
/// is built), and resumes it (the waiting upload is built), all by clicking.
#[actix_rt::test]
async fn an_operator_names_pauses_and_resumes_a_firm() {
    let db = TestDb::new(8).await.unwrap();
    let node = firms_node(&db).await;
    let base = format!("http://{}", node.surface_addr().unwrap());
    let (paused_firm, other_firm) = (Uuid::new_v4(), Uuid::new_v4());
    let first = matter(
        &db,
        paused_firm,
        "Initech v. Hooli",
        &[("Memo", "2024-05-01", "A.")],
    )
    .await;
    use briefrail::ledger::matters::MatterState::Fresh;
    common::eventually(Duration::from_secs(20), "the first Brief", || async {
        (state(&db, paused_firm, first).await == Some(Fresh)).then_some(())
    })
    .await;

    let driver = driver().await;
    let b = Browser::open(&driver).await;
    b.go(&format!("{base}/login?next=/firms")).await;
    b.type_into("#token", TOKEN).await;
    b.click("button[type=submit]").await;
    b.wait_url("/firms", |u| u.ends_with("/firms")).await;
    name_and_pause(&b, paused_firm).await;
    // A pause reaches every node within `admission::PAUSE_REFRESH` (the documented bound).
    tokio::time::sleep(briefrail::actors::admission::PAUSE_REFRESH + Duration::from_millis(500))
        .await;

    // Paused: a new upload of the firm waits, while another firm's upload is built.
    let waiting = matter(
        &db,
        paused_firm,
        "Initech v. Umbrella",
        &[("Memo", "2024-05-02", "B.")],
    )
    .await;
    let other = matter(
        &db,
        other_firm,
        "Acme v. Wayne",
        &[("Memo", "2024-05-03", "C.")],
    )
    .await;
    common::eventually(
        Duration::from_secs(20),
        "the other firm's Brief",
        || async { (state(&db, other_firm, other).await == Some(Fresh)).then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_ne!(
        state(&db, paused_firm, waiting).await,
        Some(Fresh),
        "a paused firm's upload was built"
    );
    b.go(&format!("{base}/firms")).await;
    let table = b.text("#firms").await;
    assert!(
        table.contains("paused") && table.contains("1"),
        "the paused firm shows its unserved matter: {table}"
    );
    b.go(&format!("{base}/")).await;
    let oldest = b.text("#oldest-interactive").await;
    assert!(
        oldest.contains("Initech Legal"),
        "the overview names the firm whose upload waits: {oldest}"
    );
    b.go(&format!("{base}/firms")).await;

    b.click(&format!(
        "form[action='/firms/{paused_firm}/resume'] button"
    ))
    .await;
    b.wait_text("#firms", "active again", |t| !t.contains("paused"))
        .await;
    common::eventually(
        Duration::from_secs(20),
        "the resumed firm's Brief",
        || async { (state(&db, paused_firm, waiting).await == Some(Fresh)).then_some(()) },
    )
    .await;
    let mut c = db.pool.get().await.unwrap();
    let named = briefrail::ledger::fairness::resolve(&mut c, "Initech Legal")
        .await
        .unwrap();
    assert_eq!(named, paused_firm);
    drop(c);
    b.close().await;
    node.shutdown_within(Duration::from_secs(2)).await;
}

/// The bulk retry: an operator ticks two matters out of retries, presses **Retry selected**,
/// and watches the exhausted filter's count fall as their Briefs land; the third stays.
#[actix_rt::test]
async fn an_operator_retries_two_exhausted_matters_at_once() {
    let (db, node, base, poisoned) = flaky_node("node-bulk").await;
    let firm = Uuid::new_v4();
    let mut stuck = Vec::new();
    for title in ["Poisoned A v. X", "Poisoned B v. X", "Poisoned C v. X"] {
        stuck.push(matter(&db, firm, title, &[("Memo", "2024-05-01", "A memo.")]).await);
    }
    let state = |m: Uuid| {
        let db = &db;
        async move {
            let mut c = db.pool.get().await.unwrap();
            briefrail::ledger::matters::state_of(&mut c, firm, m, 5)
                .await
                .unwrap()
        }
    };
    use briefrail::ledger::matters::MatterState::{Fresh, RetriesExhausted};
    common::eventually(
        Duration::from_secs(20),
        "three matters out of retries",
        || async {
            for m in &stuck {
                if state(*m).await != Some(RetriesExhausted) {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;

    let driver = driver().await;
    let b = Browser::open(&driver).await;
    b.go(&format!(
        "{base}/login?next=/matters%3Fstate%3Dretries_exhausted"
    ))
    .await;
    b.type_into("#token", TOKEN).await;
    b.click("button[type=submit]").await;
    b.wait_url("the exhausted filter", |u| {
        u.contains("state=retries_exhausted")
    })
    .await;
    b.wait_text("#range", "three matters", |t| t == "1–3 of 3")
        .await;
    poisoned.store(false, Ordering::SeqCst);
    for m in &stuck[..2] {
        b.click(&format!("input[type=checkbox][value='{firm}:{m}']"))
            .await;
    }
    b.click("#retry-selected").await;
    b.wait_url("the page after Retry selected", |u| {
        u.contains("done=retried")
    })
    .await;
    b.wait_text(".notice", "what it did", |t| {
        t.contains("Retried 2 matter(s)")
    })
    .await;
    // The live refresh shows them leave the filter once their Briefs land.
    b.wait_text("#range", "one matter left", |t| t == "1–1 of 1")
        .await;
    let left = b.text("table.matters").await;
    assert!(
        left.contains("Poisoned C v. X") && !left.contains("Poisoned A v. X"),
        "{left}"
    );
    assert_eq!(state(stuck[0]).await, Some(Fresh));
    assert_eq!(state(stuck[1]).await, Some(Fresh));
    assert_eq!(state(stuck[2]).await, Some(RetriesExhausted));
    b.close().await;
    node.shutdown_within(Duration::from_secs(2)).await;
}
