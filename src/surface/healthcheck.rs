//! `briefrail healthcheck`: asks a running node's HTTP surface whether it is ready.
//!
//! Container images built `FROM debian:bookworm-slim` have no curl or wget, and a Docker
//! `CMD-SHELL` health check runs `/bin/sh` (dash), which has no `/dev/tcp`; the binary itself is
//! the one HTTP client sure to be in the image. One `GET` over plain TCP (HTTP/1.0, no
//! keep-alive), on the address the node binds (`http.bind`; an unspecified address such as
//! `0.0.0.0` is asked on loopback), bounded by a timeout.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use crate::error::unhealthy::Unhealthy;

/// The address to ask for a node bound to `bind`: loopback for an unspecified address.
pub fn target(bind: SocketAddr) -> SocketAddr {
    let ip = match bind.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, bind.port())
}

/// `GET path` on the node bound to `bind`. `Ok` with the status line and body when it
/// answers 200.
pub async fn check(bind: &str, path: &str, timeout: Duration) -> Result<String, Unhealthy> {
    let addr = bind
        .parse::<SocketAddr>()
        .map(target)
        .map_err(|e| Unhealthy::Unreachable {
            url: format!("http://{bind}{path}"),
            bind: bind.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
    let url = format!("http://{addr}{path}");
    let timed_out = || Unhealthy::TimedOut {
        url: url.clone(),
        seconds: timeout.as_secs_f64(),
    };
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|source| Unhealthy::Unreachable {
                url: url.clone(),
                bind: bind.to_owned(),
                source,
            })?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let mut answer = Vec::new();
        let io = async {
            stream.write_all(request.as_bytes()).await?;
            // An answer past 64 KiB is not a health answer; what came is enough to judge.
            (&mut stream).take(64 * 1024).read_to_end(&mut answer).await
        };
        io.await.map_err(|source| Unhealthy::Unreachable {
            url: url.clone(),
            bind: bind.to_owned(),
            source,
        })?;
        Ok::<_, Unhealthy>(String::from_utf8_lossy(&answer).into_owned())
    };
    let answer = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| timed_out())??;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.lines().next().unwrap_or("").trim();
    let body = crate::text::clip(body.trim(), 400).to_owned();
    // "HTTP/1.1 200 OK": the code is the second word.
    if status.split_whitespace().nth(1) == Some("200") {
        Ok(format!("{url} answered {status}: {body}"))
    } else {
        Err(Unhealthy::NotOk {
            url,
            status: if status.is_empty() {
                "nothing (the connection closed)".into()
            } else {
                status.to_owned()
            },
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_bind_is_asked_on_loopback() -> Result<(), std::net::AddrParseError> {
        assert_eq!(target("0.0.0.0:8080".parse()?), "127.0.0.1:8080".parse()?);
        assert_eq!(target("[::]:8080".parse()?), "[::1]:8080".parse()?);
        assert_eq!(target("10.1.2.3:80".parse()?), "10.1.2.3:80".parse()?);
        Ok(())
    }

    #[tokio::test]
    async fn a_closed_port_is_unhealthy_naming_the_address() -> std::io::Result<()> {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            l.local_addr()?.port()
        };
        let bind = format!("0.0.0.0:{port}");
        let e = check(&bind, "/readyz", Duration::from_secs(2))
            .await
            .expect_err("nothing listens");
        let text = e.to_string();
        assert!(
            text.contains(&format!("http://127.0.0.1:{port}/readyz")) && text.contains(&bind),
            "{text}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn only_a_200_is_healthy() -> Result<(), Box<dyn std::error::Error>> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let bind = listener.local_addr()?.to_string();
        let serve = |answer: &'static str| {
            let listener = &listener;
            async move {
                let (mut s, _) = listener.accept().await?;
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await?;
                s.write_all(answer.as_bytes()).await
            }
        };
        let (ok, served) = tokio::join!(
            check(&bind, "/readyz", Duration::from_secs(2)),
            serve("HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n")
        );
        served?;
        assert!(ok?.contains("200 OK"));
        let (not, served) = tokio::join!(
            check(&bind, "/readyz", Duration::from_secs(2)),
            serve("HTTP/1.1 503 Service Unavailable\r\n\r\n{\"ready\":false}")
        );
        served?;
        let text = not.expect_err("503").to_string();
        assert!(
            text.contains("503") && text.contains("ready\":false"),
            "{text}"
        );
        Ok(())
    }
}
