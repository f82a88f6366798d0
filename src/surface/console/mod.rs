//! The operator console: what River UI and Oban Web give job-system operators, for briefrail,
//! served by every node's HTTP surface (`http.bind`), with no external asset.
//!
//! | page | what |
//! | --- | --- |
//! | `GET /login`, `POST /login`, `POST /logout` | the admin token traded for a session ([`auth`]) |
//! | `GET /` | matters by state, outbox backlog, dead letters, live nodes, builds per minute, running and troubled runs |
//! | `GET /matters?q=&state=&firm=&page=` | search by title, filter by state, paginated |
//! | `GET /firms/{firm}/matters/{matter}` | the Brief, freshness, claim, runs, events; **Retry** and **Rebuild** |
//! | `GET /dead-letters` | refused messages, **Replay** and **Discard** |
//! | `GET /nodes` | every node of this ledger: version, start, last seen, builds in flight, alive or gone |
//! | `GET /firms` | firms: name, weight, paused, unserved, running, oldest interactive demand; **Pause**, **Resume**, **Save**; the rail's pause |
//!
//! Pages refresh their live region every few seconds (`/assets/console.js`). Every figure is a
//! ledger read; every action is a ledger statement (a demand, a replay through the inbox).

pub mod auth;
pub mod brief_view;
pub mod firms_page;
pub mod pages;

use actix_web::{HttpResponse, web};

/// The console's routes, each resource answering 405 with `Allow` for another method.
pub fn routes(cfg: &mut web::ServiceConfig) {
    use crate::surface::http::only;
    cfg.service(only("/", "GET", web::get().to(pages::overview)))
        .service(
            web::resource("/login")
                .route(web::get().to(pages::login_form))
                .route(web::post().to(pages::login))
                .default_service(web::to(|| {
                    crate::surface::http::method_not_allowed("GET, POST")
                })),
        )
        .service(only("/logout", "POST", web::post().to(pages::logout)))
        .service(only("/matters", "GET", web::get().to(pages::matters)))
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
            web::get().to(pages::dead_letters_page),
        ))
        .service(only(
            "/dead-letters/{id}/{action:replay|discard}",
            "POST",
            web::post().to(pages::dead_letter_action),
        ))
        .service(only("/nodes", "GET", web::get().to(pages::nodes)))
        .service(only("/firms", "GET", web::get().to(firms_page::firms)))
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
