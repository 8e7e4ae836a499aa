//! `nexus serve`: an OpenAI-compatible gateway in front of Anthropic, Gemini
//! or OpenAI (see `nexus_drive::serve`).

use std::net::SocketAddr;

use nexus_drive::serve::{serve, ServeConfig};

use crate::args::{parse, Spec};
use crate::{out, parse_style, Fail};

const SPEC: Spec = Spec {
    command: "serve",
    values: &["listen", "upstream-style", "upstream-base-url", "api-key-env", "client-token"],
    switches: &["forward-client-key"],
    optional: &[],
};

pub const HELP: &str = "\
nexus serve --listen 127.0.0.1:PORT --upstream-style anthropic|gemini|openai
            [--upstream-base-url URL] [--api-key-env VAR] [--client-token TOKEN]
            [--forward-client-key]

Serves POST /v1/chat/completions (streaming and not) and GET /v1/models,
translating each request into one upstream call. The upstream key comes from
the environment (VAR, default the style's own variable); the client's bearer
token is never forwarded unless --forward-client-key is given. With
--client-token, clients must send it as their bearer token. SIGINT/SIGTERM
stop accepting connections and let in-flight streams finish.";

/// Runs `nexus serve` until a signal stops it.
pub fn main(args: &[String]) -> Result<i32, Fail> {
    let p = parse(args, &SPEC)?;
    let listen: SocketAddr = p
        .value("listen")
        .ok_or_else(|| Fail::usage("serve needs --listen ADDR:PORT"))?
        .parse()
        .map_err(|e| Fail::usage(format!("--listen: {e}")))?;
    let style = parse_style(p.value("upstream-style").ok_or_else(|| Fail::usage("serve needs --upstream-style"))?)?;
    let var = p.value("api-key-env").unwrap_or(style.api_key_env()).to_string();
    let mut cfg = ServeConfig::new(listen, style).api_key_from_env(&var);
    if let Some(url) = p.value("upstream-base-url") {
        cfg = cfg.upstream_base_url(url);
    }
    cfg.client_token = p.value("client-token").map(str::to_string);
    cfg.forward_client_key = p.switch("forward-client-key");
    cfg.log_requests = true;
    let server = serve(cfg).map_err(|e| Fail::runtime(e.to_string()))?;
    out(&serde_json::json!({"listening": server.local_addr().to_string(), "upstream": style.name()}).to_string());
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
