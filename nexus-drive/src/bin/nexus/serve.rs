//! `nexus serve`: the gateway (see `nexus_drive::serve`), from a
//! configuration file or, for one upstream, from flags.

use std::net::SocketAddr;

use nexus_drive::serve::{serve, ServeConfig};

use crate::args::{parse, Spec};
use crate::{out, parse_style, Fail};

const SPEC: Spec = Spec {
    command: "serve",
    values: &["config", "listen", "upstream-style", "upstream-base-url", "api-key-env", "client-token", "threads"],
    switches: &["forward-client-key", "quiet"],
    optional: &[],
};

pub const HELP: &str = "\
nexus serve --config gateway.toml [--listen ADDR:PORT] [--threads N] [--quiet]
nexus serve --listen 127.0.0.1:PORT --upstream-style anthropic|gemini|openai
            [--upstream-base-url URL] [--api-key-env VAR] [--client-token TOKEN]
            [--forward-client-key] [--threads N] [--quiet]

Serves POST /v1/chat/completions (streaming and not) and GET /v1/models over
HTTP/1.1 and h2c, translating each request into one upstream call, plus
GET /health, /ready and /metrics (Prometheus text).

--config reads upstreams (style, base URL, key from an environment variable,
headers), model routes, named client keys with concurrency limits, limits and
timeouts from a TOML file (see the README); --listen overrides its address.
Without it, the flags describe one upstream: its key comes from the
environment (VAR, default the style's own variable); the client's bearer
token is never forwarded unless --forward-client-key is given; with
--client-token, clients must send it as their key.

--threads sets the event-loop threads (default 1, 0 = one per CPU; overrides
the file's `threads`): one thread has the least latency and CPU per request,
more threads more throughput when many requests are in flight at once.

One JSON line per request goes to stderr (no bodies, no keys) unless --quiet.
SIGINT/SIGTERM stop accepting connections and let in-flight streams finish.";

/// Runs `nexus serve` until a signal stops it.
pub fn main(args: &[String]) -> Result<i32, Fail> {
    let p = parse(args, &SPEC)?;
    let listen: Option<SocketAddr> =
        p.value("listen").map(|l| l.parse().map_err(|e| Fail::usage(format!("--listen: {e}")))).transpose()?;
    let mut cfg = match p.value("config") {
        Some(path) => {
            for flag in ["upstream-style", "upstream-base-url", "api-key-env", "client-token"] {
                if p.value(flag).is_some() {
                    return Err(Fail::usage(format!(
                        "--{flag} describes the one upstream; with --config, say it in the file"
                    )));
                }
            }
            let text = std::fs::read_to_string(path).map_err(|e| Fail::usage(format!("--config {path}: {e}")))?;
            let mut cfg = ServeConfig::from_toml(&text, |var| std::env::var(var).ok())
                .map_err(|e| Fail::usage(format!("{path}: {e}")))?;
            if let Some(l) = listen {
                cfg.listen = l;
            }
            if p.switch("forward-client-key") {
                cfg.forward_client_key = true;
            }
            cfg
        }
        None => {
            let listen = listen.ok_or_else(|| Fail::usage("serve needs --config FILE or --listen ADDR:PORT"))?;
            let style = parse_style(
                p.value("upstream-style").ok_or_else(|| Fail::usage("serve needs --upstream-style (or --config)"))?,
            )?;
            let var = p.value("api-key-env").unwrap_or(style.api_key_env()).to_string();
            let mut cfg = ServeConfig::new(listen, style).api_key_from_env(&var);
            if let Some(url) = p.value("upstream-base-url") {
                cfg = cfg.upstream_base_url(url);
            }
            cfg.client_token = p.value("client-token").map(str::to_string);
            cfg.forward_client_key = p.switch("forward-client-key");
            cfg.log_requests = true;
            cfg
        }
    };
    if let Some(t) = p.value("threads") {
        cfg.threads = t.parse().map_err(|e| Fail::usage(format!("--threads {t}: {e}")))?;
    }
    if p.switch("quiet") {
        cfg.log_requests = false;
    }
    let upstreams: Vec<String> = match cfg.upstreams.is_empty() {
        true => vec![cfg.upstream_style.name().to_string()],
        false => cfg.upstreams.iter().map(|u| u.name.clone()).collect(),
    };
    let server = serve(cfg).map_err(|e| Fail::runtime(e.to_string()))?;
    let upstream = upstreams.first().cloned().unwrap_or_default();
    out(&serde_json::json!({"listening": server.local_addr().to_string(), "upstream": upstream, "upstreams": upstreams})
        .to_string());
    let stop = server.shutdown_handle();
    let signals = async_signal::Signals::new([async_signal::Signal::Int, async_signal::Signal::Term])
        .map_err(|e| Fail::runtime(format!("cannot install signal handlers: {e}")))?;
    std::thread::spawn(move || {
        let mut signals = signals;
        smol::block_on(futures_lite::StreamExt::next(&mut signals));
        stop.shutdown();
    });
    server.wait();
    Ok(0)
}
