//! Two ways through the person's step in this process.
//!
//! * [`LoopbackBrowser`]: shows the URL (the CLI prints it) and waits for the
//!   authorization server's redirect on a loopback redirect URI
//!   (`http://127.0.0.1:PORT/callback`, RFC 8252 §7.3).
//! * [`FollowingBrowser`]: follows the authorization URL's redirects itself
//!   until one leads to the redirect URI — for servers that authorize
//!   without a person (test servers, the conformance suite) and for tests.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use nexus_proto::Request;

use super::Browser;

/// Waits for the redirect on a loopback port.
pub struct LoopbackBrowser {
    listener: TcpListener,
    port: u16,
    wait: Duration,
    show: Box<dyn Fn(&Request) + Send + Sync>,
}

impl std::fmt::Debug for LoopbackBrowser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackBrowser").field("port", &self.port).finish_non_exhaustive()
    }
}

impl LoopbackBrowser {
    /// Listens on `127.0.0.1:port` (`0`: any free port); `show` tells the
    /// person where to go; a redirect must arrive within `wait`.
    pub fn bind(
        port: u16,
        wait: Duration,
        show: impl Fn(&Request) + Send + Sync + 'static,
    ) -> std::io::Result<LoopbackBrowser> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        Ok(LoopbackBrowser { listener, port, wait, show: Box::new(show) })
    }

    fn serve_one(&self, mut stream: TcpStream) -> Option<String> {
        stream.set_nonblocking(false).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line).ok()?;
        // `GET /callback?code=…&state=… HTTP/1.1`
        let mut parts = line.split_ascii_whitespace();
        let (method, target) = (parts.next()?, parts.next()?);
        let ours = method == "GET" && target.starts_with("/callback");
        let (status, text) = if ours {
            ("200 OK", "Authorization received; you can close this window.")
        } else {
            ("404 Not Found", "Not the authorization callback.")
        };
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
            text.len()
        );
        ours.then(|| format!("http://127.0.0.1:{}{target}", self.port))
    }
}

impl Browser for LoopbackBrowser {
    fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}/callback", self.port)
    }

    fn authorize(&self, request: &Request) -> Result<String, String> {
        (self.show)(request);
        let deadline = Instant::now() + self.wait;
        while Instant::now() < deadline {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if let Some(url) = self.serve_one(stream) {
                        return Ok(url);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(format!("the loopback redirect listener failed: {e}")),
            }
        }
        Err(format!("no authorization redirect arrived within {} s", self.wait.as_secs()))
    }
}

/// Follows the authorization URL's redirects until one names the redirect URI.
#[derive(Debug)]
pub struct FollowingBrowser {
    redirect_uri: String,
    agent: ureq::Agent,
}

impl FollowingBrowser {
    /// A browser whose redirect URI is `redirect_uri` (nothing listens there).
    pub fn new(redirect_uri: impl Into<String>) -> FollowingBrowser {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
            .build();
        FollowingBrowser { redirect_uri: redirect_uri.into(), agent: ureq::Agent::new_with_config(config) }
    }
}

impl Browser for FollowingBrowser {
    fn redirect_uri(&self) -> String {
        self.redirect_uri.clone()
    }

    fn authorize(&self, request: &Request) -> Result<String, String> {
        let mut url = request.url.clone().ok_or("the authorization request has no URL")?;
        for _ in 0..10 {
            if url.starts_with(&self.redirect_uri) {
                return Ok(url);
            }
            let resp = self.agent.get(&url).call().map_err(|e| format!("GET {}: {e}", strip_query(&url)))?;
            let status = resp.status().as_u16();
            let location = resp.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_string);
            match location {
                Some(next) if (300..400).contains(&status) => url = resolve(&url, &next),
                _ => return Err(format!("{} answered {status} without a redirect", strip_query(&url))),
            }
        }
        Err("too many redirects before the redirect URI".into())
    }
}

/// A URL without its query (which holds `state`), for error messages.
fn strip_query(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

fn resolve(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let scheme_end = base.find("://").map_or(0, |p| p + 3);
    let origin_end = base[scheme_end..].find('/').map_or(base.len(), |p| scheme_end + p);
    format!(
        "{}{}",
        &base[..origin_end],
        if location.starts_with('/') { location.to_string() } else { format!("/{location}") }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_browser_takes_the_callback() {
        let b = LoopbackBrowser::bind(0, Duration::from_secs(10), |_| {}).unwrap();
        let uri = b.redirect_uri();
        let target = format!("{uri}?code=c&state=s");
        let t = std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
            // A stray request first: it is answered 404 and does not end the wait.
            let stray = agent.get(&uri.replace("/callback", "/favicon.ico")).call().unwrap();
            assert_eq!(stray.status().as_u16(), 404);
            agent.get(&target).call().unwrap().status().as_u16()
        });
        let mut req = Request::new("authorization", "go");
        req.url = Some("https://as.example/authorize".into());
        let got = b.authorize(&req).unwrap();
        assert_eq!(t.join().unwrap(), 200);
        assert!(got.ends_with("/callback?code=c&state=s"), "{got}");
    }

    #[test]
    fn relative_locations_resolve() {
        assert_eq!(resolve("http://h:1/a/b?x", "/c?d"), "http://h:1/c?d");
        assert_eq!(resolve("http://h:1/a", "http://o/c"), "http://o/c");
    }
}
