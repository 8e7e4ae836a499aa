//! OpenAI Chat Completions requests translated for Anthropic and Gemini:
//! golden bodies per target (written from the providers' documented request
//! shapes), the rules (tool results merged into one turn, arguments parsed,
//! system hoisted, images converted, tool_choice mapped), refusals of what a
//! target cannot express, the OpenAI pass-through, and every translated body
//! checked by the official-SDK request validators.

mod common;
mod translate_support;

use nexus_proto::translate::{openai_request_bytes_to, openai_request_to, TranslateError, TranslatedRequest};
use nexus_proto::Style;
use serde_json::{json, Value};
use translate_support::{oracle_batch, Job};

fn body(t: &TranslatedRequest) -> Value {
    serde_json::from_slice(&t.body).expect("the translated body is JSON")
}

fn translate(style: Style, req: &Value) -> TranslatedRequest {
    openai_request_to(style, req).unwrap_or_else(|e| panic!("{style:?}: {e}\n{req}"))
}

fn refused(style: Style, req: &Value) -> TranslateError {
    match openai_request_to(style, req) {
        Ok(t) => panic!("{style:?} accepted {req}\n→ {}", String::from_utf8_lossy(&t.body)),
        Err(e) => {
            assert_eq!(e.status, 400, "{e}");
            let v = e.to_json();
            assert_eq!(v["error"]["type"], "invalid_request_error");
            assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
            e
        }
    }
}

fn weather_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }})
}

fn add_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "add",
        "description": "Adds a and b",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
    }})
}

/// A second turn: two parallel calls (one with arguments as a string, one
/// as an object) and both results, one of them empty, one given as parts.
fn two_call_follow_up() -> Value {
    json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {"role": "user", "content": "Weather in Paris, and 2+2?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}},
            ]},
            {"role": "tool", "tool_call_id": "call_a", "content": ""},
            {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "4"}]},
        ],
        "tools": [weather_tool(), add_tool()],
        "max_completion_tokens": 256,
        "stop": "END",
    })
}

// ---------------------------------------------------------------- golden: anthropic

fn anthropic_golden_request() -> Value {
    let mut req = two_call_follow_up();
    req["model"] = json!("claude-sonnet-4-5");
    req["tool_choice"] = json!("required");
    req["parallel_tool_calls"] = json!(false);
    req
}

#[test]
fn anthropic_golden_parallel_calls_and_their_results() {
    let t = translate(Style::Anthropic, &anthropic_golden_request());
    assert!(!t.stream);
    assert_eq!(t.url("https://api.anthropic.com"), "https://api.anthropic.com/v1/messages");
    // The Messages API shapes: tool_use blocks with parsed `input`, ONE user
    // turn holding both tool_result blocks, `required` → `any`, and
    // `parallel_tool_calls: false` → `disable_parallel_tool_use`. An empty
    // result is sent as the encoder's explicit "(no output)" text because the
    // API rejects empty error content and some gateways reject empty content.
    let want = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "system": "Be brief.\n\nUse tools.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris, and 2+2?"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_b", "name": "add", "input": {"a": 2, "b": 2}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_a", "content": "(no output)"},
                {"type": "tool_result", "tool_use_id": "call_b", "content": "4"},
            ]},
        ],
        "tools": [
            {"name": "get_weather", "description": "Current weather for a city",
             "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
            {"name": "add", "description": "Adds a and b",
             "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "stop_sequences": ["END"],
    });
    assert_eq!(body(&t), want);
}

#[test]
fn anthropic_tool_choice_mapping() {
    let base =
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [weather_tool(), add_tool()]});
    let cases = [
        (json!("auto"), json!({"type": "auto"})),
        (json!("required"), json!({"type": "any"})),
        (json!("none"), json!({"type": "none"})),
        (json!({"type": "function", "function": {"name": "add"}}), json!({"type": "tool", "name": "add"})),
    ];
    for (choice, want) in cases {
        let mut req = base.clone();
        req["tool_choice"] = choice.clone();
        let t = translate(Style::Anthropic, &req);
        assert_eq!(body(&t)["tool_choice"], want, "tool_choice {choice}");
    }
    // No choice: the API's default (auto) is left to the API.
    assert!(body(&translate(Style::Anthropic, &base)).get("tool_choice").is_none());
    // No choice but parallel calls turned off: auto with the switch.
    let mut req = base.clone();
    req["parallel_tool_calls"] = json!(false);
    assert_eq!(
        body(&translate(Style::Anthropic, &req))["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    // `none` makes no calls, so there is nothing parallel to turn off.
    req["tool_choice"] = json!("none");
    assert_eq!(body(&translate(Style::Anthropic, &req))["tool_choice"], json!({"type": "none"}));
}

fn anthropic_settings_request() -> Value {
    json!({
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 100,
        "temperature": 0.25,
        "top_p": 0.9,
        "stop": ["a", "b"],
        "user": "u-42",
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true,
            "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false}}},
        "stream": true,
        "stream_options": {"include_usage": true},
        "n": 1, "logprobs": false, "store": false, "presence_penalty": 0, "seed": null,
    })
}

#[test]
fn anthropic_sampling_format_and_identity_settings() {
    let req = anthropic_settings_request();
    let t = translate(Style::Anthropic, &req);
    assert!(t.stream && t.include_usage);
    let b = body(&t);
    assert_eq!(b["max_tokens"], 100);
    assert_eq!(b["temperature"], 0.25);
    assert_eq!(b["top_p"], 0.9);
    assert_eq!(b["stop_sequences"], json!(["a", "b"]));
    assert_eq!(b["metadata"], json!({"user_id": "u-42"}));
    assert_eq!(b["stream"], true);
    assert_eq!(b["output_config"]["format"]["type"], "json_schema");
    assert_eq!(b["output_config"]["format"]["schema"], req["response_format"]["json_schema"]["schema"]);
    // Settings that mean "not set" leave no trace.
    for key in ["n", "logprobs", "store", "presence_penalty", "seed", "stream_options", "response_format"] {
        assert!(b.get(key).is_none(), "{key} leaked into {b}");
    }
}

/// A client's schema reaches Anthropic and Gemini lowered as a run's native
/// output is (SPEC §16); one Anthropic cannot carry is a 400, never sent.
#[test]
fn structured_output_is_lowered_per_target_and_refused_where_it_cannot_be_honoured() {
    let mut req = anthropic_settings_request();
    req["response_format"]["json_schema"]["schema"] = json!({"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 1}, "k": {"const": "x"}}, "required": ["n"]});
    let b = body(&translate(Style::Anthropic, &req));
    let schema = &b["output_config"]["format"]["schema"];
    assert_eq!(schema["additionalProperties"], false, "closed for Anthropic");
    assert_eq!(schema["properties"]["n"], json!({"type": "integer", "description": "{minimum: 1}"}));
    let mut for_gemini = req.clone();
    for_gemini.as_object_mut().unwrap().remove("user");
    let b = body(&translate(Style::Gemini, &for_gemini));
    assert_eq!(b["generationConfig"]["responseJsonSchema"]["properties"]["k"], json!({"enum": ["x"]}));
    req["response_format"]["json_schema"]["schema"] = json!({"type": "object", "properties": {"tags": {"type": "object", "additionalProperties": {"type": "string"}}}});
    let e = refused(Style::Anthropic, &req);
    assert!(e.message.contains("response_format") && e.message.contains("open to extra properties"), "{}", e.message);
}

fn strict_request() -> Value {
    let mut tool = weather_tool();
    tool["function"]["strict"] = json!(true);
    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [tool, add_tool()]})
}

#[test]
fn strict_tools_are_strict_upstream() {
    let req = strict_request();
    let a = translate(Style::Anthropic, &req);
    assert_eq!(body(&a)["tools"][0]["strict"], true);
    assert!(body(&a)["tools"][1].get("strict").is_none());
    let g = translate(Style::Gemini, &req);
    assert_eq!(body(&g)["toolConfig"], json!({"functionCallingConfig": {"mode": "VALIDATED"}}));
}

// ---------------------------------------------------------------- golden: gemini

fn gemini_golden_request() -> Value {
    let mut req = two_call_follow_up();
    req["model"] = json!("models/gemini-2.5-flash");
    req["tool_choice"] = json!("required");
    req["temperature"] = json!(1.5);
    req
}

#[test]
fn gemini_golden_parallel_calls_and_their_results() {
    let t = translate(Style::Gemini, &gemini_golden_request());
    assert_eq!(t.model, "gemini-2.5-flash");
    assert_eq!(
        t.url("https://generativelanguage.googleapis.com/v1beta"),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    );
    // generateContent shapes: model turns are `model`, calls are
    // functionCall parts with `args` objects, both responses in ONE user
    // turn, each named after its call (Gemini matches results by name) and
    // wrapped as {"output": text}. The first call of the model turn carries
    // Google's documented placeholder signature, since the real one could not
    // travel through the client.
    let want = json!({
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris, and 2+2?"}]},
            {"role": "model", "parts": [
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_a"},
                 "thoughtSignature": "skip_thought_signature_validator"},
                {"functionCall": {"name": "add", "args": {"a": 2, "b": 2}, "id": "call_b"}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": ""}, "id": "call_a"}},
                {"functionResponse": {"name": "add", "response": {"output": "4"}, "id": "call_b"}},
            ]},
        ],
        "systemInstruction": {"parts": [{"text": "Be brief.\n\nUse tools."}]},
        "tools": [{"functionDeclarations": [
            {"name": "get_weather", "description": "Current weather for a city",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
            {"name": "add", "description": "Adds a and b",
             "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
        ]}],
        "generationConfig": {"maxOutputTokens": 256, "temperature": 1.5, "stopSequences": ["END"]},
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
    });
    assert_eq!(body(&t), want);
}

#[test]
fn gemini_tool_choice_mapping() {
    let base = json!({"model": "gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}], "tools": [weather_tool(), add_tool()]});
    let cases = [
        (json!("auto"), json!({"mode": "AUTO"})),
        (json!("required"), json!({"mode": "ANY"})),
        (json!("none"), json!({"mode": "NONE"})),
        (
            json!({"type": "function", "function": {"name": "add"}}),
            json!({"mode": "ANY", "allowedFunctionNames": ["add"]}),
        ),
    ];
    for (choice, want) in cases {
        let mut req = base.clone();
        req["tool_choice"] = choice.clone();
        let t = translate(Style::Gemini, &req);
        assert_eq!(body(&t)["toolConfig"]["functionCallingConfig"], want, "tool_choice {choice}");
    }
}

/// Three calls to the same tool plus one to another, answered out of order.
fn id_name_map_request() -> Value {
    json!({
        "model": "gemini-3-flash-preview",
        "messages": [
            {"role": "user", "content": "topics?"},
            {"role": "assistant", "content": "On it.", "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "generate_topic", "arguments": "{}"}},
                {"id": "t2", "type": "function", "function": {"name": "generate_topic", "arguments": ""}},
                {"id": "w1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}},
                {"id": "t3", "type": "function", "function": {"name": "generate_topic"}},
            ]},
            {"role": "tool", "tool_call_id": "w1", "content": "{\"temp\": -3}"},
            {"role": "tool", "tool_call_id": "t3", "content": "c"},
            {"role": "tool", "tool_call_id": "t1", "content": "a"},
            {"role": "tool", "tool_call_id": "t2", "content": "b"},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [weather_tool(), {"type": "function", "function": {"name": "generate_topic"}}],
    })
}

#[test]
fn gemini_id_and_name_map() {
    // Every response is named after the call its id points at.
    let b = body(&translate(Style::Gemini, &id_name_map_request()));
    let contents = b["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 3, "{b}");
    let model_parts = contents[1]["parts"].as_array().unwrap();
    assert_eq!(model_parts[0], json!({"text": "On it."}));
    let calls: Vec<(&str, &str, &Value)> = model_parts[1..]
        .iter()
        .map(|p| {
            (
                p["functionCall"]["id"].as_str().unwrap(),
                p["functionCall"]["name"].as_str().unwrap(),
                &p["functionCall"]["args"],
            )
        })
        .collect();
    let empty = json!({});
    let oslo = json!({"city": "Oslo"});
    assert_eq!(
        calls,
        vec![
            ("t1", "generate_topic", &empty),
            ("t2", "generate_topic", &empty),
            ("w1", "get_weather", &oslo),
            ("t3", "generate_topic", &empty)
        ]
    );
    // The results turn: responses in the order the caller sent them, each
    // named after its call; the user's follow-up text joins the same turn.
    let parts = contents[2]["parts"].as_array().unwrap();
    let responses: Vec<(&str, &str, &str)> = parts[..4]
        .iter()
        .map(|p| {
            let fr = &p["functionResponse"];
            (fr["id"].as_str().unwrap(), fr["name"].as_str().unwrap(), fr["response"]["output"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        responses,
        vec![
            ("w1", "get_weather", "{\"temp\": -3}"),
            ("t3", "generate_topic", "c"),
            ("t1", "generate_topic", "a"),
            ("t2", "generate_topic", "b")
        ]
    );
    assert_eq!(parts[4], json!({"text": "thanks"}));
}

fn gemini_settings_request() -> Value {
    json!({
        "model": "gemini-2.5-flash",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 50,
        "top_p": 0.5,
        "seed": 7,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "reasoning_effort": "low",
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "properties": {"x": {"type": "string"}}}}},
        "stream": true,
    })
}

#[test]
fn gemini_generation_settings() {
    let req = gemini_settings_request();
    let t = translate(Style::Gemini, &req);
    assert!(t.stream);
    assert_eq!(
        t.url("https://generativelanguage.googleapis.com/v1beta"),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    let b = body(&t);
    assert_eq!(
        b["generationConfig"],
        json!({
            "maxOutputTokens": 50, "topP": 0.5, "seed": 7, "presencePenalty": 0.5, "frequencyPenalty": -0.5,
            "thinkingConfig": {"thinkingLevel": "LOW"},
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
        })
    );
    assert!(b.get("stream").is_none(), "Gemini streams by endpoint, not by a body key");
    let mut json_mode = req.clone();
    json_mode["response_format"] = json!({"type": "json_object"});
    let b = body(&translate(Style::Gemini, &json_mode));
    assert_eq!(b["generationConfig"]["responseMimeType"], "application/json");
    assert!(b["generationConfig"].get("responseJsonSchema").is_none());
}

// ---------------------------------------------------------------- content

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

fn image_request() -> Value {
    json!({"model": "gemini-2.5-flash", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG}"), "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
    ]}]})
}

#[test]
fn images_are_converted_not_dropped() {
    let png = PNG;
    let req = image_request();
    let a = body(&translate(Style::Anthropic, &req));
    assert_eq!(
        a["messages"][0]["content"],
        json!([
            {"type": "text", "text": "Compare"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        ])
    );
    let g = body(&translate(Style::Gemini, &req));
    assert_eq!(
        g["contents"][0]["parts"],
        json!([
            {"text": "Compare"},
            {"inlineData": {"mimeType": "image/png", "data": png}},
            {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
        ])
    );
}

fn assistant_parts_request() -> Value {
    json!({"model": "m", "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "no"}],
         "refusal": null, "annotations": [], "audio": null, "function_call": null},
        {"role": "assistant", "content": "b", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1,\"b\":2}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ], "tools": [add_tool()]})
}

#[test]
fn assistant_text_refusal_and_calls_form_one_turn() {
    let b = body(&translate(Style::Anthropic, &assistant_parts_request()));
    assert_eq!(
        b["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "no"}, {"type": "text", "text": "b"},
            {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 1, "b": 2}},
        ]})
    );
    assert_eq!(b["messages"].as_array().unwrap().len(), 3);
}

// ---------------------------------------------------------------- refusals

fn chat(extra: Value) -> Value {
    let mut req = json!({"model": "gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}], "tools": [weather_tool()]});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    req
}

#[test]
fn what_a_target_cannot_express_is_a_400_naming_it() {
    let both = [Style::Anthropic, Style::Gemini];
    let cases: Vec<(Vec<Style>, Value, &str)> = vec![
        (both.to_vec(), json!({"n": 2}), "n"),
        (both.to_vec(), json!({"logprobs": true}), "logprobs"),
        (both.to_vec(), json!({"top_logprobs": 2}), "top_logprobs"),
        (both.to_vec(), json!({"audio": {"voice": "x"}}), "audio"),
        (both.to_vec(), json!({"functions": []}), "functions"),
        (both.to_vec(), json!({"store": true}), "store"),
        (both.to_vec(), json!({"frobnicate": 1}), "frobnicate"),
        (
            both.to_vec(),
            json!({"tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice.function.name",
        ),
        (both.to_vec(), json!({"tool_choice": {"type": "custom", "custom": {"name": "x"}}}), "tool_choice.type"),
        (both.to_vec(), json!({"tools": [{"type": "custom", "custom": {"name": "x"}}]}), "tools[0].type"),
        (
            both.to_vec(),
            json!({"tools": [{"type": "function", "function": {"name": "bad name"}}]}),
            "tools[0].function.name",
        ),
        (both.to_vec(), json!({"reasoning_effort": "none"}), "reasoning_effort"),
        (vec![Style::Anthropic], json!({"response_format": {"type": "json_object"}}), "response_format"),
        (vec![Style::Anthropic], json!({"temperature": 1.5}), "temperature"),
        (vec![Style::Anthropic], json!({"seed": 1}), "seed"),
        (vec![Style::Anthropic], json!({"frequency_penalty": 0.2}), "frequency_penalty"),
        (vec![Style::Gemini], json!({"parallel_tool_calls": false}), "parallel_tool_calls"),
        (vec![Style::Gemini], json!({"user": "u"}), "user"),
        (vec![Style::Gemini], json!({"safety_identifier": "u"}), "safety_identifier"),
        (vec![Style::Anthropic], json!({"user": "u", "safety_identifier": "v"}), "user"),
        (
            vec![Style::Gemini],
            json!({"tools": [{"type": "function", "function": {"name": "9lives"}}]}),
            "tools[0].function.name",
        ),
        (vec![Style::Gemini], json!({"model": "../files/x"}), "model"),
    ];
    for (styles, extra, param) in cases {
        for style in styles {
            let e = refused(style, &chat(extra.clone()));
            assert_eq!(e.param.as_deref(), Some(param), "{style:?} {extra}: {e}");
        }
    }
}

#[test]
fn malformed_conversations_are_refused_with_their_place() {
    let user = json!({"role": "user", "content": "hi"});
    let call = json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]});
    let cases: Vec<(Vec<Value>, &str)> = vec![
        (vec![], "messages"),
        (vec![json!({"role": "system", "content": "only a system prompt"})], "messages"),
        (vec![json!({"role": "function", "name": "f", "content": "x"})], "messages[0].role"),
        (vec![json!({"role": "user", "content": "hi", "name": "bob"})], "messages[0].name"),
        (
            vec![
                json!({"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}),
            ],
            "messages[0].content[0]",
        ),
        (
            vec![json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]})],
            "messages[0].content[0].image_url.url",
        ),
        (vec![json!({"role": "user", "content": ""})], "messages[0].content"),
        (vec![user.clone(), json!({"role": "tool", "tool_call_id": "zz", "content": "x"})], "messages[1].tool_call_id"),
        (vec![user.clone(), call.clone()], "messages"),
        (
            vec![
                user.clone(),
                call.clone(),
                json!({"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}),
            ],
            "messages[2].content[0]",
        ),
        (
            vec![
                user.clone(),
                json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":"}}]}),
            ],
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            vec![
                user.clone(),
                json!({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "[1]"}}]}),
            ],
            "messages[1].tool_calls[0].function.arguments",
        ),
        (vec![user.clone(), json!({"role": "assistant", "content": "prefill"})], "messages"),
    ];
    for (messages, param) in cases {
        for style in [Style::Anthropic, Style::Gemini] {
            let req = json!({"model": "gemini-2.5-flash", "messages": messages, "tools": [weather_tool()]});
            let e = refused(style, &req);
            assert_eq!(e.param.as_deref(), Some(param), "{style:?} {req}: {e}");
        }
    }
}

#[test]
fn malformed_tools_are_refused_with_their_place_from_bytes_as_from_a_tree() {
    let f = |function: Value| json!({"type": "function", "function": function});
    let cases: Vec<(Value, &str)> = vec![
        (json!({"type": "function"}), "tools"),
        (json!([5]), "tools[0].type"),
        (json!([{"type": "retrieval"}]), "tools[0].type"),
        (json!([{"type": "function"}]), "tools[0].function"),
        (json!([f(json!({"name": "get weather"}))]), "tools[0].function.name"),
        (json!([f(json!({"name": 5}))]), "tools[0].function.name"),
        (json!([weather_tool(), weather_tool()]), "tools[1].function.name"),
        (json!([f(json!({"name": "a", "description": 5}))]), "tools[0].function.description"),
        (json!([f(json!({"name": "a", "parameters": "object"}))]), "tools[0].function.parameters"),
        (json!([f(json!({"name": "a", "strict": "yes"}))]), "tools[0].function.strict"),
    ];
    for (tools, param) in cases {
        for style in [Style::Anthropic, Style::Gemini, Style::OpenAiResponses] {
            let req =
                json!({"model": "gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}], "tools": tools});
            let from_tree = refused(style, &req);
            assert_eq!(from_tree.param.as_deref(), Some(param), "{style:?} {req}: {from_tree}");
            let from_bytes = openai_request_bytes_to(style, req.to_string().as_bytes()).unwrap_err();
            assert_eq!(from_bytes, from_tree, "{style:?} {req}");
        }
    }
    // Declarations read well go out the same from either entry point.
    let tools = json!([
        weather_tool(),
        add_tool(),
        f(json!({"name": "bare"})),
        f(json!({"name": "n", "description": null, "parameters": null, "strict": null}))
    ]);
    for style in [Style::Anthropic, Style::Gemini, Style::OpenAiResponses] {
        let req = json!({"model": "gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}], "tools": tools});
        let from_bytes = openai_request_bytes_to(style, req.to_string().as_bytes()).unwrap();
        assert_eq!(from_bytes, translate(style, &req), "{style:?}");
    }
}

#[test]
fn the_model_is_required() {
    for style in [Style::Anthropic, Style::Gemini, Style::OpenAi] {
        let e = refused(style, &json!({"messages": [{"role": "user", "content": "hi"}]}));
        assert_eq!(e.param.as_deref(), Some("model"));
    }
}

#[test]
fn malformed_json_is_a_400_without_a_param() {
    for style in [Style::Anthropic, Style::Gemini, Style::OpenAi] {
        let e = openai_request_bytes_to(style, b"{\"model\": \"m\", ").unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(e.param, None);
        assert_eq!(e.code.as_deref(), Some("invalid_json"));
        let e = openai_request_bytes_to(style, b"[1, 2]").unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, None));
    }
}

// ---------------------------------------------------------------- pass-through

#[test]
fn openai_to_openai_forwards_the_exact_bytes() {
    // Odd spacing, key order and number forms: nothing may change.
    let raw = br#"{ "stream":true, "model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],
        "temperature":0.70, "frobnicate":{"z":1,"a":2}, "stream_options":{"include_usage":true} }"#;
    let t = openai_request_bytes_to(Style::OpenAi, raw).unwrap();
    assert_eq!(t.body, raw.to_vec());
    assert_eq!((t.model.as_str(), t.stream, t.include_usage), ("gpt-4o-mini", true, true));
    assert_eq!(t.url("https://api.openai.com/v1"), "https://api.openai.com/v1/chat/completions");
    // The corpus's recorded OpenAI requests pass through and stay valid.
    let dir = common::shared_dir().join("wire-corpus/openai/requests");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json")
            || path.to_string_lossy().ends_with(".expected.json")
        {
            continue;
        }
        let raw = std::fs::read(&path).unwrap();
        let t = openai_request_bytes_to(Style::OpenAi, &raw).unwrap();
        assert_eq!(t.body, raw, "{}", path.display());
    }
}

#[test]
fn headers_carry_the_upstream_key_only_when_given() {
    let req = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true});
    let t = translate(Style::Anthropic, &req);
    let h = t.headers(Some("sk-ant"));
    assert!(h.contains(&("x-api-key".to_string(), "sk-ant".to_string())));
    assert!(h.contains(&("anthropic-version".to_string(), "2023-06-01".to_string())));
    assert!(!t.headers(None).iter().any(|(k, _)| k == "x-api-key"));
    let g = translate(Style::Gemini, &req);
    assert!(g.headers(Some("k")).contains(&("x-goog-api-key".to_string(), "k".to_string())));
}

// ---------------------------------------------------------------- oracles

/// Every translated request of the tests above, and each tool_choice form,
/// checked by the official SDKs' request validators (one interpreter for all).
#[test]
fn every_translated_request_passes_the_sdk_validators() {
    let both = |req: Value| vec![(Style::Anthropic, req.clone()), (Style::Gemini, req)];
    let mut cases: Vec<(Style, Value)> = vec![
        (Style::Anthropic, anthropic_golden_request()),
        (Style::Anthropic, anthropic_settings_request()),
        (Style::Gemini, gemini_golden_request()),
        (Style::Gemini, gemini_settings_request()),
        (Style::Gemini, id_name_map_request()),
        (Style::Anthropic, assistant_parts_request()),
    ];
    cases.extend(both(strict_request()));
    cases.extend(both(image_request()));
    let mut id_map = id_name_map_request();
    id_map["model"] = json!("claude-sonnet-4-5");
    cases.push((Style::Anthropic, id_map));
    let base =
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [weather_tool(), add_tool()]});
    for choice in
        [json!("auto"), json!("required"), json!("none"), json!({"type": "function", "function": {"name": "add"}})]
    {
        let mut req = base.clone();
        req["tool_choice"] = choice;
        cases.extend(both(req.clone()));
        req["parallel_tool_calls"] = json!(false);
        cases.push((Style::Anthropic, req));
    }
    let mut jobs = Vec::new();
    for (style, req) in &cases {
        let t = translate(*style, req);
        // The SDK's request type no longer lists temperature/top_p (older
        // models still take them); everything else is checked strictly.
        let args = if *style == Style::Anthropic { vec!["--allow-top-level", "temperature,top_p"] } else { vec![] };
        jobs.push(Job { script: "validate_request.py", style: style.name(), bytes: t.body, args });
    }
    let dir = common::shared_dir().join("wire-corpus/openai/requests");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) == Some("json")
            && !path.to_string_lossy().ends_with(".expected.json")
        {
            let t = openai_request_bytes_to(Style::OpenAi, &std::fs::read(&path).unwrap()).unwrap();
            jobs.push(Job { script: "validate_request.py", style: "openai", bytes: t.body, args: vec![] });
        }
    }
    let Some(verdicts) = oracle_batch(&jobs) else {
        return;
    };
    for (job, v) in jobs.iter().zip(&verdicts) {
        assert!(
            v.ok,
            "the {} validator refused:\n{}\n{}\nbody: {}",
            job.style,
            v.stdout,
            v.stderr,
            String::from_utf8_lossy(&job.bytes)
        );
    }
}
