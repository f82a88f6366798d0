//! The operator console: what River UI and Oban Web give job-system operators, for briefrail,
//! served by every node's HTTP surface (`http.bind`), with no external asset.
//!
//! | page | what |
//! | --- | --- |
//! | `GET /login`, `POST /login`, `POST /logout` | the admin token traded for a session ([`auth`]) |
//! | `GET /` | matters by state, outbox backlog, dead letters, live nodes, builds per minute, running and troubled runs |
//! | `GET /matters?q=&state=&firm=&page=` | search by title, filter by state and firm, "N–M of T"; checkboxes on the matters out of retries |
//! | `POST /matters/retry` | **Retry selected** / **Retry all matching**: the bulk retry ([`bulk`]) |
//! | `GET /firms/{firm}/matters/{matter}` | the Brief, freshness, claim, runs, events; **Retry** and **Rebuild** |
//! | `GET /dead-letters?reason=&routing_key=&all=&page=` | refused messages, filtered, "N–M of T"; **Replay** and **Discard** |
//! | `POST /dead-letters/discard` | **Discard selected** / **Discard all open matching** ([`bulk`]) |
//! | `GET /nodes` | every node of this ledger: version, start, last seen, builds in flight, alive or gone |
//! | `GET /firms/{firm}` | one firm, by id or name: paused, weight, unserved, oldest interactive demand, running, out of retries; its matters |
//! | `GET /firms` | firms: name, weight, paused, unserved, running, oldest interactive demand; **Pause**, **Resume**, **Save**; the rail's pause |
//!
//! Pages refresh their live region every few seconds (`/assets/console.js`). Every figure is a
//! ledger read; every action is a ledger statement (a demand, a replay through the inbox).

pub mod auth;
pub mod brief_view;
pub mod bulk;
pub mod dead_letters_page;
pub mod firm_page;
pub mod firms_page;
pub mod matters_page;
pub mod pages;
pub mod paging;

use actix_web::{HttpResponse, web};

/// The console's routes, each resource answering 405 with `Allow` for another method.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::surface::web::responses::{method_not_allowed, only};
    cfg.service(only("/", "GET", web::get().to(pages::overview)))
        .service(
            web::resource("/login")
                .route(web::get().to(pages::login_form))
                .route(web::post().to(pages::login))
                .default_service(web::to(|| method_not_allowed("GET, POST"))),
        )
        .service(only("/logout", "POST", web::post().to(pages::logout)))
        .service(only(
            "/matters",
            "GET",
            web::get().to(matters_page::matters),
        ))
        .service(only(
            "/matters/retry",
            "POST",
            web::post().to(bulk::retry_matters),
        ))
        .service(only(
            "/firms/{firm}/matters/{matter}",
            "GET",
            web::get().to(pages::matter),
        ))
        .service(only(
            "/firms/{firm}/matters/{matter}/{action:retry|rebuild}",
            "POST",
            web::post().to(pages::matter_action),
        ))
        .service(only(
            "/dead-letters",
            "GET",
            web::get().to(dead_letters_page::dead_letters_page),
        ))
        .service(only(
            "/dead-letters/discard",
            "POST",
            web::post().to(bulk::discard_dead_letters),
        ))
        .service(only(
            "/dead-letters/{id}/{action:replay|discard}",
            "POST",
            web::post().to(dead_letters_page::dead_letter_action),
        ))
        .service(only("/nodes", "GET", web::get().to(pages::nodes)))
        .service(only("/firms", "GET", web::get().to(firms_page::firms)))
        .service(only("/firms/{firm}", "GET", web::get().to(firm_page::firm)))
        .service(only(
            "/firms/{firm}/{action:pause|resume|set}",
            "POST",
            web::post().to(firms_page::firm_action),
        ))
        .service(only(
            "/rail/{action:pause|resume}",
            "POST",
            web::post().to(firms_page::rail_action),
        ))
        .service(only("/assets/console.css", "GET", web::get().to(css)))
        .service(only("/assets/console.js", "GET", web::get().to(js)));
}

async fn css() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/css; charset=utf-8")
        .insert_header(("cache-control", "max-age=300"))
        .body(include_str!("../templates/console.css"))
}

async fn js() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header(("cache-control", "max-age=300"))
        .body(include_str!("../templates/console.js"))
}
