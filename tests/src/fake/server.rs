//! The accept loop, one thread per connection, routing, and the model-call
//! pipeline every style shares: auth → JSON → request checks → model →
//! transcript balance → turn → `expect_final` → fault → answer.

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};

use serde_json::Value;

use super::faults::{self, Framing};
use super::http::{write_full, Conn, ReadError, Request};
use super::reply::{self, Reply};
use super::script::{ExpectFinal, Scripts, Turn, TurnUsage};
use super::wire::{stable_id, Ctx, Parsed, Reject};
use super::{anthropic, context, gemini, openai, output, responses, RecordedRequest, Style};

/// Connections served at once; more are closed on arrival. High enough for
/// a gateway relaying a thousand concurrent streams.
const MAX_CONNECTIONS: usize = 4096;

/// State every connection thread shares.
pub struct Shared {
    pub scripts: Scripts,
    pub requests: Mutex<Vec<RecordedRequest>>,
    pub attempts: Mutex<HashMap<(String, usize), u32>>,
    pub failures: Mutex<Vec<String>>,
    pub shutdown: Arc<AtomicBool>,
    /// Replies the client stopped taking before their end (a write failed).
    pub cut_by_client: AtomicU64,
    /// Connections this server has closed.
    pub closed: Arc<AtomicU64>,
    /// The scripts' gate, as requests arrive at it.
    pub gate: super::gate::GateState,
    next_connection: AtomicU64,
}

/// Locks a mutex even if a thread panicked while holding it: the data are
/// plain records, still meaningful.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn new(scripts: Scripts) -> Shared {
        Shared {
            scripts,
            requests: Mutex::new(Vec::new()),
            attempts: Mutex::new(HashMap::new()),
            failures: Mutex::new(Vec::new()),
            shutdown: Arc::new(AtomicBool::new(false)),
            cut_by_client: AtomicU64::new(0),
            closed: Arc::default(),
            gate: super::gate::GateState::default(),
            next_connection: AtomicU64::new(0),
        }
    }
}

/// Accepts until the shutdown flag is set (the owner then connects once to
/// wake this loop), then waits for every connection thread.
pub fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    for stream in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let (done, running): (Vec<_>, Vec<_>) = workers.into_iter().partition(|h| h.is_finished());
        for h in done {
            let _ = h.join();
        }
        workers = running;
        if workers.len() >= MAX_CONNECTIONS {
            drop(stream);
            continue;
        }
        let shared = Arc::clone(&shared);
        let id = shared.next_connection.fetch_add(1, Ordering::SeqCst);
        let spawned =
            thread::Builder::new().name(format!("fake-provider-conn-{id}")).spawn(move || serve(stream, &shared, id));
        if let Ok(h) = spawned {
            workers.push(h);
        }
    }
    for h in workers {
        let _ = h.join();
    }
}

fn serve(stream: TcpStream, shared: &Shared, connection: u64) {
    let Ok(mut conn) = Conn::new(stream, Arc::clone(&shared.shutdown)) else {
        return;
    };
    loop {
        match conn.read_request() {
            Ok(req) => {
                let close = req.wants_close();
                let http11 = req.http11;
                let (reply, record) = handle(shared, &req, connection);
                lock(&shared.requests).push(record);
                match reply::write(&mut conn.stream, &reply, http11, close, &shared.shutdown) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(_) => {
                        shared.cut_by_client.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                }
            }
            Err(ReadError::Bad(status, why)) => {
                let body = format!("{{\"error\":{{\"message\":\"{why}\"}}}}");
                let _ = write_full(&mut conn.stream, status, "application/json", &[], true, body.as_bytes());
                break;
            }
            Err(_) => break,
        }
    }
    let _ = conn.stream.shutdown(std::net::Shutdown::Both);
    shared.closed.fetch_add(1, Ordering::SeqCst);
}

fn record_of(req: &Request, connection: u64) -> RecordedRequest {
    RecordedRequest {
        connection,
        method: req.method.clone(),
        target: req.target.clone(),
        headers: req.headers.clone(),
        body: req.body.clone(),
        json: None,
        style: None,
        model: None,
        turn: None,
        attempt: None,
        status: None,
        sent_continue: req.sent_continue,
    }
}

/// Routes one request; returns the reply and what to record about it.
fn handle(shared: &Shared, req: &Request, connection: u64) -> (Reply, RecordedRequest) {
    let mut record = record_of(req, connection);
    let path = req.path();
    let reply = if path == "/v1/messages" {
        record.style = Some(Style::Anthropic);
        only_post(req, Style::Anthropic).unwrap_or_else(|| model_call(shared, Style::Anthropic, req, None, &mut record))
    } else if path == "/v1/messages/count_tokens" {
        record.style = Some(Style::Anthropic);
        only_post(req, Style::Anthropic).unwrap_or_else(|| count_tokens(shared, Style::Anthropic, req, &mut record))
    } else if path == "/v1/chat/completions" {
        record.style = Some(Style::OpenAi);
        only_post(req, Style::OpenAi).unwrap_or_else(|| model_call(shared, Style::OpenAi, req, None, &mut record))
    } else if path == "/v1/responses" {
        record.style = Some(Style::OpenAiResponses);
        only_post(req, Style::OpenAiResponses)
            .unwrap_or_else(|| model_call(shared, Style::OpenAiResponses, req, None, &mut record))
    } else if path == "/v1/responses/input_tokens" {
        record.style = Some(Style::OpenAiResponses);
        only_post(req, Style::OpenAiResponses)
            .unwrap_or_else(|| count_tokens(shared, Style::OpenAiResponses, req, &mut record))
    } else if path == "/v1/models" {
        model_list(shared, req, &mut record)
    } else if let Some((model, method)) = gemini::route(path) {
        record.style = Some(Style::Gemini);
        let framing = match method.as_str() {
            "generateContent" => Some(Framing::Whole),
            "streamGenerateContent" if req.query_param("alt").as_deref() == Some("sse") => Some(Framing::Sse),
            "streamGenerateContent" => Some(Framing::JsonArray),
            _ => None,
        };
        match framing {
            None if method == "countTokens" => {
                only_post(req, Style::Gemini).unwrap_or_else(|| count_tokens(shared, Style::Gemini, req, &mut record))
            }
            None => faults::reject_reply(gemini::error(404, &format!("Method not found: {method}"))),
            Some(f) => only_post(req, Style::Gemini)
                .unwrap_or_else(|| model_call(shared, Style::Gemini, req, Some((model, f)), &mut record)),
        }
    } else if path.starts_with("/v1beta") {
        faults::reject_reply(gemini::error(404, "Not Found"))
    } else if req.header("x-api-key").is_some() {
        faults::reject_reply(anthropic::error(404, "Not Found"))
    } else {
        faults::reject_reply(openai::error(404, &format!("Invalid URL ({} {})", req.method, path)))
    };
    record.status = reply.sent_status();
    (reply, record)
}

fn only_post(req: &Request, style: Style) -> Option<Reply> {
    if req.method == "POST" {
        return None;
    }
    let message = format!("Method Not Allowed: {} {}", req.method, req.path());
    let reject = match style {
        Style::Anthropic => anthropic::error(405, &message),
        Style::OpenAi | Style::OpenAiResponses => openai::error(405, &message),
        Style::Gemini => gemini::error(405, &message),
    };
    Some(faults::reject_reply(reject).header("allow", "POST"))
}

fn model_list(shared: &Shared, req: &Request, record: &mut RecordedRequest) -> Reply {
    let names: Vec<&str> = shared.scripts.models.keys().map(String::as_str).collect();
    // The same path serves both styles; the auth header tells which client asks.
    let anthropic_client = req.header("x-api-key").is_some() && req.header("authorization").is_none();
    let style = if anthropic_client { Style::Anthropic } else { Style::OpenAi };
    record.style = Some(style);
    if req.method != "GET" {
        let message = format!("Method Not Allowed: {} {}", req.method, req.path());
        let reject = if anthropic_client { anthropic::error(405, &message) } else { openai::error(405, &message) };
        return faults::reject_reply(reject).header("allow", "GET");
    }
    let key = &shared.scripts.api_key;
    let checked = if anthropic_client { anthropic::check_auth(req, key) } else { openai::check_auth(req, key) };
    match checked {
        Err(r) => faults::reject_reply(r),
        Ok(()) if anthropic_client => Reply::json(200, anthropic::model_list(&names)),
        Ok(()) => Reply::json(200, openai::model_list(&names)),
    }
}

/// What Anthropic's `count_tokens` takes (`MessageCountTokensParams`, the
/// beta fields included); anything else is refused by name.
const ANTHROPIC_COUNT_FIELDS: &[&str] = &[
    "messages",
    "model",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "cache_control",
    "speed",
    "context_management",
    "mcp_servers",
];

/// What the Responses `input_tokens` endpoint takes (`InputTokenCountParams`).
const RESPONSES_COUNT_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "truncation",
    "conversation",
    "previous_response_id",
    "personality",
];

/// The token count the fake answers for a counted request: a quarter of
/// the length of the body's compact JSON, rounded up (see [`fake_token_count`]).
/// Each counter answers in its API's own shape: Anthropic `{"input_tokens"}`
/// (compact), Responses `{"object": "response.input_tokens", "input_tokens"}`
/// and Gemini `{"totalTokens", "promptTokensDetails"}` (indented, as OpenAI
/// and Google send JSON).
fn count_tokens(shared: &Shared, style: Style, req: &Request, record: &mut RecordedRequest) -> Reply {
    let key = &shared.scripts.api_key;
    let checked = match style {
        Style::Anthropic => anthropic::check_auth(req, key),
        Style::OpenAi | Style::OpenAiResponses => openai::check_auth(req, key),
        Style::Gemini => gemini::check_auth(req, key),
    };
    if let Err(r) = checked {
        return faults::reject_reply(r);
    }
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&req.body) else {
        return faults::reject_reply(style_error(style, 400, "The request body is not a valid JSON object"));
    };
    record.json = Some(Value::Object(body.clone()));
    let n = super::fake_token_count(&Value::Object(body.clone()));
    let unknown = |allowed: &[&str]| body.keys().find(|k| !allowed.contains(&k.as_str())).cloned();
    match style {
        Style::Anthropic => {
            if req.header("anthropic-version").is_none() {
                return faults::reject_reply(anthropic::error(400, "anthropic-version: header is required"));
            }
            match (body.get("model").and_then(Value::as_str), body.get("messages").and_then(Value::as_array)) {
                (Some(m), Some(_)) => record.model = Some(m.to_string()),
                _ => return faults::reject_reply(anthropic::error(400, "model and messages: Field required")),
            }
            if let Some(k) = unknown(ANTHROPIC_COUNT_FIELDS) {
                return faults::reject_reply(anthropic::error(400, &format!("{k}: Extra inputs are not permitted")));
            }
            Reply::json(200, serde_json::json!({ "input_tokens": n }).to_string().into_bytes())
        }
        Style::OpenAi | Style::OpenAiResponses => {
            if let Some(k) = unknown(RESPONSES_COUNT_FIELDS) {
                let message = format!("Unknown parameter: '{k}'.");
                return faults::reject_reply(openai::error_full(
                    400,
                    &message,
                    "invalid_request_error",
                    Some(&k),
                    Some("unknown_parameter"),
                ));
            }
            record.model = body.get("model").and_then(Value::as_str).map(str::to_string);
            // Written out: the API's key order, which a map would sort away.
            let answer = format!("{{\n  \"object\": \"response.input_tokens\",\n  \"input_tokens\": {n}\n}}");
            Reply::json(200, answer.into_bytes())
        }
        Style::Gemini => {
            let inner = body.get("generateContentRequest");
            if inner.is_some() && body.get("contents").is_some() {
                return faults::reject_reply(gemini::error(
                    400,
                    "contents and generateContentRequest are mutually exclusive: send one of them",
                ));
            }
            if inner.and_then(|r| r.get("contents")).is_none() && body.get("contents").is_none() {
                return faults::reject_reply(gemini::error(400, "contents is not specified"));
            }
            if inner.is_some_and(|r| !r.get("model").and_then(Value::as_str).is_some_and(|m| m.starts_with("models/")))
            {
                return faults::reject_reply(gemini::error(400, "generateContentRequest.model is required"));
            }
            let answer = format!(
                "{{\n  \"totalTokens\": {n},\n  \"promptTokensDetails\": [\n    {{\n      \"modality\": \"TEXT\",\n      \"tokenCount\": {n}\n    }}\n  ]\n}}"
            );
            Reply::json(200, answer.into_bytes())
        }
    }
}

/// A style's plain error for `status` (used for the fake's own refusals).
fn style_error(style: Style, status: u16, message: &str) -> Reject {
    match style {
        Style::Anthropic => anthropic::error(status, message),
        Style::OpenAi | Style::OpenAiResponses => openai::error(status, message),
        Style::Gemini => gemini::error(status, message),
    }
}

fn model_call(
    shared: &Shared,
    style: Style,
    req: &Request,
    gemini_route: Option<(String, Framing)>,
    record: &mut RecordedRequest,
) -> Reply {
    match plan(shared, style, req, gemini_route, record) {
        Ok(reply) => reply,
        Err(reject) => faults::reject_reply(reject),
    }
    .header(
        match style {
            Style::Anthropic => "request-id",
            Style::OpenAi | Style::OpenAiResponses => "x-request-id",
            Style::Gemini => "x-goog-request-id",
        },
        stable_id("req_", &[&record.connection.to_string(), &lock(&shared.requests).len().to_string()], 24),
    )
}

fn plan(
    shared: &Shared,
    style: Style,
    req: &Request,
    gemini_route: Option<(String, Framing)>,
    record: &mut RecordedRequest,
) -> Result<Reply, Reject> {
    let key = &shared.scripts.api_key;
    match style {
        Style::Anthropic => anthropic::check_auth(req, key)?,
        Style::OpenAi | Style::OpenAiResponses => openai::check_auth(req, key)?,
        Style::Gemini => gemini::check_auth(req, key)?,
    }
    let body: Value = serde_json::from_slice(&req.body).map_err(|e| match style {
        Style::Anthropic => anthropic::error(400, &format!("The request body is not valid JSON: {e}")),
        Style::OpenAi | Style::OpenAiResponses => openai::malformed_request(),
        Style::Gemini => gemini::malformed_request(&e.to_string()),
    })?;
    record.json = Some(body.clone());
    let parsed: Parsed = match (style, &gemini_route) {
        (Style::Anthropic, _) => anthropic::parse(req, &body),
        (Style::OpenAi, _) => openai::parse(&body),
        (Style::OpenAiResponses, _) => responses::parse(&body),
        (Style::Gemini, Some((model, framing))) => gemini::parse(&body, model, *framing != Framing::Whole),
        (Style::Gemini, None) => Err(gemini::error(404, "Not Found")),
    }?;
    record.model = Some(parsed.model.clone());
    if let Some(gate) = &shared.scripts.gate {
        if let Some(failure) = shared.gate.hold(gate, &parsed.model, &shared.shutdown) {
            lock(&shared.failures).push(failure);
        }
    }
    let Some(script) = shared.scripts.models.get(&parsed.model) else {
        return Err(match style {
            Style::Anthropic => anthropic::error(404, &format!("model: {}", parsed.model)),
            Style::OpenAi | Style::OpenAiResponses => openai::unknown_model(&parsed.model),
            Style::Gemini => gemini::unknown_model(&parsed.model),
        });
    };
    match style {
        Style::Anthropic => anthropic::check_balance(&body)?,
        Style::OpenAi => openai::check_balance(&body)?,
        Style::OpenAiResponses => responses::check_balance(&body, &parsed.model)?,
        Style::Gemini => {
            gemini::check_balance(&body)?;
            gemini::check_signatures(&body, &parsed.model)?;
        }
    }
    output::check(style, &body, &parsed.model)?;
    let compact_threshold = if style == Style::OpenAiResponses { responses::compact_threshold(&body)? } else { None };
    let counted = super::fake_token_count(&body);
    if let Some(limit) = script.context_limit.filter(|l| counted > *l) {
        return Err(context::too_long(style, counted, limit));
    }
    let summarizing = script.summarize_on.as_ref().filter(|m| context::system_text(style, &body).contains(m.as_str()));
    if summarizing.is_some() {
        return Ok(summary(shared, style, &parsed, counted, gemini_route.as_ref().map(|(_, f)| *f)));
    }
    let turn_index = match (&script.summarize_on, context::last_call_id(style, &body)) {
        (Some(_), Some(id)) => {
            context::turn_after_call(script, &parsed.model, style, &id).unwrap_or(parsed.assistant_turns)
        }
        _ => parsed.assistant_turns,
    };
    record.turn = Some(turn_index);
    let Some(turn) = script.turns.get(turn_index) else {
        return Err(style_error(
            style,
            400,
            &format!(
                "fake provider: the script for model {} has {} turn(s); this request asks for turn {} \
                 ({} assistant message(s) in the transcript)",
                parsed.model,
                script.turns.len(),
                turn_index,
                turn_index
            ),
        ));
    };
    if turn_index + 1 == script.turns.len() {
        if let Some(expect) = &script.expect_final {
            if let Err(why) = check_final(expect, &parsed) {
                let message = format!("expect_final failed for model {}: {why}", parsed.model);
                lock(&shared.failures).push(message.clone());
                return Err(style_error(style, 400, &message));
            }
        }
    }
    let attempt = {
        let mut attempts = lock(&shared.attempts);
        let n = attempts.entry((parsed.model.clone(), turn_index)).or_insert(0);
        let this = *n;
        *n = n.saturating_add(1);
        this
    };
    record.attempt = Some(attempt);
    let framing = match (style, &gemini_route) {
        (Style::Gemini, Some((_, f))) => *f,
        _ if parsed.stream => Framing::Sse,
        _ => Framing::Whole,
    };
    let counted_turn;
    let turn = match script.context_limit {
        // A model with a window reports what it counted.
        Some(_) => {
            counted_turn = Turn { usage: TurnUsage { input: counted, output: turn.usage.output }, ..turn.clone() };
            &counted_turn
        }
        None => turn,
    };
    let ctx = Ctx {
        model: &parsed.model,
        turn_index,
        turn,
        huge: None,
        include_usage: parsed.include_usage,
        compaction: compact_threshold.is_some_and(|t| responses::tokens_since_compaction(&body) > t),
    };
    Ok(faults::answer(style, &ctx, framing, faults::select(&turn.faults, attempt)))
}

/// Answers a request for a summary: a text turn naming how many summaries
/// the model wrote, reporting the request's count as its input tokens.
fn summary(shared: &Shared, style: Style, parsed: &Parsed, counted: u64, gemini: Option<Framing>) -> Reply {
    let n = {
        let mut attempts = lock(&shared.attempts);
        let k = attempts.entry((format!("{}#summaries", parsed.model), 0)).or_insert(0);
        *k += 1;
        *k
    };
    let text = format!("Summary {n}: the files read so far and what they hold; the task goes on.");
    let turn = Turn { usage: TurnUsage { input: counted, output: 20 }, ..Turn::text(text) };
    let framing = match gemini {
        Some(f) => f,
        None if parsed.stream => Framing::Sse,
        None => Framing::Whole,
    };
    let turn_index = 100_000 + n as usize;
    let ctx = Ctx {
        model: &parsed.model,
        turn_index,
        turn: &turn,
        huge: None,
        include_usage: parsed.include_usage,
        compaction: false,
    };
    faults::answer(style, &ctx, framing, None)
}

fn check_final(expect: &ExpectFinal, parsed: &Parsed) -> Result<(), String> {
    if let Some(n) = expect.messages {
        if parsed.messages != n {
            return Err(format!("expected {n} messages, the transcript has {}", parsed.messages));
        }
    }
    if let Some(n) = expect.tool_results {
        if parsed.tool_results.len() != n {
            return Err(format!("expected {n} tool results, the transcript has {}", parsed.tool_results.len()));
        }
    }
    for needle in &expect.tool_result_contains {
        if !parsed.tool_results.iter().any(|r| r.contains(needle.as_str())) {
            return Err(format!("no tool result contains {needle:?} (results: {:?})", parsed.tool_results));
        }
    }
    Ok(())
}
