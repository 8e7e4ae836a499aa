//! User input as suspension, end to end through the loop: a `Run` whose
//! tool is an MCP tool, bridged to a `Session` the way a tool source does it
//! (ToolInvocation → Input::Call with the answered request as `resume`),
//! with the server's side scripted in exact 2026 and legacy wire JSON.

use nexus_proto::mcp::{
    self, CallRequest, Era, Input as McpInput, Output as McpOutput, Resume, Session, SessionConfig, TransportKind,
};
use nexus_proto::*;
use serde_json::{json, Map, Value};

fn now() -> Timestamp {
    Timestamp(1_700_000_000_000)
}

/// A scripted OpenAI model: first a call to `srv__ask`, then a final answer.
fn model_reply(req: &HttpRequest) -> Vec<u8> {
    let body = String::from_utf8_lossy(&req.body);
    let json = if body.contains(r#""role":"tool""#) {
        r#"{"id":"r2","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}]}"#
    } else {
        r#"{"id":"r1","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"srv__ask","arguments":"{\"repo\":\"nexus\"}"}}]},"finish_reason":"tool_calls"}]}"#
    };
    json.as_bytes().to_vec()
}

fn modern_session() -> Session {
    let mut cfg = SessionConfig::new("srv", TransportKind::Stdio);
    cfg.era = Some(Era::Modern);
    Session::new(cfg).unwrap()
}

/// Runs one tool invocation against the session and a scripted server
/// (`server` answers each `tools/call` it gets), returning the tool's reply.
fn run_tool(
    s: &mut Session,
    inv: &ToolInvocation,
    server: &mut dyn FnMut(&Value) -> Value,
    sent: &mut Vec<Value>,
) -> ToolReply {
    let resume = match (&inv.request, &inv.answer) {
        (Some(request), Some(answer)) => Some(Resume { request: request.clone(), answer: answer.clone() }),
        _ => None,
    };
    s.handle_input(
        now(),
        McpInput::Call(CallRequest {
            call: inv.call_id.clone(),
            tool: "ask".into(),
            arguments: inv.input.clone(),
            resume,
        }),
    )
    .unwrap();
    loop {
        match s.poll_output() {
            McpOutput::Transmit(t) => {
                let msg: Value = serde_json::from_slice(&t.message).unwrap();
                sent.push(msg.clone());
                if msg["method"] == "tools/call" {
                    let reply = json!({"jsonrpc":"2.0","id":msg["id"],"result":server(&msg)});
                    let bytes = serde_json::to_vec(&reply).unwrap();
                    s.handle_input(now(), McpInput::Received { message: &bytes, stream_of: None }).unwrap();
                }
            }
            McpOutput::CallDone { result, .. } => return ToolReply::Done(result),
            McpOutput::CallSuspended { request, .. } => return ToolReply::Pending(request),
            McpOutput::Wait { .. } => panic!("the scripted server answered everything"),
            _ => {}
        }
    }
}

fn data(v: Value) -> Option<Map<String, Value>> {
    serde_json::from_value(v).ok()
}

#[test]
fn modern_input_required_suspends_the_run_and_survives_a_restore_for_two_rounds() {
    let tools = vec![ToolDecl::new("srv__ask", "asks", json!({"type":"object"}))];
    let mut run = Run::new(RunConfig::new(Style::OpenAi, "m"), tools, vec![Message::user("go")]).unwrap();
    let mut session = modern_session();
    let mut sent = Vec::new();
    // The server: round 1 asks for the login, round 2 re-asks for a missing field, round 3 completes.
    let mut server = |msg: &Value| -> Value {
        match msg["params"]["requestState"].as_str() {
            None => json!({"resultType":"input_required",
                "inputRequests":{"github_login":{"method":"elicitation/create","params":{"mode":"form",
                    "message":"Please provide your GitHub username",
                    "requestedSchema":{"type":"object","properties":{"name":{"type":"string"},"org":{"type":"string","default":"acme"}},"required":["name"]}}}},
                "requestState":"opaque-1"}),
            Some("opaque-1") => json!({"resultType":"input_required",
                "inputRequests":{"otp":{"method":"elicitation/create","params":{"message":"One-time code?",
                    "requestedSchema":{"type":"object","properties":{"code":{"type":"string"}}}}}},
                "requestState":"opaque-2"}),
            Some(_) => {
                json!({"content":[{"type":"text","text":format!("hello {}", msg["params"]["inputResponses"]["otp"]["content"]["code"])}]})
            }
        }
    };
    let mut suspensions = 0;
    let outcome = loop {
        match run.poll_output() {
            Output::Send(req) => {
                let ex = req.exchange;
                let body = model_reply(&req);
                run.handle_input(now(), Input::ResponseHead { exchange: ex, status: 200, headers: vec![] }).unwrap();
                run.handle_input(now(), Input::ResponseBody { exchange: ex, chunk: &body }).unwrap();
                run.handle_input(now(), Input::ResponseEnd { exchange: ex }).unwrap();
            }
            Output::RunTools(batch) => {
                for inv in batch.calls {
                    let reply = run_tool(&mut session, &inv, &mut server, &mut sent);
                    run.handle_input(now(), Input::ToolReply { call_id: inv.call_id, reply }).unwrap();
                }
            }
            Output::Suspended(requests) => {
                suspensions += 1;
                assert_eq!(requests.len(), 1);
                let r = &requests[0];
                assert_eq!(r.kind, "input");
                let d = r.data.as_ref().unwrap();
                assert_eq!(d["server"], "srv");
                assert_eq!(d["tool"], "ask");
                // Durable: the run is stored and resumed elsewhere; a new session too.
                let state = run.snapshot();
                run = Run::restore(&state).unwrap();
                session = modern_session();
                let answer = if suspensions == 1 {
                    assert_eq!(r.id, "pnd_call_1");
                    assert_eq!(r.prompt, "Please provide your GitHub username");
                    assert_eq!(d["requestState"], "opaque-1");
                    assert_eq!(d["round"], 1);
                    assert_eq!(d["inputs"][0]["key"], "github_login");
                    assert_eq!(d["inputs"][0]["mode"], "form");
                    assert_eq!(d["inputs"][0]["requestedSchema"]["required"], json!(["name"]));
                    Answer::ok(&r.id, data(json!({"name":"octocat"})))
                } else {
                    assert_eq!(r.id, "pnd_call_1_2", "each round its own id");
                    assert_eq!(d["requestState"], "opaque-2");
                    Answer::ok(&r.id, data(json!({"responses":{"otp":{"code":"123456"}}})))
                };
                run.handle_input(now(), Input::Answer(answer)).unwrap();
            }
            Output::Event(_) => {}
            Output::Wait { .. } => panic!("waiting on nothing"),
            Output::Done(o) => break o,
        }
    };
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(suspensions, 2);
    let calls: Vec<&Value> = sent.iter().filter(|m| m["method"] == "tools/call").collect();
    assert_eq!(calls.len(), 3);
    assert!(calls[0]["params"].get("requestState").is_none() && calls[0]["params"].get("inputResponses").is_none());
    assert_eq!(calls[1]["params"]["requestState"], "opaque-1");
    assert_eq!(
        calls[1]["params"]["inputResponses"],
        json!({"github_login":{"action":"accept","content":{"name":"octocat","org":"acme"}}}),
        "the answer's form content, with the schema's defaults"
    );
    assert_eq!(calls[1]["params"]["arguments"], json!({"repo":"nexus"}));
    assert_eq!(calls[2]["params"]["requestState"], "opaque-2");
    assert_eq!(calls[2]["params"]["inputResponses"], json!({"otp":{"action":"accept","content":{"code":"123456"}}}));
    assert_eq!(run.tool_calls()[0].output, "hello \"123456\"");
}

#[test]
fn a_declined_or_cancelled_mrtr_answer_is_sent_as_such_when_the_tool_is_re_run() {
    for (answer, action) in
        [(Answer::declined("x", "declined"), "decline"), (Answer::declined("x", "cancelled"), "cancel")]
    {
        let request = Request {
            id: "x".into(),
            kind: "input".into(),
            prompt: "p".into(),
            url: None,
            data: data(
                json!({"server":"srv","tool":"ask","inputs":[{"key":"k","mode":"form","message":"p"}],"requestState":"s","round":1}),
            ),
            expires_at: None,
        };
        let mut s = modern_session();
        s.handle_input(
            now(),
            McpInput::Call(CallRequest {
                call: "c".into(),
                tool: "ask".into(),
                arguments: json!({}),
                resume: Some(Resume { request, answer }),
            }),
        )
        .unwrap();
        let McpOutput::Event(_) = s.poll_output() else { panic!() };
        let McpOutput::Transmit(t) = s.poll_output() else { panic!() };
        let v: Value = serde_json::from_slice(&t.message).unwrap();
        assert_eq!(v["params"]["inputResponses"], json!({"k":{"action":action}}));
        assert_eq!(v["params"]["requestState"], "s");
    }
}

#[test]
fn the_round_cap_ends_a_server_that_never_stops_asking() {
    let mut cfg = SessionConfig::new("srv", TransportKind::Stdio);
    cfg.era = Some(Era::Modern);
    cfg.max_input_rounds = 2;
    let mut s = Session::new(cfg).unwrap();
    let mut server = |_: &Value| json!({"resultType":"input_required","inputRequests":{"k":{"method":"elicitation/create","params":{"message":"again?"}}},"requestState":"s"});
    let mut inv = ToolInvocation {
        call_id: "c".into(),
        name: "srv__ask".into(),
        input: json!({}),
        arguments: "{}".into(),
        idempotency_key: "k".into(),
        answer: None,
        request: None,
    };
    let mut sent = Vec::new();
    for round in 1..=3 {
        match run_tool(&mut s, &inv, &mut server, &mut sent) {
            ToolReply::Pending(r) => {
                assert!(round <= 2);
                inv.answer = Some(Answer::ok(&r.id, data(json!({"v":1}))));
                inv.request = Some(r);
            }
            ToolReply::Done(result) => {
                assert_eq!(round, 3);
                let ids: std::collections::BTreeSet<String> = sent.iter().map(|m| m["id"].to_string()).collect();
                assert_eq!(ids.len(), 3, "every retry is a new request id: {sent:?}");
                assert!(result.is_error && result.output.contains("after 2 rounds"), "{result:?}");
            }
        }
    }
}

#[test]
fn url_elicitation_required_becomes_an_authorization_request_and_retries() {
    let mut cfg = SessionConfig::new("srv", TransportKind::Stdio);
    cfg.era = Some(Era::Legacy);
    let mut s = Session::new(cfg).unwrap();
    let recv = |s: &mut Session, v: Value| {
        let b = serde_json::to_vec(&v).unwrap();
        s.handle_input(now(), McpInput::Received { message: &b, stream_of: None }).unwrap();
    };
    let drain = |s: &mut Session| {
        let mut out = Vec::new();
        loop {
            match s.poll_output() {
                McpOutput::Wait { .. } => return out,
                o => out.push(o),
            }
        }
    };
    s.handle_input(
        now(),
        McpInput::Call(CallRequest { call: "c".into(), tool: "ask".into(), arguments: json!({}), resume: None }),
    )
    .unwrap();
    drain(&mut s);
    recv(&mut s, json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}));
    drain(&mut s);
    recv(
        &mut s,
        json!({"jsonrpc":"2.0","id":2,"error":{"code":-32042,"message":"This request requires more information.",
        "data":{"elicitations":[{"mode":"url","elicitationId":"550e8400","url":"https://mcp.example.com/connect?id=550e8400","message":"Authorization is required to access your Example Co files."}]}}}),
    );
    let outs = drain(&mut s);
    let Some(McpOutput::CallSuspended { request, .. }) =
        outs.into_iter().find(|o| matches!(o, McpOutput::CallSuspended { .. }))
    else {
        panic!()
    };
    assert_eq!(request.kind, "authorization");
    assert_eq!(request.url.as_deref(), Some("https://mcp.example.com/connect?id=550e8400"));
    assert_eq!(request.prompt, "Authorization is required to access your Example Co files.");
    let answer = Answer::ok("pnd_c", None);
    s.handle_input(
        now(),
        McpInput::Call(CallRequest {
            call: "c".into(),
            tool: "ask".into(),
            arguments: json!({}),
            resume: Some(Resume { request: request.clone(), answer }),
        }),
    )
    .unwrap();
    let sent: Vec<Value> = drain(&mut s)
        .iter()
        .filter_map(|o| match o {
            McpOutput::Transmit(t) => serde_json::from_slice(&t.message).ok(),
            _ => None,
        })
        .collect();
    assert_eq!(sent[0]["method"], "tools/call");
    assert_eq!(sent[0]["id"], 3, "a new id");
    // Declined: not retried.
    s.handle_input(
        now(),
        McpInput::Call(CallRequest {
            call: "d".into(),
            tool: "ask".into(),
            arguments: json!({}),
            resume: Some(Resume { request, answer: Answer::declined("pnd_c", "declined") }),
        }),
    )
    .unwrap();
    let outs = drain(&mut s);
    assert!(
        matches!(&outs[0], McpOutput::CallDone { result, .. } if result.is_error && result.output.starts_with("declined:"))
    );
}

#[test]
fn legacy_live_elicitation_is_answered_in_process_with_defaults() {
    let mut cfg = SessionConfig::new("srv", TransportKind::Stdio);
    cfg.era = Some(Era::Legacy);
    cfg.call_timeout_ms = 1_000;
    let mut s = Session::new(cfg).unwrap();
    let t0 = now();
    let recv = |s: &mut Session, at: Timestamp, v: Value| {
        let b = serde_json::to_vec(&v).unwrap();
        s.handle_input(at, McpInput::Received { message: &b, stream_of: None }).unwrap();
    };
    let drain = |s: &mut Session| {
        let mut out = Vec::new();
        loop {
            match s.poll_output() {
                McpOutput::Wait { until } => return (out, until),
                o => out.push(o),
            }
        }
    };
    s.handle_input(
        t0,
        McpInput::Call(CallRequest { call: "c".into(), tool: "ask".into(), arguments: json!({}), resume: None }),
    )
    .unwrap();
    drain(&mut s);
    recv(&mut s, t0, json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}));
    drain(&mut s);
    recv(
        &mut s,
        t0,
        json!({"jsonrpc":"2.0","id":"e1","method":"elicitation/create","params":{"mode":"form","message":"Your details?",
        "requestedSchema":{"type":"object","properties":{"name":{"type":"string","default":"Ann"},"age":{"type":"integer","default":30},
        "newsletter":{"type":"boolean","default":false}}}}}),
    );
    let (outs, until) = drain(&mut s);
    assert_eq!(until, None, "the call's timer waits for the user");
    let McpOutput::Elicit { call, request } = &outs[0] else { panic!("{outs:?}") };
    assert_eq!(call.as_deref(), Some("c"));
    assert_eq!(request.kind, "input");
    assert_eq!(request.prompt, "Your details?");
    assert_eq!(request.data.as_ref().unwrap()["live"], true);
    // A wrong id is refused and changes nothing.
    assert!(s.handle_input(t0, McpInput::Answer(Answer::ok("nope", None))).is_err());
    let later = t0.plus_ms(60_000);
    s.handle_input(later, McpInput::Answer(Answer::ok(&request.id, data(json!({"name":"Bob"}))))).unwrap();
    let (outs, until) = drain(&mut s);
    let McpOutput::Transmit(t) = &outs[0] else { panic!() };
    let v: Value = serde_json::from_slice(&t.message).unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc":"2.0","id":"e1","result":{"action":"accept","content":{"name":"Bob","age":30,"newsletter":false}}})
    );
    assert_eq!(until, Some(later.plus_ms(1_000)), "the timer restarts after the answer");
    // A second answer to the same request is refused: it was answered once.
    assert!(s.handle_input(later, McpInput::Answer(Answer::ok(&request.id, None))).is_err());
    recv(&mut s, later, json!({"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"thanks Bob"}]}}));
    let (outs, _) = drain(&mut s);
    assert!(matches!(&outs[0], McpOutput::CallDone { result, .. } if result.output == "thanks Bob"));
}

#[test]
fn a_resume_of_a_live_elicitation_is_never_a_silent_re_run() {
    let mut s = modern_session();
    let request = Request {
        id: "elicit_srv_3".into(),
        kind: "input".into(),
        prompt: "p".into(),
        url: None,
        data: data(json!({"server":"srv","tool":"ask","inputs":[],"live":true})),
        expires_at: None,
    };
    s.handle_input(
        now(),
        McpInput::Call(CallRequest {
            call: "c".into(),
            tool: "ask".into(),
            arguments: json!({}),
            resume: Some(Resume { request, answer: Answer::ok("elicit_srv_3", None) }),
        }),
    )
    .unwrap();
    let McpOutput::CallDone { result, .. } = s.poll_output() else { panic!() };
    assert!(result.is_error && result.output.contains("not re-run"));
    assert_eq!(s.poll_output(), McpOutput::Wait { until: None }, "nothing was sent");
}

#[test]
fn names_and_digests() {
    assert_eq!(mcp::exposed_name("my server", "fs.read"), "my_server__fs_read");
    let long = mcp::exposed_name("s", &"x".repeat(100));
    assert_eq!(long.len(), 64);
    assert_ne!(long, mcp::exposed_name("s", &"x".repeat(101)), "cut names stay apart");
    let err = mcp::expose([("a", "b.c"), ("a", "b_c")]).unwrap_err();
    assert_eq!(err.name, "a__b_c");
    assert!(err.to_string().contains("a/b.c") && err.to_string().contains("a/b_c"));
    let t = mcp::McpTool::from_json(
        &json!({"name":"t","description":"d","inputSchema":{"type":"object","properties":{"a":{},"b":{}}}}),
    )
    .unwrap();
    let reordered = mcp::McpTool::from_json(
        &json!({"inputSchema":{"properties":{"b":{},"a":{}},"type":"object"},"description":"d","name":"t"}),
    )
    .unwrap();
    assert_eq!(t.digest(), reordered.digest(), "key order does not matter");
    let changed = mcp::McpTool::from_json(&json!({"name":"t","description":"deletes everything","inputSchema":{"type":"object","properties":{"a":{},"b":{}}}})).unwrap();
    assert_ne!(t.digest(), changed.digest());
    assert!(t.digest().starts_with("sha256:") && t.digest().len() == 7 + 64);
    assert_eq!(t.to_decl("srv__t").name, "srv__t");
}

#[test]
fn the_core_lets_a_tool_suspend_again_up_to_the_round_cap() {
    let tools = vec![ToolDecl::new("srv__ask", "asks", json!({"type":"object"}))];
    let mut run = Run::new(RunConfig::new(Style::OpenAi, "m"), tools, vec![Message::user("go")]).unwrap();
    let mut rounds = 0u32;
    let outcome = loop {
        match run.poll_output() {
            Output::Send(req) => {
                let ex = req.exchange;
                let body = model_reply(&req);
                run.handle_input(now(), Input::ResponseHead { exchange: ex, status: 200, headers: vec![] }).unwrap();
                run.handle_input(now(), Input::ResponseBody { exchange: ex, chunk: &body }).unwrap();
                run.handle_input(now(), Input::ResponseEnd { exchange: ex }).unwrap();
            }
            Output::RunTools(batch) => {
                for inv in batch.calls {
                    // The re-run sees the request it answered, with the tool's own data in it.
                    match (&inv.request, &inv.answer) {
                        (Some(r), Some(a)) => {
                            assert_eq!(r.data.as_ref().unwrap()["n"], rounds);
                            assert_eq!(a.id, r.id);
                        }
                        (None, None) => assert_eq!(rounds, 0),
                        other => panic!("answer and request come together: {other:?}"),
                    }
                    let mut req = Request::new("question", format!("round {rounds}?"));
                    req.data = data(json!({"n": rounds + 1}));
                    run.handle_input(now(), Input::ToolReply { call_id: inv.call_id, reply: ToolReply::Pending(req) })
                        .unwrap();
                }
            }
            Output::Suspended(requests) => {
                rounds += 1;
                run.handle_input(now(), Input::Answer(Answer::ok(&requests[0].id, None))).unwrap();
            }
            Output::Event(_) => {}
            Output::Wait { .. } => panic!("waiting on nothing"),
            Output::Done(o) => break o,
        }
    };
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(rounds, nexus_proto::MAX_SUSPENSION_ROUNDS);
    let rec = &run.tool_calls()[0];
    assert!(rec.is_error && rec.output == format!("unresolved: round {rounds}?"), "{rec:?}");
}

fn legacy_up(transport: TransportKind) -> Session {
    let mut cfg = SessionConfig::new("srv", transport);
    cfg.era = Some(Era::Legacy);
    let mut s = Session::new(cfg).unwrap();
    s.handle_input(now(), McpInput::ListTools).unwrap();
    while !matches!(s.poll_output(), McpOutput::Wait { .. }) {}
    let b = br#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}"#;
    s.handle_input(now(), McpInput::Received { message: b, stream_of: None }).unwrap();
    while !matches!(s.poll_output(), McpOutput::Wait { .. }) {}
    s
}

fn drain_all(s: &mut Session) -> Vec<McpOutput> {
    let mut out = Vec::new();
    loop {
        match s.poll_output() {
            McpOutput::Wait { .. } => return out,
            o => out.push(o),
        }
    }
}

#[test]
fn live_elicitations_follow_their_stream_url_mode_is_authorization_and_withdrawal_is_honoured() {
    let mut s = legacy_up(TransportKind::Http);
    for key in ["a", "b"] {
        s.handle_input(
            now(),
            McpInput::Call(CallRequest { call: key.into(), tool: "t".into(), arguments: json!({}), resume: None }),
        )
        .unwrap();
    }
    let ids: Vec<RequestIdOf> = drain_all(&mut s)
        .into_iter()
        .filter_map(|o| match o {
            McpOutput::Transmit(t) if t.call.is_some() => Some((t.call.unwrap(), t.id.unwrap())),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 2);
    // A URL-mode elicitation on b's response stream belongs to b.
    let msg = br#"{"jsonrpc":"2.0","id":5,"method":"elicitation/create","params":{"mode":"url","url":"https://auth.example/x","message":"Sign in","elicitationId":"e9"}}"#;
    s.handle_input(now(), McpInput::Received { message: msg, stream_of: Some(ids[1].1.clone()) }).unwrap();
    let outs = drain_all(&mut s);
    let McpOutput::Elicit { call, request } = &outs[0] else { panic!("{outs:?}") };
    assert_eq!(call.as_deref(), Some("b"));
    assert_eq!(request.kind, "authorization");
    assert_eq!(request.url.as_deref(), Some("https://auth.example/x"));
    // The server withdraws it: the answer is no longer taken.
    let cancel = br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"timeout"}}"#;
    s.handle_input(now(), McpInput::Received { message: cancel, stream_of: None }).unwrap();
    let outs = drain_all(&mut s);
    assert!(matches!(&outs[0], McpOutput::Event(mcp::Event::ElicitationWithdrawn { request: r }) if *r == request.id));
    assert!(s.handle_input(now(), McpInput::Answer(Answer::ok(&request.id, None))).is_err());
    // Another one, accepted: URL mode sends no content.
    let msg = br#"{"jsonrpc":"2.0","id":6,"method":"elicitation/create","params":{"mode":"url","url":"https://auth.example/y","message":"Sign in","elicitationId":"e10"}}"#;
    s.handle_input(now(), McpInput::Received { message: msg, stream_of: Some(ids[0].1.clone()) }).unwrap();
    let outs = drain_all(&mut s);
    let McpOutput::Elicit { call, request } = &outs[0] else { panic!("{outs:?}") };
    assert_eq!(call.as_deref(), Some("a"));
    s.handle_input(now(), McpInput::Answer(Answer::ok(&request.id, None))).unwrap();
    let outs = drain_all(&mut s);
    let McpOutput::Transmit(t) = &outs[0] else { panic!() };
    assert_eq!(
        serde_json::from_slice::<Value>(&t.message).unwrap(),
        json!({"jsonrpc":"2.0","id":6,"result":{"action":"accept"}})
    );
    // A call that ends while its question is open answers the question with cancel.
    let msg = br#"{"jsonrpc":"2.0","id":7,"method":"elicitation/create","params":{"message":"Name?"}}"#;
    s.handle_input(now(), McpInput::Received { message: msg, stream_of: Some(ids[0].1.clone()) }).unwrap();
    drain_all(&mut s);
    s.handle_input(now(), McpInput::Cancel { call: "a".into() }).unwrap();
    let sent: Vec<Value> = drain_all(&mut s)
        .iter()
        .filter_map(|o| match o {
            McpOutput::Transmit(t) => serde_json::from_slice(&t.message).ok(),
            _ => None,
        })
        .collect();
    assert!(sent.contains(&json!({"jsonrpc":"2.0","id":7,"result":{"action":"cancel"}})), "{sent:?}");
    assert!(sent.iter().any(|m| m["method"] == "notifications/cancelled"));
}

type RequestIdOf = (String, mcp::RequestId);
