//! OpenAI Chat Completions (`POST /v1/chat/completions`, `GET /v1/models`):
//! auth, request checks, bodies, SSE streams and error bodies.

use serde::Serialize;
use serde_json::{json, Value};

use super::http::Request;
use super::wire::{argument_fragments, neutral_stop, now_secs, to_json, to_pretty, Ctx, Parsed, Reject};

#[derive(Serialize)]
struct ErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

/// A full error body: `{"error":{"message","type","param","code"}}`.
pub fn error_full(status: u16, message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Reject {
    let body = ErrorBody { error: ErrorDetail { message, kind, param, code } };
    Reject { status, body: to_pretty(&body) }
}

/// An `invalid_request_error` (or the status's usual type) with no param or code.
pub fn error(status: u16, message: &str) -> Reject {
    let kind = if status >= 500 { "server_error" } else { "invalid_request_error" };
    error_full(status, message, kind, None, None)
}

/// The body OpenAI sends with an error status.
pub fn status_error(status: u16, model: &str) -> Reject {
    match status {
        401 => error_full(401, "Incorrect API key provided.", "invalid_request_error", None, Some("invalid_api_key")),
        404 => model_not_found(model),
        429 => error_full(
            429,
            &format!(
                "Rate limit reached for {model} in organization org-fake on requests per min (RPM): \
                 Limit 3, Used 3, Requested 1. Please try again in 1s."
            ),
            "requests",
            None,
            Some("rate_limit_exceeded"),
        ),
        500 => error(500, "The server had an error while processing your request. Sorry about that!"),
        503 => error(503, "The server is overloaded or not ready yet."),
        s if s >= 500 => error(s, "The server had an error while processing your request. Sorry about that!"),
        s => error(s, "Invalid request."),
    }
}

fn model_not_found(model: &str) -> Reject {
    error_full(
        404,
        &format!("The model `{model}` does not exist or you do not have access to it."),
        "invalid_request_error",
        None,
        Some("model_not_found"),
    )
}

/// The unknown-model error.
pub fn unknown_model(model: &str) -> Reject {
    model_not_found(model)
}

/// Masks a key the way the API echoes it: a few leading and trailing characters.
fn mask(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 8 {
        return "*".repeat(chars.len());
    }
    let head: String = chars.iter().take(3).collect();
    let tail: String = chars.iter().skip(chars.len() - 4).collect();
    format!("{head}{}{tail}", "*".repeat(chars.len() - 7))
}

/// Checks `Authorization: Bearer KEY`.
pub fn check_auth(req: &Request, key: &str) -> Result<(), Reject> {
    let given = req.header("authorization").map(|v| v.strip_prefix("Bearer ").unwrap_or(v).trim());
    match given {
        None | Some("") => Err(error(
            401,
            "You didn't provide an API key. You need to provide your API key in an Authorization header using \
             Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if \
             you're accessing the API from your browser and are prompted for a username and password. You can obtain \
             an API key from https://platform.openai.com/account/api-keys.",
        )),
        Some(k) if k != key => Err(error_full(
            401,
            &format!(
                "Incorrect API key provided: {}. You can find your API key at https://platform.openai.com/account/api-keys.",
                mask(k)
            ),
            "invalid_request_error",
            None,
            Some("invalid_api_key"),
        )),
        Some(_) => Ok(()),
    }
}

/// The error for a body that is not JSON.
pub fn malformed_request() -> Reject {
    error(
        400,
        "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP \
         library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have \
         trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)",
    )
}

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or("")
}

fn tool_call_ids(m: &Value) -> Vec<&str> {
    m.get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| calls.iter().map(|c| c.get("id").and_then(Value::as_str).unwrap_or("")).collect())
        .unwrap_or_default()
}

fn content_text(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().concat()
        }
        _ => String::new(),
    }
}

/// Reads and checks a Chat Completions request body.
pub fn parse(body: &Value) -> Result<Parsed, Reject> {
    let Some(obj) = body.as_object() else {
        return Err(malformed_request());
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(error(400, "you must provide a model parameter")),
    };
    let Some(messages) = obj.get("messages").and_then(Value::as_array) else {
        return Err(error_full(
            400,
            "Missing required parameter: 'messages'.",
            "invalid_request_error",
            Some("messages"),
            Some("missing_required_parameter"),
        ));
    };
    let stream = obj.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let options = obj.get("stream_options").filter(|v| !v.is_null());
    if options.is_some() && !stream {
        return Err(error_full(
            400,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "invalid_request_error",
            Some("stream_options"),
            None,
        ));
    }
    let include_usage = options.and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    Ok(Parsed {
        model,
        stream,
        include_usage,
        assistant_turns: messages.iter().filter(|m| role(m) == "assistant").count(),
        messages: messages.len(),
        tool_results: messages.iter().filter(|m| role(m) == "tool").map(content_text).collect(),
    })
}

/// The tool_calls/tool-message pairing rules the API enforces with a 400.
pub fn check_balance(body: &Value) -> Result<(), Reject> {
    let messages = body.get("messages").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    // The calls a tool message may answer: those of the nearest assistant
    // message before it, as long as only tool messages come in between.
    let mut open: Option<Vec<&str>> = None;
    for (i, m) in messages.iter().enumerate() {
        if role(m) == "tool" {
            let Some(calls) = &open else {
                return Err(error_full(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
                    "invalid_request_error",
                    Some(&format!("messages.[{i}].role")),
                    None,
                ));
            };
            let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
            if !calls.contains(&id) {
                return Err(error_full(
                    400,
                    &format!(
                        "Invalid parameter: 'tool_call_id' of '{id}' not found in 'tool_calls' of previous message."
                    ),
                    "invalid_request_error",
                    Some(&format!("messages.[{i}].tool_call_id")),
                    None,
                ));
            }
            continue;
        }
        open = None;
        let ids = tool_call_ids(m);
        if role(m) != "assistant" || ids.is_empty() {
            continue;
        }
        let answered: Vec<&str> = messages
            .iter()
            .skip(i + 1)
            .take_while(|n| role(n) == "tool")
            .map(|n| n.get("tool_call_id").and_then(Value::as_str).unwrap_or(""))
            .collect();
        let missing: Vec<&str> = ids.iter().copied().filter(|id| !answered.contains(id)).collect();
        if !missing.is_empty() {
            return Err(error_full(
                400,
                &format!(
                    "An assistant message with 'tool_calls' must be followed by tool messages responding to each \
                     'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                    missing.join(", ")
                ),
                "invalid_request_error",
                Some(&format!("messages.[{i}].role")),
                None,
            ));
        }
        open = Some(ids);
    }
    Ok(())
}

fn finish_reason(ctx: &Ctx<'_>) -> String {
    match &ctx.turn.stop_reason {
        Some(r) => neutral_stop(r).map_or_else(|| r.clone(), |s| s[1].to_string()),
        None if !ctx.turn.tool_calls.is_empty() => "tool_calls".to_string(),
        None => "stop".to_string(),
    }
}

#[derive(Serialize)]
struct PromptDetails {
    cached_tokens: u64,
    audio_tokens: u64,
}

#[derive(Serialize)]
struct CompletionDetails {
    reasoning_tokens: u64,
    audio_tokens: u64,
    accepted_prediction_tokens: u64,
    rejected_prediction_tokens: u64,
}

#[derive(Serialize)]
struct Usage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: PromptDetails,
    completion_tokens_details: CompletionDetails,
}

fn usage(ctx: &Ctx<'_>) -> Usage {
    let u = ctx.turn.usage;
    Usage {
        prompt_tokens: u.input,
        completion_tokens: u.output,
        total_tokens: u.input + u.output,
        prompt_tokens_details: PromptDetails { cached_tokens: 0, audio_tokens: 0 },
        completion_tokens_details: CompletionDetails {
            reasoning_tokens: 0,
            audio_tokens: 0,
            accepted_prediction_tokens: 0,
            rejected_prediction_tokens: 0,
        },
    }
}

fn fingerprint(ctx: &Ctx<'_>) -> String {
    super::wire::stable_id("fp_", &[ctx.model], 10).to_ascii_lowercase()
}

#[derive(Serialize)]
struct Function<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: String,
}

#[derive(Serialize)]
struct ToolCall<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: Option<String>,
    refusal: Option<String>,
    annotations: [(); 0],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall<'a>>,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: Message<'a>,
    logprobs: Option<()>,
    finish_reason: String,
}

#[derive(Serialize)]
struct Completion<'a> {
    id: String,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<Choice<'a>>,
    usage: Usage,
    service_tier: &'static str,
    system_fingerprint: String,
}

/// The whole (non-streaming) response body.
pub fn body(ctx: &Ctx<'_>) -> Vec<u8> {
    let tool_calls = ctx
        .turn
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| ToolCall {
            index: None,
            id: Some(ctx.call_id(i, "call_")),
            kind: Some("function"),
            function: Function { name: Some(&c.name), arguments: c.arguments.clone() },
        })
        .collect();
    let body = Completion {
        id: ctx.answer_id("chatcmpl-"),
        object: "chat.completion",
        created: now_secs(),
        model: ctx.model,
        choices: vec![Choice {
            index: 0,
            message: Message {
                role: "assistant",
                content: ctx.text().map(|t| t.into_owned()),
                refusal: None,
                annotations: [],
                tool_calls,
            },
            logprobs: None,
            finish_reason: finish_reason(ctx),
        }],
        usage: usage(ctx),
        service_tier: "default",
        system_fingerprint: fingerprint(ctx),
    };
    to_pretty(&body)
}

/// A chunk's delta. `content`/`refusal` are `Some(Value::Null)` where the API sends an explicit null.
#[derive(Serialize, Default)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall<'a>>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<String>,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    service_tier: &'static str,
    system_fingerprint: &'a str,
    choices: Vec<ChunkChoice<'a>>,
    /// Present (null until the last chunk) only when include_usage was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<Usage>>,
}

fn data<T: Serialize>(value: &T) -> Vec<u8> {
    format!("data: {}\n\n", to_json(value)).into_bytes()
}

fn choice(delta: Delta<'_>, finish: Option<String>) -> Vec<ChunkChoice<'_>> {
    vec![ChunkChoice { index: 0, delta, logprobs: None, finish_reason: finish }]
}

/// The SSE events of a streamed answer (`data: {chunk}` each, then `data: [DONE]`).
pub fn events(ctx: &Ctx<'_>) -> Vec<Vec<u8>> {
    let id = ctx.answer_id("chatcmpl-");
    let created = now_secs();
    let fp = fingerprint(ctx);
    let chunk = |choices: Vec<ChunkChoice<'_>>, usage: Option<Usage>| {
        data(&Chunk {
            id: &id,
            object: "chat.completion.chunk",
            created,
            model: ctx.model,
            service_tier: "default",
            system_fingerprint: &fp,
            choices,
            usage: ctx.include_usage.then_some(usage),
        })
    };

    // The role chunk: empty content before text, explicit null before tool calls only.
    let first = Delta {
        role: Some("assistant"),
        content: Some(if ctx.text().is_some() { Value::String(String::new()) } else { Value::Null }),
        refusal: Some(Value::Null),
        tool_calls: Vec::new(),
    };
    let mut out = vec![chunk(choice(first, None), None)];
    for piece in ctx.text_pieces() {
        out.push(chunk(choice(Delta { content: Some(Value::String(piece)), ..Delta::default() }, None), None));
    }
    // Each call's head, then its argument pieces, in (call index, piece) order;
    // interleaved, the heads come first and the pieces go round the calls.
    let mut steps: Vec<(usize, Option<String>)> = Vec::new();
    let pieces: Vec<Vec<String>> = ctx.turn.tool_calls.iter().map(|call| argument_fragments(&call.arguments)).collect();
    if ctx.turn.interleave_calls {
        steps.extend((0..pieces.len()).map(|i| (i, None)));
        let longest = pieces.iter().map(Vec::len).max().unwrap_or(0);
        for round in 0..longest {
            for (i, p) in pieces.iter().enumerate() {
                if let Some(frag) = p.get(round) {
                    steps.push((i, Some(frag.clone())));
                }
            }
        }
    } else {
        for (i, p) in pieces.iter().enumerate() {
            steps.push((i, None));
            steps.extend(p.iter().map(|frag| (i, Some(frag.clone()))));
        }
    }
    for (i, frag) in steps {
        let call = match frag {
            None => ToolCall {
                index: Some(i),
                id: Some(ctx.call_id(i, "call_")),
                kind: Some("function"),
                function: Function { name: Some(&ctx.turn.tool_calls[i].name), arguments: String::new() },
            },
            Some(arguments) => {
                ToolCall { index: Some(i), id: None, kind: None, function: Function { name: None, arguments } }
            }
        };
        out.push(chunk(choice(Delta { tool_calls: vec![call], ..Delta::default() }, None), None));
    }
    out.push(chunk(choice(Delta::default(), Some(finish_reason(ctx))), None));
    if ctx.include_usage {
        out.push(chunk(Vec::new(), Some(usage(ctx))));
    }
    out.push(b"data: [DONE]\n\n".to_vec());
    out
}

/// The in-stream error the API sends when a streamed answer fails.
pub fn stream_error_event() -> Vec<u8> {
    let message = "The server had an error while processing your request. Sorry about that!";
    data(&ErrorBody { error: ErrorDetail { message, kind: "server_error", param: None, code: None } })
}

/// An event whose data is cut off in the middle of its JSON.
pub fn malformed_event() -> Vec<u8> {
    b"data: {\"id\":\"chatcmpl-x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\n\n".to_vec()
}

/// A 200 body that is not JSON.
pub fn malformed_body() -> Vec<u8> {
    br#"{"id":"chatcmpl-x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"cut"#.to_vec()
}

/// `GET /v1/models` in OpenAI's list shape.
pub fn model_list(models: &[&str]) -> Vec<u8> {
    let data: Vec<Value> = models
        .iter()
        .map(|m| json!({"id": m, "object": "model", "created": 1_700_000_000, "owned_by": "system"}))
        .collect();
    to_pretty(&json!({"object": "list", "data": data}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_masked_like_the_api_does() {
        assert_eq!(mask("sk-abcdefghijkl"), "sk-********ijkl");
        assert_eq!(mask("short"), "*****");
    }
}
