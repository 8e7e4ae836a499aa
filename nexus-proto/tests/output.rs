//! Typed final output through the machine: every style × strategy, the
//! retry path, refusals, a refused native field, failover, suspension and
//! restore, and the partial output of a stream.
#![cfg(feature = "json-schema")]

mod sim;

use nexus_proto::output::{decide, ModelRule};
use nexus_proto::{
    Answer, Input, Message, Outcome, Output, OutputError, OutputMode, OutputSpec, Request, Role, Run, RunConfig,
    RunError, Strategy, StreamEvent, Style, ToolBatch, ToolDecl, ToolReply, ToolResult, Upstream,
};
use serde_json::{json, Value};
use sim::{Sim, Stop, Turn};

const STYLES: [Style; 4] = [Style::Anthropic, Style::OpenAi, Style::OpenAiResponses, Style::Gemini];

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "celsius": {"type": "number", "minimum": -90},
            "note": {"type": "string"}
        },
        "required": ["city", "celsius"]
    })
}

fn weather() -> ToolDecl {
    ToolDecl::new(
        "weather",
        "Weather for a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )
}

fn spec(mode: OutputMode) -> OutputSpec {
    OutputSpec::new(schema()).with_mode(mode)
}

fn model_for(style: Style) -> &'static str {
    match style {
        Style::Gemini => "gemini-3-pro-preview",
        Style::Anthropic => "claude-sonnet-4-5",
        _ => "gpt-5",
    }
}

fn run_with(style: Style, stream: bool, spec: OutputSpec, tools: Vec<ToolDecl>) -> Run {
    let mut c = sim::config(style, stream);
    c.model = model_for(style).into();
    c.output = Some(spec);
    Run::new(c, tools, vec![Message::user("weather in Paris?")]).unwrap()
}

/// The native field of a request body, per style.
fn native_field(style: Style, body: &Value) -> Option<Value> {
    let v = match style {
        Style::OpenAi => body.get("response_format"),
        Style::OpenAiResponses => body.pointer("/text/format"),
        Style::Anthropic => body.pointer("/output_config/format"),
        Style::Gemini => body.pointer("/generationConfig/responseJsonSchema"),
    };
    v.cloned()
}

fn tool_names(style: Style, body: &Value) -> Vec<String> {
    let names: Vec<Value> = match style {
        Style::Gemini => {
            body.pointer("/tools/0/functionDeclarations").and_then(Value::as_array).cloned().unwrap_or_default()
        }
        _ => body.get("tools").and_then(Value::as_array).cloned().unwrap_or_default(),
    };
    names
        .iter()
        .filter_map(|t| t.get("name").or_else(|| t.pointer("/function/name")).and_then(Value::as_str).map(String::from))
        .collect()
}

#[test]
fn native_output_retries_an_invalid_answer_then_commits_in_every_style() {
    for style in STYLES {
        for stream in [false, true] {
            // OpenAI strict asks for the optional `note` as null; the value
            // is still the user's schema's (no `note`).
            let last = if matches!(style, Style::OpenAi | Style::OpenAiResponses) {
                r#"{"city":"Paris","celsius":18.5,"note":null}"#
            } else {
                r#"{"city":"Paris","celsius":18.5}"#
            };
            let script = vec![
                Turn::calls(&[("c1", "weather", r#"{"city":"Paris"}"#)]),
                Turn::text("It is mild in Paris."),
                Turn::text(r#"{"city":"Paris","celsius":-300}"#),
                Turn::text(last),
            ];
            let mut sim = Sim::from_run(run_with(style, stream, spec(OutputMode::Auto), vec![weather()]), script);
            let stop = sim.drive(&mut sim::echo);
            assert_eq!(stop, Stop::Done(Outcome::Done), "{style:?} stream={stream}");
            assert_eq!(sim.run.output(), Some(&json!({"city": "Paris", "celsius": 18.5})), "{style:?}");
            assert_eq!(sim.run.output_strategies().len(), 1);
            assert_eq!(sim.run.output_strategies()[0].strategy, Strategy::Native);
            for body in &sim.sent {
                assert!(native_field(style, body).is_some(), "{style:?}: the native field on every turn");
                assert_eq!(tool_names(style, body), ["weather"], "{style:?}: no output tool in native mode");
            }
            let retries: Vec<&Message> = sim
                .run
                .transcript()
                .iter()
                .filter(|m| m.role == Role::User && m.text().contains("did not match"))
                .collect();
            assert!(!retries.is_empty(), "{style:?}: the validation errors went back as a user turn");
            assert!(retries[0].text().contains("no JSON object"), "{}", retries[0].text());
            assert!(sim
                .events
                .iter()
                .any(|e| matches!(e, StreamEvent::OutputStrategy { strategy: Strategy::Native, .. })));
            if stream {
                assert!(
                    sim.events.iter().any(|e| matches!(e, StreamEvent::OutputPartial { .. })),
                    "{style:?}: a stream shows the partial output"
                );
            }
        }
    }
}

#[test]
fn native_fields_are_written_as_each_api_defines_them() {
    for style in STYLES {
        let mut sim = Sim::from_run(
            run_with(style, false, spec(OutputMode::Native), vec![]),
            vec![Turn::text(r#"{"city":"Oslo","celsius":3}"#)],
        );
        assert_eq!(sim.drive(&mut sim::echo), Stop::Done(Outcome::Done));
        let body = &sim.sent[0];
        match style {
            Style::OpenAi => {
                let f = &body["response_format"];
                assert_eq!(f["type"], "json_schema");
                assert_eq!(f["json_schema"]["name"], "final_result");
                assert_eq!(f["json_schema"]["strict"], true);
                let s = &f["json_schema"]["schema"];
                assert_eq!(s["additionalProperties"], false);
                assert_eq!(s["required"], json!(["celsius", "city", "note"]));
                assert_eq!(s["properties"]["note"]["type"], json!(["string", "null"]));
            }
            Style::OpenAiResponses => {
                let f = &body["text"]["format"];
                assert_eq!(f["type"], "json_schema");
                assert_eq!(f["name"], "final_result");
                assert_eq!(f["strict"], true);
                assert!(f.get("json_schema").is_none(), "Responses flattens the format");
                assert_eq!(f["schema"]["additionalProperties"], false);
            }
            Style::Anthropic => {
                assert_eq!(body["output_config"]["format"]["type"], "json_schema");
                let s = &body["output_config"]["format"]["schema"];
                assert_eq!(s["additionalProperties"], false);
                assert_eq!(s["properties"]["celsius"]["description"], "{minimum: -90}");
            }
            Style::Gemini => {
                assert_eq!(body["generationConfig"]["responseMimeType"], "application/json");
                assert_eq!(body["generationConfig"]["responseJsonSchema"], schema());
            }
        }
        assert_eq!(sim.run.output(), Some(&json!({"city": "Oslo", "celsius": 3})));
    }
}

#[test]
fn tool_mode_runs_siblings_first_and_keeps_the_transcript_valid() {
    for style in STYLES {
        for stream in [false, true] {
            let script = vec![
                Turn::calls(&[("c1", "final_result", r#"{"city":"Paris"}"#)]),
                Turn::calls(&[
                    ("c2", "weather", r#"{"city":"Paris"}"#),
                    ("c3", "final_result", r#"{"city":"Paris","celsius":18}"#),
                ]),
            ];
            let mut sim = Sim::from_run(run_with(style, stream, spec(OutputMode::Tool), vec![weather()]), script);
            assert_eq!(sim.drive(&mut sim::echo), Stop::Done(Outcome::Done), "{style:?}");
            assert_eq!(sim.run.output(), Some(&json!({"city": "Paris", "celsius": 18})));
            for body in &sim.sent {
                assert_eq!(tool_names(style, body), ["weather", "final_result"]);
                assert!(native_field(style, body).is_none());
            }
            // The output tool never runs; its sibling does.
            let executed: Vec<&str> = sim.executed.iter().map(|(id, _)| id.as_str()).collect();
            assert_eq!(executed.len(), 1, "{style:?}: {executed:?}");
            // Every call has its result in the next turn.
            let t = sim.run.transcript();
            let last = t.last().unwrap();
            assert_eq!(last.role, Role::User);
            let calls: Vec<_> = t[t.len() - 2].tool_calls().map(|c| c.id.clone()).collect();
            let results: Vec<_> = last.tool_results().map(|r| r.call_id.clone()).collect();
            assert_eq!(calls, results);
            let first_result = t[2].tool_results().next().unwrap();
            assert!(first_result.is_error && first_result.output.contains("celsius"), "{}", first_result.output);
            if stream {
                assert!(sim
                    .events
                    .iter()
                    .any(|e| matches!(e, StreamEvent::OutputPartial { value } if value["city"] == "Paris")));
            }
        }
    }
}

#[test]
fn prompted_mode_puts_the_schema_in_the_system_prompt_and_reads_fenced_json() {
    for style in STYLES {
        let mut c = sim::config(style, false);
        c.system = Some("Be brief.".into());
        c.output = Some(spec(OutputMode::Prompted));
        let run = Run::new(c, vec![weather()], vec![Message::user("go")]).unwrap();
        let mut sim = Sim::from_run(run, vec![Turn::text("Here:\n```json\n{\"city\":\"Rome\",\"celsius\":25}\n```")]);
        assert_eq!(sim.drive(&mut sim::echo), Stop::Done(Outcome::Done));
        assert_eq!(sim.run.output(), Some(&json!({"city": "Rome", "celsius": 25})));
        let body = sim.sent[0].to_string();
        assert!(body.contains("Be brief.") && body.contains("JSON Schema") && body.contains("celsius"), "{style:?}");
        assert!(native_field(style, &sim.sent[0]).is_none());
        assert_eq!(tool_names(style, &sim.sent[0]), ["weather"]);
    }
}

#[test]
fn exhausted_retries_fail_with_the_last_answer_and_its_errors() {
    let mut s = spec(OutputMode::Native);
    s.retries = 1;
    let mut sim = Sim::from_run(
        run_with(Style::Anthropic, false, s, vec![]),
        vec![Turn::text(r#"{"city":1}"#), Turn::text(r#"{"city":"x"}"#)],
    );
    let Stop::Done(Outcome::Failed { error: RunError::Output(OutputError::Invalid { attempts, raw, errors }) }) =
        sim.drive(&mut sim::echo)
    else {
        panic!("not an output error")
    };
    assert_eq!(attempts, 2);
    assert_eq!(raw, r#"{"city":"x"}"#);
    assert!(errors.iter().any(|e| e.contains("celsius")), "{errors:?}");
    assert_eq!(sim.run.output(), None);
}

/// Drives `run`, answering request `n` with `replies[n]` when given (status, body).
fn drive_raw(run: &mut Run, replies: &[(u16, Value)]) -> (Outcome, Vec<Value>) {
    let mut sent = Vec::new();
    let now = nexus_proto::Timestamp(1);
    loop {
        match run.poll_output() {
            Output::Send(req) => {
                sent.push(serde_json::from_slice::<Value>(&req.body).unwrap());
                let (status, body) = replies[sent.len() - 1].clone();
                let head = Input::ResponseHead {
                    exchange: req.exchange,
                    status,
                    headers: vec![("content-type".into(), "application/json".into())],
                };
                run.handle_input(now, head).unwrap();
                let bytes = serde_json::to_vec(&body).unwrap();
                run.handle_input(now, Input::ResponseBody { exchange: req.exchange, chunk: &bytes }).unwrap();
                run.handle_input(now, Input::ResponseEnd { exchange: req.exchange }).unwrap();
            }
            Output::RunTools(ToolBatch { calls, .. }) => {
                for c in calls {
                    let reply = ToolReply::Done(ToolResult::ok("ok"));
                    run.handle_input(now, Input::ToolReply { call_id: c.call_id, reply }).unwrap();
                }
            }
            Output::Done(o) => return (o, sent),
            Output::Event(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn refusals_are_their_own_error() {
    let anthropic_refusal = json!({"id":"msg_1","type":"message","role":"assistant","model":"m",
        "content":[{"type":"text","text":"I can't help with that."}],"stop_reason":"refusal","stop_sequence":null,
        "usage":{"input_tokens":1,"output_tokens":1}});
    let mut run = run_with(Style::Anthropic, false, spec(OutputMode::Native), vec![]);
    let (o, _) = drive_raw(&mut run, &[(200, anthropic_refusal)]);
    assert_eq!(o, Outcome::Failed { error: RunError::Output(OutputError::Refused { message: "refusal".into() }) });

    let openai_refusal = json!({"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,
        "message":{"role":"assistant","content":null,"refusal":"I won't."},"finish_reason":"stop"}]});
    let mut run = run_with(Style::OpenAi, false, spec(OutputMode::Native), vec![]);
    let (o, _) = drive_raw(&mut run, &[(200, openai_refusal)]);
    assert_eq!(o, Outcome::Failed { error: RunError::Output(OutputError::Refused { message: "I won't.".into() }) });
}

#[test]
fn max_tokens_cutting_the_json_is_reported_as_truncation() {
    let cut = json!({"id":"msg_1","type":"message","role":"assistant","model":"m",
        "content":[{"type":"text","text":"{\"city\": \"Par"}],"stop_reason":"max_tokens","stop_sequence":null,
        "usage":{"input_tokens":1,"output_tokens":1}});
    let mut run = run_with(Style::Anthropic, false, spec(OutputMode::Native), vec![]);
    let (o, _) = drive_raw(&mut run, &[(200, cut)]);
    assert_eq!(
        o,
        Outcome::Failed { error: RunError::Output(OutputError::Truncated { raw: "{\"city\": \"Par".into() }) }
    );
}

#[test]
fn a_refused_native_field_moves_the_upstream_to_tool_mode_for_the_rest_of_the_run() {
    let mut run = run_with(Style::Gemini, false, spec(OutputMode::Native), vec![weather()]);
    let refusal = json!({"error": {"code": 400, "message":
        "Function calling with a response mime type: 'application/json' is unsupported", "status": "INVALID_ARGUMENT"}});
    let call = json!({"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"final_result",
        "args":{"city":"Lima","celsius":20}}}]},"finishReason":"STOP","index":0}]});
    let (o, sent) = drive_raw(&mut run, &[(400, refusal), (200, call)]);
    assert_eq!(o, Outcome::Done);
    assert!(native_field(Style::Gemini, &sent[0]).is_some());
    assert!(native_field(Style::Gemini, &sent[1]).is_none());
    assert_eq!(tool_names(Style::Gemini, &sent[1]), ["weather", "final_result"]);
    let strategies: Vec<Strategy> = run.output_strategies().iter().map(|r| r.strategy).collect();
    assert_eq!(strategies, [Strategy::Native, Strategy::Tool]);
    assert!(run.output_strategies()[1].reason.starts_with("native refused"));
    assert_eq!(run.output(), Some(&json!({"city": "Lima", "celsius": 20})));
    // An unrelated 400 is a failure as before.
    let mut run = run_with(Style::OpenAi, false, spec(OutputMode::Native), vec![]);
    let other = json!({"error": {"message": "bad model", "type": "invalid_request_error"}});
    let (o, _) = drive_raw(&mut run, &[(400, other)]);
    assert!(matches!(o, Outcome::Failed { error: RunError::Provider(_) }));
}

#[test]
fn a_failover_decides_again_for_the_new_upstream_and_records_it() {
    let mut c = sim::config(Style::OpenAi, false);
    c.model = "gpt-5".into();
    c.retry.retries = 0;
    c.fallbacks.push(Upstream {
        style: Style::Gemini,
        base_url: "http://127.0.0.1:2".into(),
        model: "gemini-2.5-flash".into(),
    });
    c.output = Some(spec(OutputMode::Auto));
    let mut run = Run::new(c, vec![weather()], vec![Message::user("go")]).unwrap();
    let overloaded = json!({"error": {"message": "overloaded", "type": "server_error"}});
    let call = json!({"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"final_result",
        "args":{"city":"Lima","celsius":20}}}]},"finishReason":"STOP","index":0}]});
    let (o, sent) = drive_raw(&mut run, &[(503, overloaded), (200, call)]);
    assert_eq!(o, Outcome::Done);
    assert!(native_field(Style::OpenAi, &sent[0]).is_some());
    assert_eq!(tool_names(Style::Gemini, &sent[1]), ["weather", "final_result"]);
    let recorded: Vec<(usize, Strategy)> = run.output_strategies().iter().map(|r| (r.upstream, r.strategy)).collect();
    assert_eq!(recorded, [(0, Strategy::Native), (1, Strategy::Tool)]);
}

#[test]
fn no_output_commits_while_a_sibling_is_pending_and_a_restored_run_keeps_its_strategy() {
    for style in STYLES {
        let script = vec![Turn::calls(&[
            ("c1", "weather", r#"{"city":"Paris"}"#),
            ("c2", "final_result", r#"{"city":"Paris","celsius":18}"#),
        ])];
        let mut sim = Sim::from_run(run_with(style, false, spec(OutputMode::Tool), vec![weather()]), script);
        let stop = sim.drive(&mut |_| ToolReply::Pending(Request::new("approval", "allow?")));
        let Stop::Suspended(reqs) = stop else { panic!("{style:?}: not suspended") };
        assert_eq!(sim.run.output(), None, "nothing commits while a sibling is pending");
        sim.reload();
        assert_eq!(sim.run.output_strategies()[0].strategy, Strategy::Tool);
        sim.answer(Answer::ok(reqs[0].id.clone(), None)).unwrap();
        assert_eq!(sim.drive(&mut sim::echo), Stop::Done(Outcome::Done), "{style:?}");
        assert_eq!(sim.run.output(), Some(&json!({"city": "Paris", "celsius": 18})));
        assert_eq!(sim.sent.len(), 1, "{style:?}: no model call after the output");
    }
}

#[test]
fn auto_mode_follows_the_model_table_and_the_host_overrides() {
    let s = spec(OutputMode::Auto);
    assert_eq!(decide(&s, Style::OpenAi, "gpt-4o").0, Strategy::Native);
    assert_eq!(decide(&s, Style::OpenAi, "gpt-3.5-turbo").0, Strategy::Tool);
    assert_eq!(decide(&s, Style::Anthropic, "claude-sonnet-4-5").0, Strategy::Native);
    assert_eq!(decide(&s, Style::Anthropic, "claude-3-5-haiku-latest").0, Strategy::Tool);
    assert_eq!(decide(&s, Style::Gemini, "gemini-2.5-flash").0, Strategy::Tool);
    assert_eq!(decide(&s, Style::Gemini, "gemini-3-pro-preview").0, Strategy::Native);
    let mut o = s.clone();
    o.models.push(ModelRule { style: Some(Style::Gemini), prefix: "gemini-2.5".into(), strategy: Strategy::Prompted });
    assert_eq!(decide(&o, Style::Gemini, "gemini-2.5-flash"), (Strategy::Prompted, "override"));
    assert_eq!(decide(&o, Style::OpenAi, "gemini-2.5-x").0, Strategy::Native, "a rule is for its style");
    // A schema strict mode cannot carry goes by tool on OpenAI.
    let open = OutputSpec::new(json!({"type": "object", "properties": {"m": {"type": "object"}}}));
    assert_eq!(decide(&open, Style::OpenAi, "gpt-5").0, Strategy::Tool);
    for m in [OutputMode::Native, OutputMode::Tool, OutputMode::Prompted] {
        assert_eq!(decide(&spec(m), Style::Gemini, "gemini-2.5-flash").1, "mode");
    }
}

#[test]
fn bad_specs_are_refused_when_the_run_is_made() {
    let mk = |s: OutputSpec, tools: Vec<ToolDecl>| {
        let mut c = RunConfig::new(Style::OpenAi, "gpt-5");
        c.output = Some(s);
        Run::new(c, tools, vec![Message::user("go")]).err().map(|e| e.to_string())
    };
    assert!(mk(OutputSpec::new(json!({"type": "array"})), vec![]).unwrap().contains("root must be"));
    assert!(mk(OutputSpec::new(json!({"type": "object", "minProperties": "x"})), vec![])
        .unwrap()
        .contains("invalid output schema"));
    assert!(mk(spec(OutputMode::Auto).named("bad name"), vec![]).unwrap().contains("output name"));
    let clash = ToolDecl::new("final_result", "", json!({"type": "object"}));
    assert!(mk(spec(OutputMode::Auto), vec![clash]).unwrap().contains("shadow"));
}

#[test]
fn a_state_with_output_round_trips_byte_for_byte() {
    let mut sim = Sim::from_run(
        run_with(Style::OpenAi, false, spec(OutputMode::Tool), vec![weather()]),
        vec![Turn::calls(&[("c1", "weather", "{}"), ("c2", "final_result", r#"{"city":"a","celsius":1}"#)])],
    );
    let _ = sim.drive(&mut |_| ToolReply::Pending(Request::new("approval", "allow?")));
    let bytes = sim.run.snapshot();
    let again = Run::restore(&bytes).unwrap().snapshot();
    assert_eq!(String::from_utf8(bytes.clone()).unwrap(), String::from_utf8(again).unwrap());
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["format_version"], 3);
    assert_eq!(v["output"]["settled"]["status"], "value");
    assert_eq!(v["output"]["strategies"][0]["strategy"], "tool");
}
