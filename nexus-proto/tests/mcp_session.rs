//! The MCP session driven with exact wire JSON, both eras: era detection,
//! the handshake, listing, calls, timers, cancellation, results and the
//! refusals of bad server input.

use nexus_proto::mcp::*;
use nexus_proto::{Timestamp, ToolResult};
use serde_json::{json, Value};

struct H {
    s: Session,
    now: u64,
}

impl H {
    fn new(cfg: SessionConfig) -> H {
        H { s: Session::new(cfg).unwrap(), now: 1_000 }
    }

    fn stdio() -> H {
        H::new(SessionConfig::new("srv", TransportKind::Stdio))
    }

    fn input(&mut self, input: Input<'_>) -> Result<(), HandleError> {
        self.s.handle_input(Timestamp(self.now), input)
    }

    fn recv(&mut self, v: Value) -> Result<(), HandleError> {
        let bytes = serde_json::to_vec(&v).unwrap();
        self.input(Input::Received { message: &bytes, stream_of: None })
    }

    fn outputs(&mut self) -> Vec<Output> {
        let mut out = Vec::new();
        loop {
            match self.s.poll_output() {
                Output::Wait { .. } => return out,
                o => out.push(o),
            }
        }
    }

    /// The messages transmitted by the outputs, as JSON.
    fn sent(outs: &[Output]) -> Vec<Value> {
        outs.iter()
            .filter_map(|o| match o {
                Output::Transmit(t) => Some(serde_json::from_slice(&t.message).unwrap()),
                _ => None,
            })
            .collect()
    }

    fn call(&mut self, key: &str, tool: &str, args: Value) {
        self.input(Input::Call(CallRequest { call: key.into(), tool: tool.into(), arguments: args, resume: None }))
            .unwrap();
    }

    /// Brings a session up in the modern era (probe answered).
    fn modern() -> H {
        let mut h = H::stdio();
        h.input(Input::ListTools).unwrap();
        let outs = h.outputs();
        assert_eq!(H::sent(&outs)[0]["method"], "server/discover");
        h.recv(json!({"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],
            "capabilities":{"tools":{}},"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"S","version":"1"}},"ttlMs":60000}}))
            .unwrap();
        let outs = h.outputs();
        let list = &H::sent(&outs)[0];
        assert_eq!(list["method"], "tools/list");
        let id = list["id"].clone();
        h.recv(json!({"jsonrpc":"2.0","id":id,"result":{"tools":[
            {"name":"echo","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}},
            {"name":"weather","inputSchema":{"type":"object","properties":{"city":{"type":"string"}}},
             "outputSchema":{"type":"object","properties":{"temp":{"type":"number"}},"required":["temp"]}}
        ],"ttlMs":60000}}))
            .unwrap();
        assert!(matches!(h.outputs().as_slice(), [Output::ToolsListed { .. }]));
        h
    }

    /// Brings a session up in the legacy era (probe refused with an error).
    fn legacy() -> H {
        let mut h = H::stdio();
        h.input(Input::ListTools).unwrap();
        h.outputs();
        h.recv(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}})).unwrap();
        let outs = h.outputs();
        let init = &H::sent(&outs)[0];
        assert_eq!(init["method"], "initialize");
        h.recv(json!({"jsonrpc":"2.0","id":2,"result":{"protocolVersion":"2025-11-25",
            "capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"S","version":"1"}}}))
            .unwrap();
        let outs = h.outputs();
        let sent = H::sent(&outs);
        assert_eq!(sent[0], json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        assert_eq!(sent[1]["method"], "tools/list");
        h.recv(json!({"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}))
            .unwrap();
        h.outputs();
        h
    }
}

fn stdio_with(f: impl FnOnce(&mut SessionConfig)) -> SessionConfig {
    let mut c = SessionConfig::new("srv", TransportKind::Stdio);
    f(&mut c);
    c
}

fn transmits(outs: &[Output]) -> Vec<&Transmit> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Transmit(t) => Some(t),
            _ => None,
        })
        .collect()
}

fn header<'a>(t: &'a Transmit, name: &str) -> Option<&'a str> {
    t.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

fn done(outs: &[Output]) -> Vec<(String, ToolResult)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::CallDone { call, result } => Some((call.clone(), result.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn modern_requests_carry_meta_and_headers() {
    let mut h = H::stdio();
    h.input(Input::ListTools).unwrap();
    let outs = h.outputs();
    let t = transmits(&outs)[0];
    let v: Value = serde_json::from_slice(&t.message).unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{
            "io.modelcontextprotocol/protocolVersion":"2026-07-28",
            "io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{},"url":{}}},
            "io.modelcontextprotocol/clientInfo":{"name":"nexus","version":env!("CARGO_PKG_VERSION")}}}})
    );
    assert_eq!(header(t, "MCP-Protocol-Version"), Some("2026-07-28"));
    assert_eq!(header(t, "Mcp-Method"), Some("server/discover"));

    let mut h = H::modern();
    assert_eq!(h.s.discovery().unwrap().era, Era::Modern);
    h.call("c1", "weather", json!({"city":"Paris"}));
    let outs = h.outputs();
    let t = transmits(&outs)[0];
    let v: Value = serde_json::from_slice(&t.message).unwrap();
    assert_eq!(v["method"], "tools/call");
    assert_eq!(v["params"]["name"], "weather");
    assert_eq!(v["params"]["arguments"], json!({"city":"Paris"}));
    assert_eq!(v["params"]["_meta"]["progressToken"], v["id"]);
    assert_eq!(v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
    assert_eq!(header(t, "Mcp-Method"), Some("tools/call"));
    assert_eq!(header(t, "Mcp-Name"), Some("weather"));
    assert_eq!(t.call.as_deref(), Some("c1"));
}

#[test]
fn x_mcp_header_params_are_mirrored_and_invalid_tools_dropped_on_http() {
    let mut h = H::new(SessionConfig::new("srv", TransportKind::Http));
    h.input(Input::ListTools).unwrap();
    h.outputs();
    h.recv(json!({"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"],"capabilities":{}}})).unwrap();
    h.outputs();
    h.recv(json!({"jsonrpc":"2.0","id":2,"result":{"tools":[
        {"name":"execute_sql","inputSchema":{"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},"query":{"type":"string"}}}},
        {"name":"bad","inputSchema":{"type":"object","properties":{"n":{"type":"number","x-mcp-header":"N"}}}}
    ]}}))
    .unwrap();
    let outs = h.outputs();
    assert!(outs.iter().any(|o| matches!(o, Output::Event(Event::ToolRejected { tool, .. }) if tool == "bad")));
    let Some(Output::ToolsListed { tools, .. }) = outs.iter().find(|o| matches!(o, Output::ToolsListed { .. })) else {
        panic!("no list: {outs:?}")
    };
    assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["execute_sql"]);
    h.call("c", "execute_sql", json!({"region":"Hello, 世界","query":"SELECT 1"}));
    let outs = h.outputs();
    assert_eq!(header(transmits(&outs)[0], "Mcp-Param-Region"), Some("=?base64?SGVsbG8sIOS4lueVjA==?="));
}

#[test]
fn legacy_fallback_on_any_probe_error_then_initialize_and_session_headers() {
    let mut h = H::new(SessionConfig::new("srv", TransportKind::Http));
    h.call("c1", "echo", json!({}));
    h.outputs();
    // An HTTP 400 without a JSON-RPC body answers the probe: legacy.
    h.input(Input::Refused { id: RequestId::Num(1), status: 400 }).unwrap();
    let outs = h.outputs();
    let init = transmits(&outs)[0];
    let v: Value = serde_json::from_slice(&init.message).unwrap();
    assert_eq!(
        v,
        json!({"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25",
            "capabilities":{"elicitation":{"form":{},"url":{}}},
            "clientInfo":{"name":"nexus","version":env!("CARGO_PKG_VERSION")}}})
    );
    assert!(init.headers.is_empty(), "initialize carries no session headers: {:?}", init.headers);
    h.input(Input::SessionId("sess-1".into())).unwrap();
    // The server negotiates down.
    h.recv(json!({"jsonrpc":"2.0","id":2,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"S","version":"1"}}}))
        .unwrap();
    let outs = h.outputs();
    let ts = transmits(&outs);
    assert_eq!(serde_json::from_slice::<Value>(&ts[0].message).unwrap()["method"], "notifications/initialized");
    let call: Value = serde_json::from_slice(&ts[1].message).unwrap();
    assert_eq!(call["method"], "tools/call");
    assert!(call["params"]["_meta"].get("io.modelcontextprotocol/protocolVersion").is_none());
    assert_eq!(header(ts[1], "MCP-Protocol-Version"), Some("2025-06-18"));
    assert_eq!(header(ts[1], "Mcp-Session-Id"), Some("sess-1"));
    assert_eq!(h.s.discovery().unwrap().era, Era::Legacy);
    assert_eq!(h.s.discovery().unwrap().version, "2025-06-18");
}

#[test]
fn a_probe_timeout_falls_back_to_legacy_and_the_late_answer_is_ignored() {
    let mut h = H::stdio();
    h.input(Input::ListTools).unwrap();
    let outs = h.outputs();
    assert_eq!(transmits(&outs).len(), 1);
    let Output::Wait { until } = h.s.poll_output() else { panic!() };
    assert_eq!(until, Some(Timestamp(1_000 + 10_000)));
    h.now += 10_000;
    h.input(Input::Timeout).unwrap();
    let outs = h.outputs();
    assert!(outs.contains(&Output::Abandon { id: RequestId::Num(1) }));
    assert_eq!(H::sent(&outs)[0]["method"], "initialize");
    // The probe's answer arrives late, or its refusal: ignored, not an error.
    h.recv(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nope"}})).unwrap();
    h.input(Input::Refused { id: RequestId::Num(1), status: 404 }).unwrap();
    assert!(h.outputs().is_empty());
    // A refusal for a request never sent is the driver's mistake.
    assert!(matches!(
        h.input(Input::Refused { id: RequestId::Num(77), status: 404 }),
        Err(HandleError::Input(McpInputError::UnknownRequest(_)))
    ));
}

#[test]
fn an_unsupported_legacy_version_fails_the_waiting_work() {
    let mut h = H::new(stdio_with(|c| c.era = Some(Era::Legacy)));
    h.call("c1", "echo", json!({}));
    h.outputs();
    h.recv(json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2099-01-01","capabilities":{}}})).unwrap();
    let outs = h.outputs();
    assert!(outs.iter().any(|o| matches!(o, Output::Event(Event::ConnectFailed { .. }))));
    let d = done(&outs);
    assert_eq!(d.len(), 1);
    assert!(d[0].1.is_error && d[0].1.output.contains("2099-01-01"), "{:?}", d[0].1);
}

#[test]
fn discovery_is_exportable_and_skips_the_probe() {
    let h = H::modern();
    let d = h.s.discovery().unwrap().clone();
    let stored = serde_json::to_string(&d).unwrap();
    let back: Discovery = serde_json::from_str(&stored).unwrap();
    assert_eq!(back, d);
    let mut h2 = H::new(stdio_with(|c| c.discovery = Some(back)));
    h2.call("c1", "echo", json!({}));
    let outs = h2.outputs();
    assert_eq!(H::sent(&outs)[0]["method"], "tools/call", "no probe with a cached discovery");
}

#[test]
fn legacy_server_requests_ping_answered_undeclared_refused() {
    let mut h = H::legacy();
    h.recv(json!({"jsonrpc":"2.0","id":"p1","method":"ping"})).unwrap();
    h.recv(json!({"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{}})).unwrap();
    h.recv(json!({"jsonrpc":"2.0","id":8,"method":"roots/list"})).unwrap();
    let sent = H::sent(&h.outputs());
    assert_eq!(sent[0], json!({"jsonrpc":"2.0","id":"p1","result":{}}));
    assert_eq!(sent[1], json!({"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found"}}));
    assert_eq!(sent[2]["error"]["code"], -32601);
}

#[test]
fn undeclared_elicitation_is_refused() {
    let mut h = H::new(stdio_with(|c| c.elicitation = false));
    h.input(Input::ListTools).unwrap();
    let sent = H::sent(&h.outputs());
    assert_eq!(sent[0]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"], json!({}));
    h.recv(json!({"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{"message":"x"}})).unwrap();
    assert_eq!(H::sent(&h.outputs())[0]["error"]["code"], -32601);
}

#[test]
fn pagination_follows_cursors_and_refuses_a_repeated_one() {
    let mut h = H::modern();
    h.now += 60_001; // the list's ttlMs passed: listing asks again
    h.input(Input::ListTools).unwrap();
    let s = H::sent(&h.outputs());
    assert_eq!(s[0]["method"], "tools/list");
    assert!(s[0]["params"].get("cursor").is_none());
    let id = s[0]["id"].clone();
    h.recv(json!({"jsonrpc":"2.0","id":id,"result":{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"p2"}}))
        .unwrap();
    let s = H::sent(&h.outputs());
    assert_eq!(s[0]["params"]["cursor"], "p2");
    let id = s[0]["id"].clone();
    h.recv(json!({"jsonrpc":"2.0","id":id,"result":{"tools":[{"name":"b","inputSchema":{"type":"object"}}],"nextCursor":"p3"}}))
        .unwrap();
    let s = H::sent(&h.outputs());
    let id = s[0]["id"].clone();
    h.recv(json!({"jsonrpc":"2.0","id":id,"result":{"tools":[{"name":"c","inputSchema":{"type":"object"}}],"nextCursor":"p2"}}))
        .unwrap();
    let outs = h.outputs();
    assert_eq!(outs, vec![Output::ToolsFailed { error: ProtocolError::RepeatedCursor("p2".into()) }]);
}

#[test]
fn a_fresh_list_comes_from_the_cache_and_list_changed_refetches() {
    let mut h = H::legacy();
    h.input(Input::ListTools).unwrap();
    let outs = h.outputs();
    assert!(matches!(outs.as_slice(), [Output::ToolsListed { changed: false, .. }]), "{outs:?}");
    h.recv(json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"})).unwrap();
    let s = H::sent(&h.outputs());
    assert_eq!(s[0]["method"], "tools/list");
    let id = s[0]["id"].clone();
    h.recv(json!({"jsonrpc":"2.0","id":id,"result":{"tools":[{"name":"echo","description":"new","inputSchema":{"type":"object"}}]}}))
        .unwrap();
    let outs = h.outputs();
    assert!(matches!(outs.as_slice(), [Output::ToolsListed { changed: true, .. }]), "{outs:?}");
}

#[test]
fn results_map_every_content_type() {
    let mut h = H::modern();
    h.call("c1", "echo", json!({}));
    let id = H::sent(&h.outputs())[0]["id"].clone();
    h.recv(json!({"jsonrpc":"2.0","id":id,"result":{"content":[
        {"type":"text","text":"hello"},
        {"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},
        {"type":"audio","data":"UklGRg==","mimeType":"audio/wav"},
        {"type":"resource_link","uri":"file:///a.txt","name":"a.txt","mimeType":"text/plain"},
        {"type":"resource","resource":{"uri":"file:///b.md","mimeType":"text/markdown","text":"# B"}},
        {"type":"resource","resource":{"uri":"file:///c.bin","blob":"AAAA"}}
    ],"structuredContent":{"n":1}}}))
        .unwrap();
    let d = done(&h.outputs());
    let r = &d[0].1;
    assert!(!r.is_error);
    assert_eq!(
        r.output,
        "hello\n[image: image/png, 8 bytes]\n[audio: audio/wav, 4 bytes]\n[resource link: a.txt <file:///a.txt> (text/plain)]\n\
         [resource <file:///b.md> (text/markdown)]\n# B\n[resource <file:///c.bin>: 3 bytes]\n{\"n\":1}"
    );
    let meta = r.metadata.as_ref().unwrap();
    assert_eq!(meta["mcp"]["content"][1]["data"], "iVBORw0KGgo=");
    assert_eq!(meta["mcp"]["structuredContent"], json!({"n":1}));
}

#[test]
fn structured_content_is_checked_against_the_output_schema() {
    let mut h = H::modern();
    h.call("ok", "weather", json!({}));
    h.call("bad", "weather", json!({}));
    let s = H::sent(&h.outputs());
    h.recv(json!({"jsonrpc":"2.0","id":s[0]["id"],"result":{"content":[{"type":"text","text":"{\"temp\":21.5}"}],"structuredContent":{"temp":21.5}}}))
        .unwrap();
    h.recv(json!({"jsonrpc":"2.0","id":s[1]["id"],"result":{"content":[],"structuredContent":{"temp":"warm"}}}))
        .unwrap();
    let d = done(&h.outputs());
    assert_eq!(d[0].1.output, "{\"temp\":21.5}", "the text copy is not repeated");
    assert!(!d[0].1.is_error);
    assert!(d[1].1.is_error);
    assert!(d[1].1.output.contains("/temp: expected number, found string"), "{}", d[1].1.output);
}

#[test]
fn is_error_and_protocol_errors_become_error_results() {
    let mut h = H::modern();
    h.call("a", "echo", json!({}));
    h.call("b", "nope", json!({}));
    let s = H::sent(&h.outputs());
    h.recv(json!({"jsonrpc":"2.0","id":s[0]["id"],"result":{"content":[{"type":"text","text":"Invalid date"}],"isError":true}}))
        .unwrap();
    h.recv(json!({"jsonrpc":"2.0","id":s[1]["id"],"error":{"code":-32602,"message":"Unknown tool: nope"}})).unwrap();
    let d = done(&h.outputs());
    assert_eq!((d[0].1.output.as_str(), d[0].1.is_error), ("Invalid date", true));
    assert!(d[1].1.is_error);
    assert!(d[1].1.output.starts_with("Unknown tool: nope"), "{}", d[1].1.output);
}

#[test]
fn progress_extends_the_timeout_up_to_the_hard_cap_then_cancels() {
    let mut cfg = SessionConfig::new("srv", TransportKind::Stdio);
    cfg.call_timeout_ms = 1_000;
    cfg.call_max_ms = 2_500;
    cfg.era = Some(Era::Modern);
    let mut h = H::new(cfg);
    h.call("c1", "slow", json!({}));
    let s = H::sent(&h.outputs());
    let id = s[0]["id"].as_i64().unwrap();
    assert_eq!(h.s.poll_output(), Output::Wait { until: Some(Timestamp(2_000)) });
    for _ in 0..2 {
        h.now += 900;
        h.recv(json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":id,"progress":1,"total":10}}))
            .unwrap();
        let outs = h.outputs();
        assert!(
            matches!(&outs[0], Output::Event(Event::Progress { call, total: Some(t), .. }) if call == "c1" && *t == 10.0)
        );
    }
    // 2 800: the deadline is the hard cap (3 500), not 2 800 + 1 000.
    assert_eq!(h.s.poll_output(), Output::Wait { until: Some(Timestamp(3_500)) });
    h.now = 3_500;
    h.input(Input::Timeout).unwrap();
    let outs = h.outputs();
    let sent = H::sent(&outs);
    assert_eq!(
        sent[0],
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":id,"reason":"timeout"}})
    );
    assert!(outs.contains(&Output::Abandon { id: RequestId::Num(id) }));
    let d = done(&outs);
    assert!(d[0].1.is_error && d[0].1.output.contains("timed out after 2500 ms"), "{:?}", d[0].1);
    // The late response is ignored; the session is still usable.
    h.recv(json!({"jsonrpc":"2.0","id":id,"result":{"content":[]}})).unwrap();
    assert!(h.outputs().is_empty());
    h.call("c1", "echo", json!({}));
    assert_eq!(H::sent(&h.outputs())[0]["method"], "tools/call");
}

#[test]
fn cancel_tells_the_server_and_ends_the_call() {
    let mut h = H::modern();
    h.call("c1", "echo", json!({}));
    let id = H::sent(&h.outputs())[0]["id"].clone();
    h.input(Input::Cancel { call: "c1".into() }).unwrap();
    let outs = h.outputs();
    assert_eq!(H::sent(&outs)[0]["params"], json!({"requestId":id,"reason":"cancelled by the host"}));
    assert!(done(&outs)[0].1.is_error);
    assert_eq!(
        h.input(Input::Cancel { call: "c1".into() }),
        Err(HandleError::Input(McpInputError::UnknownCall("c1".into())))
    );
}

#[test]
fn bad_server_input_is_a_typed_error_and_changes_nothing() {
    let mut h = H::modern();
    h.call("c1", "echo", json!({}));
    h.outputs();
    let before = format!("{:?}", h.s);
    type Case = (&'static [u8], fn(&ProtocolError) -> bool);
    let cases: Vec<Case> = vec![
        (b"{not json", |e| matches!(e, ProtocolError::Json(_))),
        (br#"[{"jsonrpc":"2.0","id":3,"result":{}}]"#, |e| matches!(e, ProtocolError::Batch)),
        (br#"{"jsonrpc":"1.0","id":3,"result":{}}"#, |e| matches!(e, ProtocolError::Version(_))),
        (br#"{"jsonrpc":"2.0","id":99,"result":{}}"#, |e| matches!(e, ProtocolError::UnknownResponse(_))),
        (br#"{"jsonrpc":"2.0","id":"x","result":{}}"#, |e| matches!(e, ProtocolError::UnknownResponse(_))),
        (br#"{"jsonrpc":"2.0"}"#, |e| matches!(e, ProtocolError::Shape(_))),
    ];
    for (bytes, ok) in cases {
        match h.input(Input::Received { message: bytes, stream_of: None }) {
            Err(HandleError::Protocol(e)) => assert!(ok(&e), "{}: {e:?}", String::from_utf8_lossy(bytes)),
            other => panic!("{}: {other:?}", String::from_utf8_lossy(bytes)),
        }
        assert_eq!(before, format!("{:?}", h.s));
    }
    let big = vec![b' '; 16 * 1024 * 1024 + 1];
    assert!(matches!(
        h.input(Input::Received { message: &big, stream_of: None }),
        Err(HandleError::Protocol(ProtocolError::TooLarge { .. }))
    ));
    h.now -= 1;
    assert!(matches!(h.input(Input::Timeout), Err(HandleError::Input(McpInputError::TimeWentBackwards { .. }))));
    h.now += 1;
    assert!(matches!(
        h.input(Input::Call(CallRequest { call: "c1".into(), tool: "x".into(), arguments: json!({}), resume: None })),
        Err(HandleError::Input(McpInputError::DuplicateCall(_)))
    ));
    assert_eq!(before, format!("{:?}", h.s));
}

#[test]
fn a_closed_connection_ends_running_calls_in_doubt_and_reconnects_on_use() {
    let mut h = H::legacy();
    h.call("c1", "echo", json!({}));
    h.outputs();
    h.input(Input::Closed { reason: "exit status 1; stderr: boom".into() }).unwrap();
    let d = done(&h.outputs());
    assert!(
        d[0].1.is_error && d[0].1.output.contains("may or may not have completed") && d[0].1.output.contains("boom")
    );
    h.call("c2", "echo", json!({}));
    let s = H::sent(&h.outputs());
    assert_eq!(s[0]["method"], "initialize", "the cached era skips the probe; the session is set up again");
}

#[test]
fn session_expiry_reinitializes_and_reports_the_running_call_in_doubt() {
    let mut h = H::legacy();
    h.input(Input::SessionId("s1".into())).unwrap();
    h.call("c1", "echo", json!({}));
    h.outputs();
    h.input(Input::SessionExpired).unwrap();
    let outs = h.outputs();
    assert!(done(&outs)[0].1.output.contains("session expired"));
    let s = H::sent(&outs);
    assert!(s.is_empty() || s[0]["method"] == "initialize");
    assert_eq!(h.s.session_id(), None);
}

/// A legacy-only session with a call running (`tools/call` id 3), over HTTP.
fn legacy_http_call() -> H {
    let mut h = H::new({
        let mut c = SessionConfig::new("srv", TransportKind::Http);
        c.era = Some(Era::Legacy);
        c
    });
    h.call("c1", "echo", json!({"text": "hi"}));
    h.outputs();
    h.recv(json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}}))
        .unwrap();
    let outs = h.outputs();
    let sent = H::sent(&outs);
    assert_eq!(sent[1]["method"], "tools/call");
    assert_eq!(sent[1]["id"], 2);
    h
}

#[test]
fn initialize_refused_with_32022_is_offered_once_a_version_both_speak() {
    let mut h = H::new(stdio_with(|c| c.era = Some(Era::Legacy)));
    h.call("c1", "echo", json!({}));
    let outs = h.outputs();
    assert_eq!(H::sent(&outs)[0]["params"]["protocolVersion"], "2025-11-25");
    h.recv(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"Unsupported protocol version",
        "data":{"supported":["2024-11-05","2025-06-18","1999-01-01"],"requested":"2025-11-25"}}}))
        .unwrap();
    let outs = h.outputs();
    let sent = H::sent(&outs);
    assert_eq!(sent.len(), 1, "{outs:?}");
    assert_eq!(sent[0]["method"], "initialize");
    assert_eq!(sent[0]["params"]["protocolVersion"], "2025-06-18", "the newest version both sides speak");
    assert_ne!(sent[0]["id"], 1, "a new id");
    h.recv(json!({"jsonrpc":"2.0","id":sent[0]["id"],"result":{"protocolVersion":"2025-06-18","capabilities":{}}}))
        .unwrap();
    let outs = h.outputs();
    let sent = H::sent(&outs);
    assert_eq!(sent[0]["method"], "notifications/initialized");
    assert_eq!(sent[1]["method"], "tools/call");
    assert_eq!(h.s.discovery().unwrap().version, "2025-06-18");
    let t = transmits(&outs)[1];
    assert_eq!(header(t, "MCP-Protocol-Version"), Some("2025-06-18"));
}

#[test]
fn the_legacy_32602_with_a_supported_list_is_a_version_refusal_too() {
    let mut h = H::new(stdio_with(|c| c.era = Some(Era::Legacy)));
    h.input(Input::ListTools).unwrap();
    h.outputs();
    h.recv(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Unsupported protocol version",
        "data":{"supported":["2024-11-05"],"requested":"2025-11-25"}}}))
        .unwrap();
    let sent = H::sent(&h.outputs());
    assert_eq!(sent[0]["params"]["protocolVersion"], "2024-11-05");
    // A -32602 without a list is an ordinary failure.
    let mut h = H::new(stdio_with(|c| c.era = Some(Era::Legacy)));
    h.input(Input::ListTools).unwrap();
    h.outputs();
    h.recv(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad params"}})).unwrap();
    let outs = h.outputs();
    assert!(H::sent(&outs).is_empty());
    assert!(outs.iter().any(|o| matches!(o, Output::ToolsFailed { .. })), "{outs:?}");
}

#[test]
fn a_second_version_refusal_or_no_common_version_is_a_typed_error() {
    // Refused twice: the retry happens once only.
    let mut h = H::new(stdio_with(|c| c.era = Some(Era::Legacy)));
    h.call("c1", "echo", json!({}));
    h.outputs();
    let refuse = |id: i64| {
        json!({"jsonrpc":"2.0","id":id,"error":{"code":-32022,"message":"no",
            "data":{"supported":["2024-11-05","2025-06-18"]}}})
    };
    h.recv(refuse(1)).unwrap();
    assert_eq!(H::sent(&h.outputs())[0]["params"]["protocolVersion"], "2025-06-18");
    h.recv(refuse(2)).unwrap();
    let outs = h.outputs();
    assert!(H::sent(&outs).is_empty(), "no third initialize: {outs:?}");
    let failed: Vec<&ProtocolError> = outs
        .iter()
        .filter_map(|o| match o {
            Output::Event(Event::ConnectFailed { error }) => Some(error),
            _ => None,
        })
        .collect();
    assert!(
        matches!(failed.as_slice(), [ProtocolError::UnsupportedVersion { offered, .. }] if offered == "2024-11-05, 2025-06-18"),
        "{failed:?}"
    );
    let d = done(&outs);
    assert_eq!(d.len(), 1);
    assert!(d[0].1.is_error && d[0].1.output.contains("2024-11-05"), "{:?}", d[0].1);

    // Nothing in common: failed at once.
    let mut h = H::new(stdio_with(|c| c.era = Some(Era::Legacy)));
    h.call("c1", "echo", json!({}));
    h.outputs();
    h.recv(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"no","data":{"supported":["1999-01-01"]}}}))
        .unwrap();
    let outs = h.outputs();
    assert!(H::sent(&outs).is_empty());
    assert!(outs
        .iter()
        .any(|o| matches!(o, Output::Event(Event::ConnectFailed { error: ProtocolError::UnsupportedVersion { .. } }))));
    // The next use connects afresh and may retry again.
    h.call("c2", "echo", json!({}));
    let sent = H::sent(&h.outputs());
    assert_eq!(sent[0]["method"], "initialize");
    h.recv(json!({"jsonrpc":"2.0","id":sent[0]["id"],"error":{"code":-32022,"message":"no","data":{"supported":["2024-11-05"]}}}))
        .unwrap();
    assert_eq!(H::sent(&h.outputs())[0]["params"]["protocolVersion"], "2024-11-05");
}

/// The session came up in the 2026 era and its one message out is the
/// waiting `tools/call`, stamped with that protocol version (returned).
fn connected_modern_and_sent_the_call(outs: &[Output]) -> Value {
    assert!(outs
        .iter()
        .any(|o| matches!(o, Output::Event(Event::Connected { discovery }) if discovery.era == Era::Modern)));
    let sent = H::sent(outs);
    assert_eq!(sent.len(), 1, "{outs:?}");
    assert_eq!(sent[0]["method"], "tools/call");
    assert_eq!(sent[0]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
    sent[0].clone()
}

#[test]
fn initialize_refused_for_the_modern_era_goes_modern() {
    let mut h = H::stdio();
    h.call("c1", "echo", json!({"text": "x"}));
    h.outputs();
    // The probe fails in a way that means legacy; initialize is then refused in favour of 2026.
    h.recv(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nope"}})).unwrap();
    assert_eq!(H::sent(&h.outputs())[0]["method"], "initialize");
    h.recv(json!({"jsonrpc":"2.0","id":2,"error":{"code":-32022,"message":"no","data":{"supported":["2026-07-28"]}}}))
        .unwrap();
    connected_modern_and_sent_the_call(&h.outputs());
}

#[test]
fn a_late_probe_answer_switches_to_the_modern_era() {
    let mut h = H::stdio();
    h.call("c1", "echo", json!({"text": "x"}));
    h.outputs();
    h.now += 10_000;
    h.input(Input::Timeout).unwrap();
    let sent = H::sent(&h.outputs());
    assert_eq!(sent[0]["method"], "initialize");
    // The slow server read the probe first and answers it now.
    h.recv(json!({"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],
        "capabilities":{"tools":{}},"instructions":"be kind"}}))
        .unwrap();
    let call = connected_modern_and_sent_the_call(&h.outputs());
    let d = h.s.discovery().unwrap();
    assert_eq!((d.era, d.instructions.as_deref()), (Era::Modern, Some("be kind")));
    // The initialize it no longer waits for: its refusal (or answer) is ignored.
    h.recv(json!({"jsonrpc":"2.0","id":2,"error":{"code":-32600,"message":"this connection speaks 2026"}})).unwrap();
    assert!(h.outputs().is_empty());
    h.recv(json!({"jsonrpc":"2.0","id":call["id"],"result":{"content":[{"type":"text","text":"x"}]}})).unwrap();
    assert_eq!(done(&h.outputs()), vec![("c1".to_string(), ToolResult::ok("x"))]);
}

#[test]
fn a_late_legacy_only_probe_answer_changes_nothing() {
    let mut h = H::stdio();
    h.call("c1", "echo", json!({}));
    h.outputs();
    h.now += 10_000;
    h.input(Input::Timeout).unwrap();
    h.outputs();
    h.recv(json!({"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2025-11-25"]}}))
        .unwrap();
    assert!(h.outputs().is_empty());
    h.recv(json!({"jsonrpc":"2.0","id":2,"result":{"protocolVersion":"2025-11-25","capabilities":{}}})).unwrap();
    assert_eq!(h.s.discovery().unwrap().era, Era::Legacy);
}

#[test]
fn a_lost_legacy_stream_with_event_ids_is_reattached_never_resent() {
    let mut h = legacy_http_call();
    h.input(Input::StreamLost { id: RequestId::Num(2), last_event_id: Some("ev-7".into()) }).unwrap();
    let outs = h.outputs();
    assert_eq!(outs, vec![Output::Reattach { id: RequestId::Num(2), last_event_id: "ev-7".into() }]);
    // The reattached stream carries the answer.
    let b = serde_json::to_vec(&json!({"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}]}}))
        .unwrap();
    h.input(Input::Received { message: &b, stream_of: Some(RequestId::Num(2)) }).unwrap();
    assert_eq!(done(&h.outputs()), vec![("c1".to_string(), ToolResult::ok("hi"))]);
}

#[test]
fn a_lost_legacy_stream_without_event_ids_ends_the_call_in_doubt() {
    let mut h = legacy_http_call();
    h.input(Input::StreamLost { id: RequestId::Num(2), last_event_id: None }).unwrap();
    let outs = h.outputs();
    let sent = H::sent(&outs);
    assert_eq!(sent.len(), 1, "only the cancellation goes out: {outs:?}");
    assert_eq!(sent[0]["method"], "notifications/cancelled");
    assert_eq!(sent[0]["params"]["requestId"], 2);
    let d = done(&outs);
    assert_eq!(d.len(), 1);
    assert!(d[0].1.is_error && d[0].1.output.contains("may or may not have completed"), "{:?}", d[0].1);
    // A late answer is ignored; a second loss report for it is no error.
    h.recv(json!({"jsonrpc":"2.0","id":2,"result":{"content":[]}})).unwrap();
    h.input(Input::StreamLost { id: RequestId::Num(2), last_event_id: None }).unwrap();
    assert!(h.outputs().is_empty());
}

#[test]
fn reattaching_is_bounded_then_the_call_is_in_doubt() {
    let mut h = legacy_http_call();
    for i in 0..5 {
        h.input(Input::StreamLost { id: RequestId::Num(2), last_event_id: Some(format!("ev-{i}")) }).unwrap();
        assert!(matches!(h.outputs().as_slice(), [Output::Reattach { .. }]));
    }
    h.input(Input::StreamLost { id: RequestId::Num(2), last_event_id: Some("ev-9".into()) }).unwrap();
    let outs = h.outputs();
    assert!(!outs.iter().any(|o| matches!(o, Output::Reattach { .. })));
    assert!(!H::sent(&outs).iter().any(|m| m["method"] == "tools/call"));
    assert!(done(&outs)[0].1.output.contains("may or may not have completed"));
}

#[test]
fn a_lost_modern_stream_ends_the_call_in_doubt_without_reattaching() {
    let mut h = H::modern();
    h.call("c1", "echo", json!({"text": "x"}));
    let sent = H::sent(&h.outputs());
    let id = sent[0]["id"].as_i64().unwrap();
    // Event ids mean nothing in 2026: the stream is not resumed.
    h.input(Input::StreamLost { id: RequestId::Num(id), last_event_id: Some("ev-1".into()) }).unwrap();
    let outs = h.outputs();
    assert!(H::sent(&outs).is_empty(), "the closed stream was the cancellation; nothing is resent: {outs:?}");
    assert!(done(&outs)[0].1.output.contains("may or may not have completed"));
    // The session is still usable.
    h.call("c2", "echo", json!({"text": "y"}));
    assert_eq!(H::sent(&h.outputs())[0]["method"], "tools/call");
}

#[test]
fn a_lost_list_stream_fails_the_listing_and_bad_reports_change_nothing() {
    let mut h = legacy_http_call();
    h.s.handle_input(Timestamp(h.now), Input::ListTools).unwrap();
    let sent = H::sent(&h.outputs());
    let id = sent[0]["id"].as_i64().unwrap();
    h.input(Input::StreamLost { id: RequestId::Num(id), last_event_id: None }).unwrap();
    let outs = h.outputs();
    assert!(
        outs.iter().any(|o| matches!(o, Output::ToolsFailed { error: ProtocolError::StreamLost { method } } if method == "tools/list")),
        "{outs:?}"
    );
    let before = format!("{:?}", h.s);
    for bad in [RequestId::Num(99), RequestId::Str("2".into())] {
        assert!(matches!(
            h.input(Input::StreamLost { id: bad, last_event_id: None }),
            Err(HandleError::Input(McpInputError::UnknownRequest(_)))
        ));
    }
    assert_eq!(before, format!("{:?}", h.s));
}
