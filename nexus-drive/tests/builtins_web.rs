//! `webfetch`: formats, caps, and the SSRF guard — checked after resolution
//! and on every redirect, against servers this test starts on loopback.
//!
//! Loopback is exactly what the guard refuses, so to reach a first server
//! at all a test allows that one address and port explicitly
//! (`webfetch_allow_address`), or allows private addresses outright. A
//! redirect from the allowed server to another loopback port must then be
//! refused, and that second server must never see a connection.
#![cfg(feature = "builtins")]

use std::io::{self, BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nexus_drive::builtins::Builtins;
use nexus_drive::{ToolContext, ToolOutcome, ToolResult};
use serde_json::{json, Value};

/// A loopback HTTP/1.1 server answering every request with what `route` says.
struct Server {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    hosts: Arc<Mutex<Vec<String>>>,
}

/// A response: status line and headers (without the final blank line) and a body.
type Route = dyn Fn(&str) -> (String, Vec<u8>) + Send + Sync;

fn serve(route: impl Fn(&str) -> (String, Vec<u8>) + Send + Sync + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let hosts = Arc::new(Mutex::new(Vec::new()));
    let route: Arc<Route> = Arc::new(route);
    {
        let (hits, hosts) = (hits.clone(), hosts.clone());
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                hits.fetch_add(1, Ordering::SeqCst);
                let route = route.clone();
                let hosts = hosts.clone();
                thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).is_err() {
                        return;
                    }
                    let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_string();
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                            break;
                        }
                        if let Some(host) = header.to_ascii_lowercase().strip_prefix("host:") {
                            hosts.lock().unwrap().push(host.trim().to_string());
                        }
                    }
                    let (head, body) = route(&path);
                    if head.is_empty() {
                        // Never answer (the timeout test).
                        thread::sleep(Duration::from_secs(30));
                        return;
                    }
                    let _ = write!(stream, "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                    let _ = stream.write_all(&body);
                });
            }
        });
    }
    Server { addr, hits, hosts }
}

fn ok(content_type: &str, body: &str) -> (String, Vec<u8>) {
    (format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}"), body.as_bytes().to_vec())
}

fn redirect(to: &str) -> (String, Vec<u8>) {
    (format!("HTTP/1.1 302 Found\r\nLocation: {to}"), Vec::new())
}

fn fetch(b: &Builtins, args: Value) -> ToolResult {
    match b.call("webfetch", args, &ToolContext::new("c1", "webfetch")) {
        Ok(ToolOutcome::Result(r)) => r,
        Ok(ToolOutcome::Done(v)) => ToolResult::ok(v.as_str().unwrap_or_default()),
        Ok(ToolOutcome::Pending(r)) => panic!("unexpected suspension: {r:?}"),
        Err(e) => ToolResult::error(e.message()),
    }
}

fn webfetch() -> Builtins {
    Builtins::default().only(["webfetch"]).unwrap()
}

const PAGE: &str = "<html><head><title>x</title><script>var secret = 1;</script></head><body>\
    <h2>Docs</h2><p>Read <a href=\"/guide\">the guide</a> &amp; enjoy.</p></body></html>";

#[test]
fn loopback_is_refused_by_default_before_any_connection() {
    let server = serve(|_| ok("text/plain", "you should not see this"));
    let b = webfetch();
    for url in
        [format!("http://127.0.0.1:{}/", server.addr.port()), format!("http://localhost:{}/", server.addr.port())]
    {
        let r = fetch(&b, json!({"url": url}));
        assert!(r.is_error, "{url}: {r:?}");
        assert!(r.output.contains("loopback address"), "{url}: {}", r.output);
    }
    assert_eq!(server.hits.load(Ordering::SeqCst), 0, "the guard refused before connecting");
}

#[test]
fn a_redirect_to_loopback_is_refused_even_from_an_allowed_server() {
    let inner = serve(|_| ok("text/plain", "internal secret"));
    let inner_port = inner.addr.port();
    let outer = serve(move |path| match path {
        "/start" => redirect(&format!("http://127.0.0.1:{inner_port}/secret")),
        "/by-name" => redirect(&format!("http://localhost:{inner_port}/secret")),
        "/hop" => redirect("/page"),
        _ => ok("text/plain", "outer page"),
    });
    // The outer server's exact address is allowed; nothing else on loopback is.
    let b = webfetch().webfetch_allow_address(outer.addr);
    let base = format!("http://127.0.0.1:{}", outer.addr.port());

    // Control: redirects are followed, and the allowed server is reachable.
    let r = fetch(&b, json!({"url": format!("{base}/hop")}));
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.output, "outer page");

    for start in ["/start", "/by-name"] {
        let r = fetch(&b, json!({"url": format!("{base}{start}")}));
        assert!(r.is_error, "{start}: {r:?}");
        assert!(r.output.contains(&format!(":{inner_port}/secret")), "{start}: {}", r.output);
        assert!(r.output.contains("loopback address"), "{start}: {}", r.output);
        assert!(!r.output.contains("internal secret"));
    }
    assert_eq!(inner.hits.load(Ordering::SeqCst), 0, "the redirect target never saw a connection");
}

#[test]
fn every_resolved_address_is_checked_and_the_connection_goes_to_the_checked_one() {
    let server = serve(|_| ok("text/plain", "pinned"));
    let port = server.addr.port();
    // A resolver seam: `docs.example` resolves (only here) to the test server;
    // `mixed.example` answers with a public and a private address.
    let resolver = move |host: &str, _port: u16| -> io::Result<Vec<IpAddr>> {
        match host {
            "docs.example" => Ok(vec!["127.0.0.1".parse().unwrap()]),
            "mixed.example" => Ok(vec!["93.184.216.34".parse().unwrap(), "10.1.2.3".parse().unwrap()]),
            _ => Err(io::Error::new(io::ErrorKind::NotFound, "no such host")),
        }
    };
    let b = webfetch().webfetch_resolver(resolver).webfetch_allow_address(server.addr);

    let r = fetch(&b, json!({"url": format!("http://docs.example:{port}/")}));
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.output, "pinned");
    assert_eq!(server.hosts.lock().unwrap().as_slice(), [format!("docs.example:{port}")]);

    let r = fetch(&b, json!({"url": "http://mixed.example/"}));
    assert!(r.is_error, "{r:?}");
    assert!(r.output.contains("mixed.example resolves to 10.1.2.3"), "{}", r.output);
    assert!(r.output.contains("private address"), "{}", r.output);

    let r = fetch(&b, json!({"url": "http://unknown.example/"}));
    assert!(r.is_error && r.output.contains("cannot resolve unknown.example"), "{r:?}");
}

#[test]
fn only_http_and_https_urls_are_fetched() {
    let b = webfetch();
    for url in [
        "file:///etc/passwd",
        "ftp://example.com/x",
        "gopher://example.com/",
        "example.com/page",
        "http://u:p@example.com/",
    ] {
        let r = fetch(&b, json!({"url": url}));
        assert!(r.is_error, "{url}: {r:?}");
    }
    let r = fetch(&b, json!({"url": "file:///etc/passwd"}));
    assert!(r.output.contains("only http and https"), "{}", r.output);
}

#[test]
fn html_becomes_markdown_or_text_and_html_stays_html() {
    let server = serve(|path| match path {
        "/plain" => ok("text/plain; charset=utf-8", "<b>not html</b>"),
        "/json" => ok("application/json", "{\"a\":1}"),
        "/image" => ok("image/png", "\u{89}PNG"),
        "/missing" => ("HTTP/1.1 404 Not Found\r\nContent-Type: text/html".into(), b"<p>no such page</p>".to_vec()),
        _ => ok("text/html; charset=utf-8", PAGE),
    });
    let b = webfetch().webfetch_allow_private(true);
    let url = |p: &str| format!("http://{}{p}", server.addr);

    let r = fetch(&b, json!({"url": url("/")}));
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.output, "## Docs\n\nRead [the guide](/guide) & enjoy.");
    let r = fetch(&b, json!({"url": url("/"), "format": "text"}));
    assert_eq!(r.output, "Docs\n\nRead the guide & enjoy.");
    let r = fetch(&b, json!({"url": url("/"), "format": "html"}));
    assert_eq!(r.output, PAGE);
    let meta = r.metadata.unwrap();
    assert_eq!(meta["status"], 200);
    assert_eq!(meta["contentType"], "text/html; charset=utf-8");

    assert_eq!(fetch(&b, json!({"url": url("/plain")})).output, "<b>not html</b>");
    assert_eq!(fetch(&b, json!({"url": url("/json")})).output, "{\"a\":1}");
    let r = fetch(&b, json!({"url": url("/image")}));
    assert!(r.is_error && r.output.contains("image/png, not text"), "{r:?}");
    let r = fetch(&b, json!({"url": url("/missing")}));
    assert!(r.is_error && r.output.starts_with("webfetch: HTTP 404"), "{r:?}");
    assert!(r.output.contains("no such page"), "{r:?}");
    let r = fetch(&b, json!({"url": url("/"), "format": "pdf"}));
    assert!(r.is_error && r.output.contains("format must be"), "{r:?}");
}

#[test]
fn size_time_and_redirect_caps() {
    let big = "x".repeat(10_000);
    let server = serve(move |path| match path {
        "/big" => ok("text/plain", &big),
        "/loop" => redirect("/loop"),
        "/never" => (String::new(), Vec::new()),
        _ => ok("text/plain", "fine"),
    });
    let b = webfetch().webfetch_allow_private(true).webfetch_max_bytes(100).webfetch_max_redirects(3);
    let url = |p: &str| format!("http://{}{p}", server.addr);

    let r = fetch(&b, json!({"url": url("/big")}));
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.output, format!("{}\n[response cut at 100 bytes]", "x".repeat(100)));

    let before = server.hits.load(Ordering::SeqCst);
    let r = fetch(&b, json!({"url": url("/loop")}));
    assert!(r.is_error && r.output.contains("too many redirects (more than 3)"), "{r:?}");
    assert_eq!(server.hits.load(Ordering::SeqCst) - before, 4, "the first request and three redirects");

    let started = Instant::now();
    let r = fetch(&b, json!({"url": url("/never"), "timeout": 0.5}));
    assert!(r.is_error && r.output.contains("timed out"), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
}
