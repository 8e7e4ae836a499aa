//! One connection: its requests, their routes, and the upstream call each
//! chat completion makes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nexus_proto::translate::{
    error_to_openai, openai_request_bytes_to, response_to_openai_with, CompletionMeta, TranslateError,
    TranslatedRequest,
};
use nexus_proto::{SseDecoder, Style};
use serde_json::{json, Value};

use super::http::{write_response, Chunked, Conn, Limits, ReadError, Request};
use super::State;

/// Error bodies read from the upstream are capped here: they are messages.
const MAX_ERROR_BODY: usize = 1024 * 1024;

/// What answering a request left behind.
struct Answered {
    status: u16,
    /// The connection must close (a stream ended by EOF, a client gone, …).
    close: bool,
}

/// Answers a connection over the limit and closes it.
pub(super) fn refuse_busy(mut stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let e = server_error(503, "the gateway is at its connection limit; retry shortly", "overloaded");
    let _ = write_response(&mut stream, 503, "application/json", &[], e.to_json().to_string().as_bytes(), true);
}

/// Serves one connection until it closes, idles out, or the server stops.
pub(super) fn connection(stream: TcpStream, state: &State) {
    let Ok(mut conn) = Conn::new(stream) else {
        return;
    };
    // A client that stops reading must not hold a thread forever.
    let _ = conn.stream.set_write_timeout(Some(Duration::from_secs(60)));
    let limits = Limits {
        max_body: state.config.max_body_bytes,
        idle: state.config.idle_timeout,
        request: state.config.request_timeout,
    };
    loop {
        let req = match conn.read_request(&limits, &state.stopping) {
            Ok(req) => req,
            Err(ReadError::Closed | ReadError::Io) => return,
            Err(ReadError::TooLarge(max)) => {
                let e = TranslateError {
                    status: 413,
                    message: format!("the request body is over the {max}-byte limit"),
                    kind: "invalid_request_error".into(),
                    param: None,
                    code: Some("request_too_large".into()),
                };
                send_error(&mut conn.stream, &e, &[], true);
                return;
            }
            Err(ReadError::Malformed(why)) => {
                let e = TranslateError {
                    param: None,
                    ..TranslateError::invalid("", format!("malformed HTTP request: {why}"))
                };
                send_error(&mut conn.stream, &e, &[], true);
                return;
            }
        };
        let started = Instant::now();
        let close = req.close || state.stopping.load(Ordering::SeqCst);
        let answered = route(&req, &mut conn.stream, state, close);
        if state.config.log_requests {
            eprintln!(
                "nexus serve: {} {} {} {}ms",
                req.method,
                req.path(),
                answered.status,
                started.elapsed().as_millis()
            );
        }
        if close || answered.close {
            return;
        }
    }
}

fn route(req: &Request, out: &mut TcpStream, state: &State, close: bool) -> Answered {
    let path = req.path().trim_end_matches('/');
    let path = path.strip_prefix("/v1").unwrap_or(path);
    if let Some(token) = &state.config.client_token {
        if bearer(req) != Some(token.as_str()) {
            let e = TranslateError {
                status: 401,
                message: "Incorrect API key provided.".into(),
                kind: "authentication_error".into(),
                param: None,
                code: Some("invalid_api_key".into()),
            };
            return send_error(out, &e, &[], close);
        }
    }
    let allow = |method: &'static str| {
        let e = TranslateError {
            status: 405,
            message: format!("{} is not allowed on {}; use {method}", req.method, req.path()),
            kind: "invalid_request_error".into(),
            param: None,
            code: Some("method_not_allowed".into()),
        };
        (e, [("allow", method.to_string())])
    };
    match path {
        "/chat/completions" if req.method == "POST" => chat_completion(req, out, state, close),
        "/chat/completions" => {
            let (e, h) = allow("POST");
            send_error(out, &e, &h, close)
        }
        "/models" if req.method == "GET" => models(req, out, state, None, close),
        p if p.starts_with("/models/") && req.method == "GET" => {
            let id = p.trim_start_matches("/models/");
            models(req, out, state, Some(id), close)
        }
        "/models" => {
            let (e, h) = allow("GET");
            send_error(out, &e, &h, close)
        }
        _ => {
            let e = TranslateError {
                status: 404,
                message: format!("Invalid URL ({} {})", req.method, req.path()),
                kind: "invalid_request_error".into(),
                param: None,
                code: Some("unknown_url".into()),
            };
            send_error(out, &e, &[], close)
        }
    }
}

/// `POST /v1/chat/completions`: translate, one upstream call, translate back.
fn chat_completion(req: &Request, out: &mut TcpStream, state: &State, close: bool) -> Answered {
    let style = state.config.upstream_style;
    let t = match openai_request_bytes_to(style, &req.body) {
        Ok(t) => t,
        Err(e) => return send_error(out, &e, &[], close),
    };
    let meta = CompletionMeta { id: completion_id(state), model: t.model.clone(), created: now_secs() };
    let key = upstream_key(req, state);
    let response = match send_upstream(state, "POST", &t.url(&state.base_url), &t.headers(key.as_deref()), &t.body) {
        Ok(r) => r,
        Err(e) => return send_error(out, &e, &[], close),
    };
    let status = response.status().as_u16();
    let retry_after = retry_after(&response);
    let mut body = response.into_body().into_reader();
    if !(200..300).contains(&status) {
        let bytes = read_capped(&mut body, MAX_ERROR_BODY).unwrap_or_else(|(partial, _)| partial);
        if style == Style::OpenAi {
            // The upstream already speaks OpenAI: its own error, as sent.
            return send(out, status, &bytes, &retry_after, close);
        }
        return send_error(out, &error_to_openai(style, status, &bytes), &retry_after, close);
    }
    if t.stream {
        return stream(&t, body, out, meta, close);
    }
    let bytes = match read_capped(&mut body, state.config.max_upstream_body_bytes) {
        Ok(bytes) => bytes,
        Err((_, why)) => return send_error(out, &server_error(502, &why, "upstream_body"), &[], close),
    };
    if style == Style::OpenAi {
        return send(out, status, &bytes, &[], close);
    }
    match response_to_openai_with(style, &bytes, &meta) {
        Ok(v) => send(out, 200, v.to_string().as_bytes(), &[], close),
        Err(e) => send_error(out, &e, &[], close),
    }
}

/// Pipes an upstream event stream to the client as OpenAI chunks, each
/// written and flushed as soon as it is complete.
fn stream(
    t: &TranslatedRequest,
    mut body: ureq::BodyReader<'static>,
    out: &mut TcpStream,
    meta: CompletionMeta,
    close: bool,
) -> Answered {
    let Ok(mut client) = Chunked::start(out, close) else {
        return Answered { status: 200, close: true };
    };
    let mut buf = vec![0u8; 16 * 1024];
    let mut ended_cleanly = true;
    if t.style == Style::OpenAi {
        // Same format both sides: the bytes go through as they come.
        loop {
            match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if client.send(buf.get(..n).unwrap_or_default()).is_err() {
                        return Answered { status: 200, close: true };
                    }
                }
                Err(e) => {
                    let e = server_error(502, &format!("the upstream stream failed: {e}"), "upstream_stream");
                    // The blank line ends whatever event the upstream left half-written.
                    let _ = client.send(format!("\n\ndata: {}\n\n", e.to_json()).as_bytes());
                    ended_cleanly = false;
                    break;
                }
            }
        }
    } else {
        let mut translator = t.stream_translator(meta);
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        loop {
            let mut lines = Vec::new();
            let done = match body.read(&mut buf) {
                Ok(0) => {
                    decoder.finish(&mut events);
                    lines.extend(events.drain(..).flat_map(|ev| translator.push(&ev)));
                    lines.extend(translator.finish());
                    true
                }
                Ok(n) => {
                    decoder.feed(buf.get(..n).unwrap_or_default(), &mut events);
                    lines.extend(events.drain(..).flat_map(|ev| translator.push(&ev)));
                    // After an error line nothing more is read: the upstream is done for.
                    translator.error().is_some()
                }
                Err(e) => {
                    let e = server_error(502, &format!("the upstream stream failed: {e}"), "upstream_stream");
                    lines.extend(translator.abort(e));
                    true
                }
            };
            if client.send(lines.concat().as_bytes()).is_err() {
                // The client left: dropping the upstream body closes that connection too.
                return Answered { status: 200, close: true };
            }
            if done {
                ended_cleanly = translator.error().is_none();
                break;
            }
        }
    }
    if client.end().is_err() {
        return Answered { status: 200, close: true };
    }
    Answered { status: 200, close: close || !ended_cleanly }
}

/// `GET /v1/models` and `GET /v1/models/{id}`: the configured models, or the upstream's.
fn models(req: &Request, out: &mut TcpStream, state: &State, id: Option<&str>, close: bool) -> Answered {
    let owner = state.config.upstream_style.name();
    let names = if state.config.models.is_empty() {
        match upstream_models(req, state) {
            Ok(names) => names,
            Err(e) => return send_error(out, &e, &[], close),
        }
    } else {
        state.config.models.clone()
    };
    let object = |name: &str| json!({ "id": name, "object": "model", "created": 0, "owned_by": owner });
    match id {
        None => {
            let list = json!({ "object": "list", "data": names.iter().map(|n| object(n)).collect::<Vec<_>>() });
            send(out, 200, list.to_string().as_bytes(), &[], close)
        }
        Some(id) if names.iter().any(|n| n == id) => send(out, 200, object(id).to_string().as_bytes(), &[], close),
        Some(id) => {
            let e = TranslateError {
                status: 404,
                message: format!("The model `{id}` does not exist or you do not have access to it."),
                kind: "invalid_request_error".into(),
                param: None,
                code: Some("model_not_found".into()),
            };
            send_error(out, &e, &[], close)
        }
    }
}

/// The upstream's model list, as model ids.
fn upstream_models(req: &Request, state: &State) -> Result<Vec<String>, TranslateError> {
    let style = state.config.upstream_style;
    let base = state.base_url.trim_end_matches('/');
    let url = match style {
        Style::Anthropic if base.ends_with("/v1") => format!("{base}/models?limit=1000"),
        Style::Anthropic => format!("{base}/v1/models?limit=1000"),
        Style::OpenAi | Style::OpenAiResponses => format!("{base}/models"),
        Style::Gemini => format!("{base}/models?pageSize=1000"),
    };
    let mut headers = style.base_headers();
    headers.retain(|(k, _)| k != "content-type");
    if let Some(key) = upstream_key(req, state) {
        headers.push(style.auth_header(&key));
    }
    let response = send_upstream(state, "GET", &url, &headers, &[])?;
    let status = response.status().as_u16();
    let mut body = response.into_body().into_reader();
    let bytes =
        read_capped(&mut body, MAX_ERROR_BODY * 8).map_err(|(_, why)| server_error(502, &why, "upstream_body"))?;
    if !(200..300).contains(&status) {
        return Err(error_to_openai(style, status, &bytes));
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
        server_error(502, &format!("the upstream model list is not JSON: {e}"), "upstream_decode_error")
    })?;
    let (items, key) = match style {
        Style::Gemini => (v.get("models"), "name"),
        _ => (v.get("data"), "id"),
    };
    Ok(items
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get(key).and_then(Value::as_str))
        .map(|name| name.strip_prefix("models/").unwrap_or(name).to_string())
        .collect())
}

/// One upstream exchange up to its response head.
fn send_upstream(
    state: &State,
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<ureq::http::Response<ureq::Body>, TranslateError> {
    let mut builder = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let request = builder
        .body(body)
        .map_err(|e| server_error(500, &format!("the upstream request could not be built: {e}"), "upstream_request"))?;
    state.agent.run(request).map_err(|e| match e {
        ureq::Error::Timeout(_) => {
            server_error(504, &format!("the upstream did not answer in time: {e}"), "upstream_timeout")
        }
        e => server_error(502, &format!("the upstream could not be reached: {e}"), "upstream_unreachable"),
    })
}

/// The key sent upstream: the configured one, or — only when configured so —
/// the client's own bearer token.
fn upstream_key(req: &Request, state: &State) -> Option<String> {
    if state.config.forward_client_key {
        if let Some(token) = bearer(req) {
            return Some(token.to_string());
        }
    }
    state.config.api_key.clone()
}

fn bearer(req: &Request) -> Option<&str> {
    let value = req.header("authorization")?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

/// `Retry-After` from an upstream refusal, passed on when it is delay-seconds
/// (the OpenAI SDKs honour it).
fn retry_after(response: &ureq::http::Response<ureq::Body>) -> Vec<(&'static str, String)> {
    response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .filter(|v| nexus_proto::provider::parse_retry_after(v).is_some())
        .map(|v| vec![("retry-after", v.trim().to_string())])
        .unwrap_or_default()
}

/// Reads a body up to `cap` bytes; over it (or on a read error) returns
/// what was read and why it stopped.
fn read_capped(body: &mut impl Read, cap: usize) -> Result<Vec<u8>, (Vec<u8>, String)> {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match body.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => {
                out.extend_from_slice(buf.get(..n).unwrap_or_default());
                if out.len() > cap {
                    return Err((out, format!("the upstream response is over the {cap}-byte limit")));
                }
            }
            Err(e) => return Err((out, format!("the upstream response could not be read: {e}"))),
        }
    }
}

fn server_error(status: u16, message: &str, code: &str) -> TranslateError {
    TranslateError {
        status,
        message: message.to_string(),
        kind: "server_error".to_string(),
        param: None,
        code: Some(code.to_string()),
    }
}

fn send(out: &mut impl Write, status: u16, body: &[u8], extra: &[(&str, String)], close: bool) -> Answered {
    let written = write_response(out, status, "application/json", extra, body, close);
    Answered { status, close: close || written.is_err() }
}

fn send_error(out: &mut impl Write, e: &TranslateError, extra: &[(&str, String)], close: bool) -> Answered {
    send(out, e.status, e.to_json().to_string().as_bytes(), extra, close)
}

/// `chatcmpl-<process epoch><counter>`: unique per response, so the call ids
/// derived from it never repeat within a conversation.
fn completion_id(state: &State) -> String {
    let n = state.counter.fetch_add(1, Ordering::Relaxed);
    format!("chatcmpl-{:016x}{n:x}", state.epoch)
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}
