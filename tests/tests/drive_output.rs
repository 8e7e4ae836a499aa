//! Typed final output end to end: both drivers, every wire format, every
//! strategy, against the fake provider (which checks each output field as
//! the real API does) and the official SDKs' request types.

#[macro_use]
mod drive_support;

use std::sync::Arc;

use drive_support::*;
use nexus_drive::cassette::{replay, Cassette, Quiet, Recorder, ReplayEnd};
use nexus_drive::{Answer, OutputMode, OutputSpec, RunStatus, Strategy, StreamEvent, Upstream};
use nexus_tests::fake::{FakeProvider, Fault, Script, Scripts, Style, Turn};
use nexus_tests::oracle;
use serde_json::{json, Value};

both_drivers!(
    every_style_and_mode_retries_an_invalid_answer_and_ends_in_the_value,
    a_model_that_refuses_the_native_field_with_tools_moves_to_tool_mode,
    a_failover_from_a_native_upstream_to_a_tool_mode_upstream_records_both,
    a_run_suspended_beside_the_output_tool_resumes_into_the_same_strategy,
    a_recorded_typed_run_replays_byte_for_byte,
);

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "celsius": {"type": "number"},
            "note": {"type": "string"}
        },
        "required": ["city", "celsius"]
    })
}

/// A model of each style that takes a schema together with tools.
fn model(style: Style) -> &'static str {
    match style {
        Style::Anthropic => "claude-sonnet-4-5",
        Style::Gemini => "gemini-3-pro-preview",
        Style::OpenAi | Style::OpenAiResponses => "gpt-5",
    }
}

/// A turn calling `weather`, signed where the model requires it (Gemini 3
/// refuses a call sent back without its thought signature).
fn weather_call(style: Style, city: &str) -> Turn {
    let turn = Turn::default().call("weather", format!(r#"{{"city":"{city}"}}"#));
    match style {
        Style::Gemini => turn.thinking("look it up", "c2lnbmVk"),
        _ => turn,
    }
}

fn weather_tool() -> nexus_drive::DynTool {
    ok_tool("weather", |a, _| format!("{} is 18 degrees", a["city"].as_str().unwrap_or("?")))
}

/// The official SDK's request types accept every body the run sent.
fn oracle_accepts(fake: &FakeProvider, style: Style, ctx: &str) {
    for r in fake.requests() {
        if let Some(run) = oracle::validate_request(style, &r.body) {
            assert!(run.ok, "{ctx}: refused by the SDK's types\n{}\n{}", run.stdout, String::from_utf8_lossy(&r.body));
        }
    }
}

fn every_style_and_mode_retries_an_invalid_answer_and_ends_in_the_value(d: Drv) {
    let valid = r#"{"city":"Paris","celsius":18}"#;
    for style in STYLES {
        for mode in [OutputMode::Auto, OutputMode::Native, OutputMode::Tool, OutputMode::Prompted] {
            for stream in [false, true] {
                let ctx = format!("{d:?} {style:?} {mode:?} stream={stream}");
                let answer = |t: &str| match mode {
                    OutputMode::Tool if style == Style::Gemini => {
                        Turn::default().call("final_result", t).thinking("answer", "c2lnbmVk")
                    }
                    OutputMode::Tool => Turn::default().call("final_result", t),
                    OutputMode::Prompted => Turn::text(format!("Here it is:\n```json\n{t}\n```")),
                    _ => Turn::text(t),
                };
                let turns =
                    vec![weather_call(style, "Paris"), answer(r#"{"city":"Paris","celsius":"warm"}"#), answer(valid)];
                let fake = FakeProvider::start(Scripts::new(KEY).model(model(style), Script::new(turns)));
                let (b, events) = Events::record(
                    builder(&fake, style, model(style), stream)
                        .dyn_tool(weather_tool())
                        .output(OutputSpec::new(schema()).with_mode(mode)),
                );
                let result =
                    d.client(b.build().unwrap()).run("Weather in Paris?").unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert_eq!(result.status, RunStatus::Done, "{ctx}");
                assert_eq!(result.output, Some(json!({"city": "Paris", "celsius": 18})), "{ctx}");
                let want = match mode {
                    OutputMode::Auto | OutputMode::Native => Strategy::Native,
                    OutputMode::Tool => Strategy::Tool,
                    OutputMode::Prompted => Strategy::Prompted,
                };
                assert_eq!(result.output_mode, Some(want), "{ctx}");
                assert_eq!(result.turns, 3, "{ctx}: the retry is an ordinary turn");
                assert_eq!(fake.requests().len(), 3, "{ctx}");
                let json = serde_json::to_value(&result).unwrap();
                assert_eq!(json["outputMode"], want.name(), "{ctx}");
                if stream {
                    let partial = events.recorded().iter().any(|e| matches!(e, StreamEvent::OutputPartial { .. }));
                    assert!(partial, "{ctx}: the stream shows the output as it arrives");
                }
                oracle_accepts(&fake, style, &ctx);
            }
        }
    }
}

fn a_model_that_refuses_the_native_field_with_tools_moves_to_tool_mode(d: Drv) {
    let style = Style::Gemini;
    let turns = vec![
        Turn::default().call("weather", r#"{"city":"Oslo"}"#),
        Turn::default().call("final_result", r#"{"city":"Oslo","celsius":3}"#),
    ];
    let fake = FakeProvider::start(Scripts::new(KEY).model("gemini-2.5-flash", Script::new(turns)));
    let cfg = builder(&fake, style, "gemini-2.5-flash", false)
        .dyn_tool(weather_tool())
        .output(OutputSpec::new(schema()).with_mode(OutputMode::Native))
        .build()
        .unwrap();
    let result = d.client(cfg).run("Weather in Oslo?").unwrap();
    assert_eq!(result.output, Some(json!({"city": "Oslo", "celsius": 3})));
    assert_eq!(result.output_mode, Some(Strategy::Tool));
    let recorded: Vec<Strategy> = result.output_strategies.iter().map(|r| r.strategy).collect();
    assert_eq!(recorded, [Strategy::Native, Strategy::Tool]);
    assert!(result.output_strategies[1].reason.contains("response mime type"), "{:?}", result.output_strategies);
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "the refused request, then two turns in tool mode");
    assert!(requests[0].json.as_ref().unwrap().pointer("/generationConfig/responseJsonSchema").is_some());
    for r in &requests[1..] {
        let body = r.json.as_ref().unwrap();
        assert!(body.get("generationConfig").is_none(), "no native field once refused");
        let names: Vec<&str> = body["tools"][0]["functionDeclarations"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(names, ["weather", "final_result"]);
    }
    oracle_accepts(&fake, style, "gemini fallback");
}

fn a_failover_from_a_native_upstream_to_a_tool_mode_upstream_records_both(d: Drv) {
    let primary = Script::new(vec![
        Turn::default().call("weather", r#"{"city":"Lima"}"#),
        Turn::text("never").fault(Fault::status(503).times(10)),
    ]);
    let backup = Script::new(vec![
        Turn::text("never: the backup answers from the second turn"),
        Turn::default().call("final_result", r#"{"city":"Lima","celsius":20}"#),
    ]);
    let fake = FakeProvider::start(Scripts::new(KEY).model("gpt-5", primary).model("gemini-2.5-flash", backup));
    let up = Upstream {
        style: proto_style(Style::Gemini),
        base_url: fake.base_url(Style::Gemini),
        model: "gemini-2.5-flash".into(),
    };
    let cfg = builder(&fake, Style::OpenAi, "gpt-5", false)
        .retries(0)
        .fallback_key(up, KEY)
        .dyn_tool(weather_tool())
        .output(OutputSpec::new(schema()))
        .build()
        .unwrap();
    let result = d.client(cfg).run("Weather in Lima?").unwrap();
    assert_eq!(result.output, Some(json!({"city": "Lima", "celsius": 20})));
    let recorded: Vec<(usize, Strategy)> = result.output_strategies.iter().map(|r| (r.upstream, r.strategy)).collect();
    assert_eq!(recorded, [(0, Strategy::Native), (1, Strategy::Tool)]);
    assert_eq!(result.output_mode, Some(Strategy::Tool));
    assert_eq!(result.failovers.len(), 1);
    let first = fake.requests()[0].json.clone().unwrap();
    assert_eq!(first["response_format"]["json_schema"]["strict"], true);
}

fn a_run_suspended_beside_the_output_tool_resumes_into_the_same_strategy(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let turns = vec![Turn::default()
            .call("lookup", r#"{"q":"Paris"}"#)
            .call("final_result", r#"{"city":"Paris","celsius":18}"#)];
        let fake = FakeProvider::start(Scripts::new(KEY).model(model(style), Script::new(turns)));
        let cfg = builder(&fake, style, model(style), false)
            .relay_tool(
                "lookup",
                "Looks it up elsewhere.",
                json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            )
            .output(OutputSpec::new(schema()).with_mode(OutputMode::Tool))
            .build()
            .unwrap();
        let client = d.client(cfg);
        let first = client.run("Weather in Paris?").unwrap();
        assert_eq!(first.status, RunStatus::Pending, "{ctx}");
        assert_eq!(first.output, None, "{ctx}: nothing commits while a sibling is pending");
        let state = first.suspended.as_ref().unwrap().state.clone();
        let answers: Vec<Answer> =
            first.pending.iter().map(|r| Answer::ok(r.id.clone(), data(json!({"output": "found"})))).collect();
        let done = client.resume(&state, answers).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.status, RunStatus::Done, "{ctx}");
        assert_eq!(done.output, Some(json!({"city": "Paris", "celsius": 18})), "{ctx}");
        assert_eq!(done.output_mode, Some(Strategy::Tool), "{ctx}");
        assert_eq!(fake.requests().len(), 1, "{ctx}: the output was given: no more model calls");
    }
}

fn a_recorded_typed_run_replays_byte_for_byte(d: Drv) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nexus-typed-output-{}-{d:?}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for style in STYLES {
        let path = dir.join(format!("{}.jsonl", style.name()));
        let turns =
            vec![weather_call(style, "Rome"), Turn::text("no json"), Turn::text(r#"{"city":"Rome","celsius":25}"#)];
        let fake = FakeProvider::start(Scripts::new(KEY).model(model(style), Script::new(turns)));
        let rec = Arc::new(Recorder::create(&path).unwrap());
        rec.set_api_key(KEY);
        let cfg = builder(&fake, style, model(style), true)
            .dyn_tool(weather_tool())
            .output(OutputSpec::new(schema()).with_mode(OutputMode::Native))
            .tap(rec.clone())
            .build()
            .unwrap();
        let live = d.client(cfg).run("Weather in Rome?").unwrap();
        rec.finish().unwrap();
        let cassette = Cassette::load(&path).unwrap();
        let replayed = replay(&cassette, &mut Quiet).unwrap_or_else(|e| panic!("{style:?}: {e}"));
        assert!(matches!(replayed.end, ReplayEnd::Finished(_)), "{style:?}: {:?}", replayed.end);
        assert_eq!(replayed.run.output(), live.output.as_ref(), "{style:?}");
        assert_eq!(replayed.run.output_strategies(), &live.output_strategies[..], "{style:?}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(KEY), "{style:?}: no key in the cassette");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
