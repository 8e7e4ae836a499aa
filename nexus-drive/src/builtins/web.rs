//! `webfetch`: one GET, with an SSRF guard.
//!
//! Each hop is resolved here first, every address the name resolves to is
//! checked, and only then does ureq connect — to exactly those addresses
//! (a pinned resolver), so a second, different DNS answer between the check
//! and the connection (DNS rebinding) cannot send it elsewhere. Redirects
//! are followed here, not by ureq, so every hop goes through the same check.
//! Proxies from the environment are not used: a proxy would make the
//! connection to an address this check never saw.

use std::fmt;
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nexus_proto::ToolResult;
use serde::Deserialize;
use serde_json::{json, Value};
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

use super::{cap_text, html, lenient_f64, Settings, WebSettings};
use crate::tool::{ToolContext, ToolError, ToolOutcome};

/// Turns a host name into addresses. The system resolver is the default;
/// a host can put its own in front (a fixed table, a DNS-over-HTTPS client),
/// and every address it returns is still checked.
pub trait Resolve: Send + Sync + 'static {
    /// The addresses `host` resolves to. `port` is the one the URL names, for
    /// resolvers that care.
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>>;
}

/// A closure `|host, port| -> io::Result<Vec<IpAddr>>` is a resolver.
impl<F> Resolve for F
where
    F: Fn(&str, u16) -> io::Result<Vec<IpAddr>> + Send + Sync + 'static,
{
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
        self(host, port)
    }
}

/// The operating system's resolver (`getaddrinfo`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
        Ok((host, port).to_socket_addrs()?.map(|a| a.ip()).collect())
    }
}

/// `webfetch` arguments.
#[derive(Deserialize)]
pub(crate) struct FetchArgs {
    url: String,
    #[serde(default)]
    format: Option<String>,
    /// Seconds.
    #[serde(default, deserialize_with = "lenient_f64")]
    timeout: Option<f64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    Markdown,
    Html,
}

/// A failure, as the model will read it.
struct Failure(String);

impl<E: fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(e.to_string())
    }
}

fn fail<T>(msg: impl fmt::Display) -> Result<T, ToolError> {
    Err(ToolError::msg(format!("webfetch: {msg}")))
}

pub(crate) fn fetch(s: &Settings, args: FetchArgs, ctx: &ToolContext) -> Result<ToolOutcome<Value>, ToolError> {
    let format = match args.format.as_deref().map(str::trim).filter(|f| !f.is_empty()) {
        None | Some("markdown") => Format::Markdown,
        Some("text") => Format::Text,
        Some("html") => Format::Html,
        Some(other) => return fail(format!("format must be text, markdown or html, not {other:?}")),
    };
    let web = &s.web;
    let budget = match args.timeout {
        Some(secs) if secs.is_finite() && secs > 0.0 => Duration::from_secs_f64(secs.min(86_400.0)),
        _ => web.timeout,
    }
    .min(web.max_timeout);
    let deadline = Instant::now() + budget;

    let mut url = Target::parse(&args.url).or_else(fail)?;
    let mut hops = 0u32;
    let (status, content_type, body, truncated) = loop {
        if ctx.is_cancelled() {
            return fail("cancelled");
        }
        let addrs = checked_addresses(web, &url, deadline).or_else(fail)?;
        let (status, headers, body, truncated) = get(web, &url, addrs, deadline).or_else(|e| fail(e.0))?;
        if matches!(status, 301 | 302 | 303 | 307 | 308) {
            let Some(location) = headers.location else {
                return fail(format!("HTTP {status} redirect from {} without a Location", url.text));
            };
            if hops == web.max_redirects {
                return fail(format!("too many redirects (more than {})", web.max_redirects));
            }
            hops += 1;
            url = url.join(&location).or_else(fail)?;
            continue;
        }
        break (status, headers.content_type, body, truncated);
    };

    let final_url = url.text.clone();
    let meta = json!({"status": status, "url": final_url, "contentType": content_type, "truncated": truncated});
    if !(200..300).contains(&status) {
        let snippet = String::from_utf8_lossy(&body[..body.len().min(1024)]).into_owned();
        let text = format!("webfetch: HTTP {status} from {final_url}\n{}", html::convert(&snippet, false));
        return Ok(ToolOutcome::Result(ToolResult { metadata: Some(meta), ..ToolResult::error(text.trim_end()) }));
    }
    let ct = content_type.to_ascii_lowercase();
    let textual = ct.is_empty()
        || ct.starts_with("text/")
        || ["json", "xml", "javascript", "yaml", "toml", "csv"].iter().any(|t| ct.contains(t));
    if !textual {
        return fail(format!("{final_url} is {content_type}, not text"));
    }
    let raw = String::from_utf8_lossy(&body);
    let is_html = ct.contains("html") || (ct.is_empty() && raw.trim_start().get(..15).is_some_and(looks_like_html));
    let mut text = match format {
        Format::Html => raw.into_owned(),
        Format::Text if is_html => html::convert(&raw, false),
        Format::Markdown if is_html => html::convert(&raw, true),
        _ => raw.into_owned(),
    };
    if truncated {
        text.push_str(&format!("\n[response cut at {} bytes]", web.max_bytes));
    }
    Ok(ToolOutcome::Result(ToolResult { metadata: Some(meta), ..ToolResult::ok(cap_text(text, s.output_cap)) }))
}

fn looks_like_html(start: &str) -> bool {
    let start = start.to_ascii_lowercase();
    start.starts_with("<!doctype html") || start.starts_with("<html")
}

/// A URL being fetched.
struct Target {
    uri: Uri,
    text: String,
    https: bool,
    /// Without brackets, for the resolver and for IP literals.
    host: String,
    port: u16,
}

impl Target {
    fn parse(url: &str) -> Result<Target, String> {
        // The scheme first, so `file:///x` is refused for what it is rather
        // than for the empty authority the URI parser stumbles on.
        if let Some((scheme, _)) = url.trim().split_once("://") {
            let scheme = scheme.to_ascii_lowercase();
            if scheme != "http" && scheme != "https" {
                return Err(format!("only http and https URLs can be fetched, not {scheme}:"));
            }
        }
        let uri: Uri = url.trim().parse().map_err(|e| format!("{url:?} is not a valid URL: {e}"))?;
        let https = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
            Some("https") => true,
            Some("http") => false,
            Some(other) => return Err(format!("only http and https URLs can be fetched, not {other}:")),
            None => return Err(format!("{url:?} is not an absolute http(s) URL")),
        };
        let authority = uri.authority().ok_or_else(|| format!("{url:?} has no host"))?;
        if authority.as_str().contains('@') {
            return Err("URLs with credentials in them are not fetched".into());
        }
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
        if host.is_empty() {
            return Err(format!("{url:?} has no host"));
        }
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        Ok(Target { text: uri.to_string(), uri, https, host, port })
    }

    /// Where a `Location` header points, from this URL.
    fn join(&self, location: &str) -> Result<Target, String> {
        let location = location.trim();
        let scheme = if self.https { "https" } else { "http" };
        let absolute = if location.contains("://") {
            location.to_string()
        } else if let Some(rest) = location.strip_prefix("//") {
            format!("{scheme}://{rest}")
        } else {
            let authority = self.uri.authority().map(|a| a.as_str()).unwrap_or_default();
            if location.starts_with('/') {
                format!("{scheme}://{authority}{location}")
            } else {
                let path = self.uri.path();
                let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
                let dir = if dir.is_empty() { "/" } else { dir };
                format!("{scheme}://{authority}{dir}{location}")
            }
        };
        Target::parse(&absolute)
    }
}

/// What a non-public address is, or `None` for a public one.
pub(crate) fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, ..) => "unspecified (\"this network\")",
        (127, ..) => "loopback",
        (10, ..) | (172, 16..=31, _) | (192, 168, _) => "private",
        (169, 254, _) => "link-local",
        (100, 64..=127, _) => "shared (CGNAT)",
        (192, 0, 0) => "reserved (IETF protocol assignments)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        (224..=239, ..) => "multicast",
        (240..=255, ..) => "reserved or broadcast",
        _ => return None,
    })
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let seg = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // Addresses that carry an IPv4 address are judged by it.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return non_public_v4(v4);
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if seg[..6] == [0; 6] {
        return Some("IPv4-compatible (deprecated)");
    }
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return non_public_v4(embedded(seg[6], seg[7]));
    }
    Some(match seg[0] {
        0x0064 if seg[1] == 0xff9b && seg[2] == 1 => "local-use NAT64",
        0x0100 if seg[1..4] == [0; 3] => "discard-only",
        0x2001 if seg[1] == 0x0db8 => "documentation",
        0x2001 if seg[1] == 0 => "Teredo",
        0x2002 => return non_public_v4(embedded(seg[1], seg[2])),
        s if s & 0xfe00 == 0xfc00 => "unique-local",
        s if s & 0xffc0 == 0xfe80 => "link-local",
        s if s & 0xffc0 == 0xfec0 => "site-local (deprecated)",
        s if s & 0xff00 == 0xff00 => "multicast",
        _ => return None,
    })
}

/// The addresses `url`'s host resolves to, each of them allowed; any one
/// that is not refuses the whole hop (a name that answers with both a public
/// and a private address is an attack more often than a mistake).
fn checked_addresses(web: &WebSettings, url: &Target, deadline: Instant) -> Result<Vec<SocketAddr>, String> {
    let ips = match url.host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => resolve_by(web.resolver.clone(), &url.host, url.port, deadline)?,
    };
    if ips.is_empty() {
        return Err(format!("{} resolves to no address", url.host));
    }
    let addrs: Vec<SocketAddr> = ips.iter().map(|ip| SocketAddr::new(*ip, url.port)).collect();
    for addr in &addrs {
        if web.allow_private || web.allowed.contains(addr) {
            continue;
        }
        if let Some(what) = non_public(addr.ip()) {
            return Err(format!(
                "refused {}: {} is a {what} address, and only public addresses may be fetched",
                url.text,
                if url.host == addr.ip().to_string() {
                    url.host.clone()
                } else {
                    format!("{} resolves to {}", url.host, addr.ip())
                },
            ));
        }
    }
    Ok(addrs)
}

/// Resolution bounded by the deadline (`getaddrinfo` itself cannot be).
fn resolve_by(resolver: Arc<dyn Resolve>, host: &str, port: u16, deadline: Instant) -> Result<Vec<IpAddr>, String> {
    let (tx, rx) = mpsc::sync_channel(1);
    let name = host.to_string();
    thread::spawn(move || {
        let _ = tx.send(resolver.resolve(&name, port));
    });
    match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        Ok(Ok(ips)) => Ok(ips),
        Ok(Err(e)) => Err(format!("cannot resolve {host}: {e}")),
        Err(_) => Err(format!("timed out resolving {host}")),
    }
}

/// The headers `webfetch` looks at.
struct Headers {
    location: Option<String>,
    content_type: String,
}

/// One GET to `url`, connecting only to `addrs`; the body read up to the size cap.
fn get(
    web: &WebSettings,
    url: &Target,
    addrs: Vec<SocketAddr>,
    deadline: Instant,
) -> Result<(u16, Headers, Vec<u8>, bool), Failure> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(Failure(format!("timed out fetching {}", url.text)));
    }
    let config = ureq::Agent::config_builder()
        .max_redirects(0)
        .proxy(None)
        .http_status_as_error(false)
        .timeout_global(Some(remaining))
        .user_agent(concat!("nexus-webfetch/", env!("CARGO_PKG_VERSION")))
        .accept("text/html, text/markdown;q=0.9, text/plain;q=0.8, */*;q=0.5")
        .build();
    let agent = ureq::Agent::with_parts(config, DefaultConnector::new(), Pinned(addrs));
    let mut response = agent.get(url.uri.clone()).call().map_err(|e| match e {
        ureq::Error::Timeout(_) => Failure(format!("timed out fetching {}", url.text)),
        other => Failure(format!("fetching {}: {other}", url.text)),
    })?;
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let headers = Headers { location: header("location"), content_type: header("content-type").unwrap_or_default() };
    let status = response.status().as_u16();
    let mut body = Vec::new();
    let cap = web.max_bytes;
    response
        .body_mut()
        .with_config()
        .limit(cap.saturating_add(1))
        .reader()
        .take(cap.saturating_add(1))
        .read_to_end(&mut body)
        .map_err(|e| Failure(format!("reading {}: {e}", url.text)))?;
    let truncated = body.len() as u64 > cap;
    body.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
    Ok((status, headers, body, truncated))
}

/// A resolver that answers with the addresses already checked, whatever it is asked.
#[derive(Debug)]
struct Pinned(Vec<SocketAddr>);

impl Resolver for Pinned {
    fn resolve(
        &self,
        _uri: &Uri,
        _config: &ureq::config::Config,
        _timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut out = self.empty();
        for addr in self.0.iter().take(16) {
            out.push(*addr);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_classes_the_guard_refuses() {
        let refused = [
            "0.0.0.0",
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "2001:db8::1",
        ];
        for ip in refused {
            assert!(non_public(ip.parse().unwrap()).is_some(), "{ip} should be refused");
        }
        let public = ["1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "64:ff9b::808:808"];
        for ip in public {
            assert_eq!(non_public(ip.parse().unwrap()), None, "{ip} is public");
        }
    }

    #[test]
    fn locations_join_like_a_browser() {
        let base = Target::parse("http://example.com:8080/a/b?q=1").unwrap();
        assert_eq!(base.join("/x").unwrap().text, "http://example.com:8080/x");
        assert_eq!(base.join("c").unwrap().text, "http://example.com:8080/a/c");
        assert_eq!(base.join("//other.org/y").unwrap().text, "http://other.org/y");
        assert_eq!(base.join("https://z.net/").unwrap().text, "https://z.net/");
        assert!(Target::parse("file:///etc/passwd").is_err());
        assert!(Target::parse("http://user:pw@example.com/").is_err());
        assert_eq!(Target::parse("http://[::1]:9/").unwrap().host, "::1");
    }
}
