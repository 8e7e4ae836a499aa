//! `nexus serve`: the gateway (see `nexus_drive::serve`), from a
//! configuration file or, for one upstream, from flags.

use std::net::SocketAddr;

use nexus_drive::serve::{serve, ServeConfig};
use nexus_proto::Style;

use crate::cli::StyleParser;
use crate::{out, Fail};

/// The gateway: an OpenAI-compatible endpoint in front of any provider
///
/// Serves POST /v1/chat/completions (streaming and not) and GET /v1/models over
/// HTTP/1.1 and h2c, translating each request into one upstream call, plus
/// GET /health, /ready and /metrics (Prometheus text).
///
/// Either --config FILE (upstreams, routes, client keys, limits: see the README),
/// or, for one upstream, --listen ADDR:PORT --upstream-style S and its flags.
///
/// One JSON line per request goes to stderr (no bodies, no keys) unless --quiet.
/// SIGINT/SIGTERM stop accepting connections and let in-flight streams finish.
#[derive(clap::Args)]
#[command(
    verbatim_doc_comment,
    override_usage = "\
nexus serve --config FILE [--listen ADDR:PORT] [--threads N] [--quiet]
       nexus serve --listen ADDR:PORT --upstream-style STYLE [--upstream-base-url URL] [--api-key-env VAR]
                   [--client-token TOKEN] [--forward-client-key] [--threads N] [--quiet]"
)]
pub struct ServeArgs {
    /// A TOML file: upstreams (style, base URL, key from an environment
    /// variable, headers), model routes, named client keys with concurrency
    /// limits, limits and timeouts (see the README).
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// The address to listen on (overrides the file's).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Without --config: the one upstream's wire format.
    #[arg(long, value_name = "STYLE", value_parser = StyleParser)]
    upstream_style: Option<Style>,
    /// Without --config: the upstream's base URL (default: the provider's public one).
    #[arg(long, value_name = "URL")]
    upstream_base_url: Option<String>,
    /// Without --config: the variable holding the upstream's key (default: the style's own variable).
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
    /// Without --config: the key clients must send (as their bearer token).
    #[arg(long, value_name = "TOKEN")]
    client_token: Option<String>,
    /// Forward the client's bearer token upstream as its key (never done otherwise).
    #[arg(long)]
    forward_client_key: bool,
    /// The event-loop threads (default 1, 0 = one per CPU; overrides the
    /// file's `threads`): one thread has the least latency and CPU per
    /// request, more threads more throughput when many requests are in
    /// flight at once.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// No request log on stderr.
    #[arg(long)]
    quiet: bool,
}

/// Runs `nexus serve` until a signal stops it.
pub fn main(args: ServeArgs) -> Result<i32, Fail> {
    let mut cfg = match &args.config {
        Some(path) => {
            let one_upstream = [
                ("upstream-style", args.upstream_style.is_some()),
                ("upstream-base-url", args.upstream_base_url.is_some()),
                ("api-key-env", args.api_key_env.is_some()),
                ("client-token", args.client_token.is_some()),
            ];
            if let Some((flag, _)) = one_upstream.iter().find(|(_, given)| *given) {
                return Err(Fail::usage(format!(
                    "--{flag} describes the one upstream; with --config, say it in the file"
                )));
            }
            let text = std::fs::read_to_string(path).map_err(|e| Fail::usage(format!("--config {path}: {e}")))?;
            let mut cfg = ServeConfig::from_toml(&text, |var| std::env::var(var).ok())
                .map_err(|e| Fail::usage(format!("{path}: {e}")))?;
            if let Some(l) = args.listen {
                cfg.listen = l;
            }
            if args.forward_client_key {
                cfg.forward_client_key = true;
            }
            cfg
        }
        None => {
            let listen = args.listen.ok_or_else(|| Fail::usage("serve needs --config FILE or --listen ADDR:PORT"))?;
            let style = args.upstream_style.ok_or_else(|| Fail::usage("serve needs --upstream-style (or --config)"))?;
            let var = args.api_key_env.as_deref().unwrap_or(style.api_key_env()).to_string();
            let mut cfg = ServeConfig::new(listen, style).api_key_from_env(&var);
            if let Some(url) = &args.upstream_base_url {
                cfg = cfg.upstream_base_url(url);
            }
            cfg.client_token = args.client_token.clone();
            cfg.forward_client_key = args.forward_client_key;
            cfg.log_requests = true;
            cfg
        }
    };
    if let Some(t) = args.threads {
        cfg.threads = t;
    }
    if args.quiet {
        cfg.log_requests = false;
    }
    // Every request traced when the file's [telemetry] or
    // OTEL_EXPORTER_OTLP_ENDPOINT names a collector (SPEC §22.5).
    let telemetry = match &cfg.otlp {
        Some(export) => crate::telemetry::for_endpoint(&export.endpoint, export.timeout)?,
        None => crate::telemetry::for_run(None)?,
    };
    if let Some(t) = telemetry {
        cfg = cfg.telemetry(t);
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
    // SIGHUP reads the keys file again: keys added, changed, disabled or
    // removed without a restart; connections and requests in flight stay.
    let keys = server.keys_handle();
    if let Ok(mut hups) = async_signal::Signals::new([async_signal::Signal::Hup]) {
        std::thread::spawn(move || {
            while smol::block_on(futures_lite::StreamExt::next(&mut hups)).is_some() {
                let line = match keys.reload() {
                    Ok(n) => serde_json::json!({"keys_reloaded": n}),
                    Err(e) => serde_json::json!({"keys_reload_failed": e.to_string()}),
                };
                eprintln!("{line}");
            }
        });
    }
    server.wait();
    Ok(0)
}
