//! Gemini `generateContent` / `streamGenerateContent`
//! (`POST /v1beta/models/{model}:…`): auth, request checks, bodies, SSE
//! streams and error bodies.

use serde::Serialize;
use serde_json::{json, Value};

use super::http::Request;
use super::wire::{neutral_stop, stable_id, to_json, to_pretty, Args, Ctx, Parsed, Reject};

/// The canonical status word of an HTTP status.
fn status_word(status: u16) -> &'static str {
    match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        500 => "INTERNAL",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNKNOWN",
    }
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: u16,
    message: &'a str,
    status: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    details: Vec<Value>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

/// An error body: `{"error":{"code","message","status"}}`.
pub fn error(status: u16, message: &str) -> Reject {
    let body =
        ErrorBody { error: ErrorDetail { code: status, message, status: status_word(status), details: Vec::new() } };
    Reject { status, body: to_pretty(&body) }
}

/// The body Gemini sends with an error status.
pub fn status_error(status: u16) -> Reject {
    let message = match status {
        429 => "Resource has been exhausted (e.g. check quota).",
        500 => "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
        503 => "The model is overloaded. Please try again later.",
        504 => "Deadline expired before operation could complete.",
        _ => "Request failed.",
    };
    error(status, message)
}

/// The unknown-model error.
pub fn unknown_model(model: &str) -> Reject {
    error(
        404,
        &format!(
            "models/{model} is not found for API version v1beta, or is not supported for generateContent. \
             Call ListModels to see the list of available models and their supported methods."
        ),
    )
}

/// Checks `x-goog-api-key` or `?key=`. A missing key is a 403 and a wrong one
/// a 400 `API_KEY_INVALID`, as the API answers.
pub fn check_auth(req: &Request, key: &str) -> Result<(), Reject> {
    let given = req.header("x-goog-api-key").map(str::to_string).or_else(|| req.query_param("key"));
    match given {
        None => Err(error(
            403,
            "Method doesn't allow unregistered callers (callers without established identity). \
             Please use API Key or other form of API consumer identity to call this API.",
        )),
        Some(k) if k != key => {
            let message = "API key not valid. Please pass a valid API key.";
            let details = vec![
                json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                       "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}}),
                json!({"@type": "type.googleapis.com/google.rpc.LocalizedMessage", "locale": "en-US", "message": message}),
            ];
            let body = ErrorBody { error: ErrorDetail { code: 400, message, status: "INVALID_ARGUMENT", details } };
            Err(Reject { status: 400, body: to_pretty(&body) })
        }
        Some(_) => Ok(()),
    }
}

/// The error for a body that is not JSON.
pub fn malformed_request(detail: &str) -> Reject {
    error(400, &format!("Invalid JSON payload received. {detail}"))
}

/// Splits `/v1beta/models/{model}:{method}` into model and method.
pub fn route(path: &str) -> Option<(String, String)> {
    let rest = path.strip_prefix("/v1beta/models/")?;
    let (model, method) = rest.rsplit_once(':')?;
    let model = super::http::percent_decode(model);
    (!model.is_empty() && !model.contains('/')).then(|| (model, method.to_string()))
}

fn role(c: &Value) -> &str {
    c.get("role").and_then(Value::as_str).unwrap_or("")
}

fn parts(c: &Value) -> &[Value] {
    c.get("parts").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn count(c: &Value, key: &str) -> usize {
    parts(c).iter().filter(|p| p.get(key).is_some()).count()
}

/// Reads and checks a generateContent body (the model and stream flag come from the URL).
pub fn parse(body: &Value, model: &str, stream: bool) -> Result<Parsed, Reject> {
    let Some(obj) = body.as_object() else {
        return Err(malformed_request("Expected an object."));
    };
    let contents = match obj.get("contents") {
        Some(Value::Array(c)) if !c.is_empty() => c,
        _ => return Err(error(400, "* GenerateContentRequest.contents: contents is not specified\n")),
    };
    let mut tool_results = Vec::new();
    for c in contents {
        for p in parts(c) {
            if let Some(r) = p.get("functionResponse") {
                tool_results.push(to_json(r.get("response").unwrap_or(&Value::Null)));
            }
        }
    }
    Ok(Parsed {
        model: model.to_string(),
        stream,
        include_usage: false,
        assistant_turns: contents.iter().filter(|c| role(c) == "model").count(),
        messages: contents.len(),
        tool_results,
    })
}

/// The functionCall/functionResponse pairing rules the API enforces with a 400.
pub fn check_balance(body: &Value) -> Result<(), Reject> {
    let contents = body.get("contents").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    for (i, c) in contents.iter().enumerate() {
        let responses = count(c, "functionResponse");
        if responses > 0 {
            let prev_calls = i.checked_sub(1).and_then(|p| contents.get(p)).map_or(0, |p| count(p, "functionCall"));
            if prev_calls == 0 {
                return Err(error(
                    400,
                    "Please ensure that function response turn comes immediately after a function call turn.",
                ));
            }
        }
        let calls = count(c, "functionCall");
        if calls > 0 {
            let answered = contents.get(i + 1).map_or(0, |n| count(n, "functionResponse"));
            if answered != calls {
                return Err(error(
                    400,
                    "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.",
                ));
            }
        }
    }
    Ok(())
}

/// Gemini 3 models refuse a model turn whose function calls come back
/// without a thought signature on the first of them (history from another
/// model passes with Google's documented placeholder value there).
pub fn check_signatures(body: &Value, model: &str) -> Result<(), Reject> {
    if !model.starts_with("gemini-3") {
        return Ok(());
    }
    let contents = body.get("contents").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    for (i, c) in contents.iter().enumerate().filter(|(_, c)| role(c) == "model") {
        let first_call = parts(c).iter().position(|p| p.get("functionCall").is_some());
        if let Some(k) = first_call {
            let signed = parts(c)[k].get("thoughtSignature").and_then(Value::as_str).is_some_and(|s| !s.is_empty());
            if !signed {
                return Err(error(
                    400,
                    &format!(
                        "Function call is missing a thought_signature in functionCall parts. This is required for \
                         tools to work correctly, and missing thought_signature may lead to degraded model \
                         performance. Additional data, function call `default_api:{}` , position {}.",
                        parts(c)[k]["functionCall"]["name"].as_str().unwrap_or(""),
                        i + 1
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCall<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    name: &'a str,
    args: Args,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<FunctionCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

#[derive(Serialize)]
struct Content<'a> {
    parts: Vec<Part<'a>>,
    role: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    content: Content<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    finish_reason: Option<String>,
    index: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Response<'a> {
    candidates: Vec<Candidate<'a>>,
    usage_metadata: UsageMetadata,
    model_version: &'a str,
    response_id: String,
}

fn finish_reason(ctx: &Ctx<'_>) -> String {
    match &ctx.turn.stop_reason {
        Some(r) => neutral_stop(r).map_or_else(|| r.clone(), |s| s[2].to_string()),
        None => "STOP".to_string(),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ModalityCount {
    modality: &'static str,
    token_count: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageMetadata {
    prompt_token_count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidates_token_count: Option<u64>,
    total_token_count: u64,
    prompt_tokens_details: Vec<ModalityCount>,
}

fn usage(ctx: &Ctx<'_>, done: bool) -> UsageMetadata {
    let u = ctx.turn.usage;
    // Mid-stream chunks carry the prompt count only; the last one has the totals.
    UsageMetadata {
        prompt_token_count: u.input,
        candidates_token_count: done.then_some(u.output),
        total_token_count: if done { u.input + u.output } else { u.input },
        prompt_tokens_details: vec![ModalityCount { modality: "TEXT", token_count: u.input }],
    }
}

fn call_parts<'a>(ctx: &Ctx<'a>) -> Vec<Part<'a>> {
    ctx.turn
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| Part {
            function_call: Some(FunctionCall {
                id: ctx.turn.with_ids.then(|| ctx.call_id(i, "call_")),
                name: &c.name,
                args: Args::of(c),
            }),
            ..Part::default()
        })
        .collect()
}

fn text_part(text: String) -> Part<'static> {
    Part { text: Some(text), ..Part::default() }
}

fn thought_part(text: String) -> Part<'static> {
    Part { text: Some(text), thought: Some(true), ..Part::default() }
}

/// Puts the thought signature where the API does: on the first function
/// call, else on the first answer text, else on the thought itself.
fn sign<'a>(ctx: &Ctx<'a>, parts: &mut [Part<'a>]) {
    let Some(t) = &ctx.turn.thinking else { return };
    if t.signature.is_empty() {
        return;
    }
    let target = parts
        .iter()
        .position(|p| p.function_call.is_some())
        .or_else(|| parts.iter().position(|p| p.text.is_some() && p.thought.is_none()))
        .or_else(|| parts.iter().position(|p| p.thought == Some(true)));
    if let Some(p) = target.and_then(|i| parts.get_mut(i)) {
        p.thought_signature = Some(&t.signature);
    }
}

fn response<'a>(ctx: &Ctx<'a>, mut parts: Vec<Part<'a>>, done: bool) -> Response<'a> {
    if parts.is_empty() {
        parts.push(text_part(String::new()));
    }
    Response {
        candidates: vec![Candidate {
            content: Content { parts, role: "model" },
            finish_reason: done.then(|| finish_reason(ctx)),
            index: 0,
        }],
        usage_metadata: usage(ctx, done),
        model_version: ctx.model,
        response_id: stable_id("", &[ctx.model, &ctx.turn_index.to_string(), "response"], 23),
    }
}

/// The whole (non-streaming) response body.
pub fn body(ctx: &Ctx<'_>) -> Vec<u8> {
    let mut parts = Vec::new();
    if let Some(t) = &ctx.turn.thinking {
        parts.push(thought_part(t.text.clone()));
    }
    if let Some(text) = ctx.text() {
        parts.push(text_part(text.into_owned()));
    }
    parts.extend(call_parts(ctx));
    sign(ctx, &mut parts);
    to_json(&response(ctx, parts, true)).into_bytes()
}

/// The chunks of a streamed answer as JSON texts: thought pieces, text
/// pieces, then the function calls whole with the finish reason.
fn chunks(ctx: &Ctx<'_>) -> Vec<String> {
    let mut groups: Vec<Vec<Part<'_>>> = Vec::new();
    if let Some(t) = &ctx.turn.thinking {
        groups.extend(super::wire::word_pieces(&t.text).into_iter().map(|p| vec![thought_part(p)]));
    }
    groups.extend(ctx.text_pieces().into_iter().map(|p| vec![text_part(p)]));
    let calls = call_parts(ctx);
    if !calls.is_empty() {
        groups.push(calls);
    }
    if groups.is_empty() {
        groups.push(Vec::new());
    }
    // The signature goes on the first call, else on the first answer text, else on the thought.
    let mut flat_index = None;
    if ctx.turn.thinking.as_ref().is_some_and(|t| !t.signature.is_empty()) {
        let find = |pred: &dyn Fn(&Part<'_>) -> bool| groups.iter().position(|g| g.iter().any(pred));
        flat_index = find(&|p| p.function_call.is_some())
            .or_else(|| find(&|p| p.text.is_some() && p.thought.is_none()))
            .or_else(|| find(&|p| p.thought == Some(true)));
    }
    let last = groups.len() - 1;
    groups
        .into_iter()
        .enumerate()
        .map(|(i, mut parts)| {
            if Some(i) == flat_index {
                sign(ctx, &mut parts);
            }
            to_json(&response(ctx, parts, i == last))
        })
        .collect()
}

/// The SSE events of a streamed answer (`data: {json}` + CRLF CRLF, as the API frames them).
pub fn events(ctx: &Ctx<'_>) -> Vec<Vec<u8>> {
    chunks(ctx).into_iter().map(|c| format!("data: {c}\r\n\r\n").into_bytes()).collect()
}

/// Without `alt=sse` the stream is one JSON array, sent as it is produced.
pub fn array_pieces(ctx: &Ctx<'_>) -> Vec<Vec<u8>> {
    let chunks = chunks(ctx);
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let open = if i == 0 { "[" } else { ",\r\n" };
            let close = if i + 1 == n { "]" } else { "" };
            format!("{open}{c}{close}").into_bytes()
        })
        .collect()
}

/// The in-stream error a failing stream ends with.
pub fn stream_error_event() -> Vec<u8> {
    let e = json!({"error": {"code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}});
    format!("data: {}\r\n\r\n", to_json(&e)).into_bytes()
}

/// An event whose data is cut off in the middle of its JSON.
pub fn malformed_event() -> Vec<u8> {
    b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"cut\r\n\r\n".to_vec()
}

/// A 200 body that is not JSON.
pub fn malformed_body() -> Vec<u8> {
    br#"{"candidates":[{"content":{"parts":[{"text":"cut off"#.to_vec()
}
