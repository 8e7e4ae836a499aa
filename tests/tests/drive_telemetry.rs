//! Spans from the library (SPEC §22) in both drivers: tools that run at
//! the same time (on the blocking driver's threads, or the async driver's
//! tasks) stay children of their run, because the driver passes the parent
//! explicitly; exported over OTLP/HTTP to a loopback collector.

#[macro_use]
mod drive_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use drive_support::*;
use nexus_drive::telemetry::OtlpPipeline;
use nexus_drive::AgentTool;
use nexus_tests::fake::{FakeProvider, Scripts, Style, Turn};
use nexus_tests::otlp::{attr, hex, OtlpReceiver};

both_drivers!(concurrent_tools_stay_under_their_run, parallel_childrens_chat_spans_sit_under_their_own_agents,);

fn concurrent_tools_stay_under_their_run(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(Scripts::new(KEY).model(
            "m-otel",
            script(vec![Turn::default().call("meet", r#"{"n":1}"#).call("meet", r#"{"n":2}"#), Turn::text("met")]),
        ));
        let collector = OtlpReceiver::start();
        let pipeline =
            OtlpPipeline::to_endpoint(&format!("{}/v1/traces", collector.endpoint()), Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        // Each call returns only once both are running: they overlap.
        let gate = Gate::new(2);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let told = seen.clone();
        let cfg = builder(&fake, style, "m-otel", true)
            .dyn_tool(ok_tool("meet", move |a, ctx| {
                told.lock().unwrap_or_else(|e| e.into_inner()).push(ctx.traceparent().map(str::to_string));
                if gate.pass() {
                    format!("met {}", a["n"])
                } else {
                    "alone".into()
                }
            }))
            .telemetry(pipeline.telemetry().agent_name("greeter"))
            .build()
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let r = d.client(cfg).run("meet twice").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(outputs(&r), ["met 1", "met 2"], "{ctx}: the calls overlapped");
        pipeline.shutdown();
        let spans: Vec<_> = collector.spans().into_iter().map(|(_, s)| s).collect();
        let agent =
            spans.iter().find(|s| s.name == "invoke_agent greeter").unwrap_or_else(|| panic!("{ctx}: {spans:#?}"));
        assert_eq!(attr(&agent.attributes, "gen_ai.agent.name").as_deref(), Some("greeter"));
        let tools: Vec<_> = spans.iter().filter(|s| s.name == "execute_tool meet").collect();
        assert_eq!(tools.len(), 2, "{ctx}");
        assert!(tools.iter().all(|t| t.parent_span_id == agent.span_id && t.trace_id == agent.trace_id), "{ctx}");
        // The two spans overlap in time, as the calls did.
        let (a, b) = (tools[0], tools[1]);
        assert!(
            a.start_time_unix_nano < b.end_time_unix_nano && b.start_time_unix_nano < a.end_time_unix_nano,
            "{ctx}"
        );
        // Each call was told its own span's context, to pass on.
        let mut told: Vec<String> = seen.lock().unwrap_or_else(|e| e.into_inner()).iter().flatten().cloned().collect();
        let mut expected: Vec<String> =
            tools.iter().map(|t| format!("00-{}-{}-01", hex(&t.trace_id), hex(&t.span_id))).collect();
        told.sort();
        expected.sort();
        assert_eq!(told, expected, "{ctx}");
        let chats = spans.iter().filter(|s| s.name == "chat m-otel").count();
        assert_eq!(chats, 2, "{ctx}");
        let expected_provider = match style {
            nexus_tests::fake::Style::Anthropic => "anthropic",
            nexus_tests::fake::Style::Gemini => "gcp.gemini",
            _ => "openai",
        };
        assert_eq!(attr(&agent.attributes, "gen_ai.provider.name").as_deref(), Some(expected_provider), "{ctx}");
    }
}

/// Two children of one turn call their models at once (the fake answers
/// neither until both asked): each call keeps one `chat` span of its own,
/// under its own agent's `invoke_agent` span, with its own usage.
fn parallel_childrens_chat_spans_sit_under_their_own_agents(d: Drv) {
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model(
                "m-parent",
                script(vec![
                    Turn::default().call("alpha", r#"{"prompt": "look"}"#).call("beta", r#"{"prompt": "hello"}"#),
                    Turn::text("both back"),
                ]),
            )
            .model("m-alpha", script(vec![Turn::default().call("lookup", "{}"), Turn::text("alpha done")]))
            .model("m-beta", script(vec![Turn::text("beta done")]))
            .gate(&["m-alpha", "m-beta"], 2),
    );
    let collector = OtlpReceiver::start();
    let pipeline =
        OtlpPipeline::to_endpoint(&format!("{}/v1/traces", collector.endpoint()), Duration::from_secs(5)).unwrap();
    let child = |name: &str, style: Style, model: &str| {
        AgentTool::new(name, "helps", proto_style(style), model).base_url(fake.base_url(style)).api_key(KEY)
    };
    let cfg = builder(&fake, Style::OpenAi, "m-parent", false)
        .agent(child("alpha", Style::Anthropic, "m-alpha").dyn_tool(ok_tool("lookup", |_, _| "found".into())))
        .agent(child("beta", Style::Gemini, "m-beta"))
        .telemetry(pipeline.telemetry())
        .build()
        .unwrap();
    let r = d.client(cfg).run("split it").unwrap();
    assert_eq!(outputs(&r), ["alpha done", "beta done"]);
    assert!(fake.failures().is_empty(), "both calls were in flight at once: {:?}", fake.failures());
    pipeline.shutdown();
    let spans: Vec<_> = collector.spans().into_iter().map(|(_, s)| s).collect();
    let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    let run = named("invoke_agent");
    assert_eq!(run.len(), 1, "{spans:#?}");
    for (agent, model, calls) in [("alpha", "m-alpha", 2), ("beta", "m-beta", 1), ("", "m-parent", 2)] {
        let parent = if agent.is_empty() { run[0] } else { named(&format!("invoke_agent {agent}"))[0] };
        let chats = named(&format!("chat {model}"));
        assert_eq!(chats.len(), calls, "{model}: one span per call");
        for chat in chats {
            assert_eq!(chat.parent_span_id, parent.span_id, "{model} under its own run's span");
            assert!(attr(&chat.attributes, "gen_ai.usage.input_tokens").is_some_and(|t| t != "0"), "{model}");
            assert!(attr(&chat.attributes, "gen_ai.response.finish_reasons").is_some(), "{model}");
        }
    }
}
