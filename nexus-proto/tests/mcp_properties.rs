//! Property tests of the MCP pieces: framing independent of chunking,
//! listing independent of paging, header values that decode back, names
//! that every provider accepts, and a retried call carrying exactly the
//! state its server gave.

use nexus_proto::mcp::*;
use nexus_proto::{Answer, Timestamp};
use proptest::prelude::*;
use serde_json::{json, Value};

fn drain(s: &mut Session) -> Vec<Output> {
    let mut out = Vec::new();
    loop {
        match s.poll_output() {
            Output::Wait { .. } => return out,
            o => out.push(o),
        }
    }
}

fn sent(outs: &[Output]) -> Vec<Value> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Transmit(t) => serde_json::from_slice(&t.message).ok(),
            _ => None,
        })
        .collect()
}

fn recv(s: &mut Session, v: Value) {
    let b = serde_json::to_vec(&v).unwrap();
    s.handle_input(Timestamp(1), Input::Received { message: &b, stream_of: None }).unwrap();
}

fn b64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= (val(c) as u32) << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

proptest! {
    #[test]
    fn line_framing_does_not_depend_on_chunking(
        lines in proptest::collection::vec("[ -~]{0,40}", 0..8),
        cuts in proptest::collection::vec(0usize..400, 0..10),
        crlf in any::<bool>(),
    ) {
        let end = if crlf { "\r\n" } else { "\n" };
        let text: String = lines.iter().map(|l| format!("{l}{end}")).collect();
        let bytes = text.as_bytes();
        let mut whole = Vec::new();
        LineDecoder::new(1 << 20).feed(bytes, &mut whole);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
        cuts.sort();
        let mut pieces = Vec::new();
        let mut d = LineDecoder::new(1 << 20);
        let mut at = 0;
        for c in cuts.into_iter().chain([bytes.len()]) {
            d.feed(&bytes[at..c], &mut pieces);
            at = c;
        }
        d.finish(&mut pieces);
        prop_assert_eq!(&pieces, &whole);
        let expected: Vec<Result<Vec<u8>, ProtocolError>> = lines
            .iter()
            .filter(|l| !l.trim().is_empty())
            .map(|l| Ok(l.as_bytes().to_vec()))
            .collect();
        prop_assert_eq!(whole, expected);
    }

    #[test]
    fn listing_gives_every_tool_in_order_however_it_is_paged(n in 0usize..30, page in 1usize..7) {
        let mut cfg = SessionConfig::new("srv", TransportKind::Stdio);
        cfg.era = Some(Era::Legacy);
        let mut s = Session::new(cfg).unwrap();
        s.handle_input(Timestamp(1), Input::ListTools).unwrap();
        drain(&mut s);
        recv(&mut s, json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}));
        let names: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
        let mut at = 0;
        let listed = loop {
            let outs = drain(&mut s);
            if let Some(Output::ToolsListed { tools, .. }) = outs.iter().find(|o| matches!(o, Output::ToolsListed { .. })) {
                break tools.clone();
            }
            let req = sent(&outs).into_iter().find(|m| m["method"] == "tools/list").expect("a page request");
            prop_assert_eq!(req["params"].get("cursor").and_then(Value::as_str).map(str::to_string), (at > 0).then(|| format!("c{at}")));
            let end = (at + page).min(n);
            let tools: Vec<Value> = names[at..end].iter().map(|t| json!({"name":t,"inputSchema":{"type":"object"}})).collect();
            let mut result = json!({"tools": tools});
            if end < n {
                result["nextCursor"] = Value::from(format!("c{end}"));
            }
            at = end;
            recv(&mut s, json!({"jsonrpc":"2.0","id":req["id"],"result":result}));
        };
        prop_assert_eq!(listed.iter().map(|t| t.name.clone()).collect::<Vec<_>>(), names);
    }

    #[test]
    fn header_values_are_safe_and_decode_back(raw in "\\PC{0,30}|[ -~]{0,30}") {
        let v = header_value(&raw);
        prop_assert!(v.bytes().all(|b| (0x20..=0x7e).contains(&b)));
        prop_assert!(!v.starts_with(' ') && !v.ends_with(' '));
        match v.strip_prefix("=?base64?").and_then(|x| x.strip_suffix("?=")) {
            Some(b64) => prop_assert_eq!(b64_decode(b64), raw.as_bytes().to_vec()),
            None => prop_assert_eq!(v, raw),
        }
    }

    #[test]
    fn exposed_names_are_what_providers_accept(server in "[a-z ._-]{1,20}", tool in "\\PC{1,80}") {
        let name = exposed_name(&server, &tool);
        prop_assert!(name.len() <= 64 && !name.is_empty());
        prop_assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'));
        prop_assert_eq!(name, exposed_name(&server, &tool));
    }

    #[test]
    fn each_retry_carries_exactly_the_state_its_server_gave(states in proptest::collection::vec("[ -~]{1,40}", 1..5)) {
        let mut cfg = SessionConfig::new("srv", TransportKind::Stdio);
        cfg.era = Some(Era::Modern);
        let mut s = Session::new(cfg).unwrap();
        let mut resume = None;
        for (round, state) in states.iter().enumerate() {
            s.handle_input(Timestamp(1), Input::Call(CallRequest { call: "c".into(), tool: "t".into(), arguments: json!({}), resume: resume.take() })).unwrap();
            let call = sent(&drain(&mut s)).into_iter().find(|m| m["method"] == "tools/call").unwrap();
            let expected = if round == 0 { None } else { Some(states[round - 1].as_str()) };
            prop_assert_eq!(call["params"].get("requestState").and_then(Value::as_str), expected);
            recv(&mut s, json!({"jsonrpc":"2.0","id":call["id"],"result":{"resultType":"input_required",
                "inputRequests":{"k":{"method":"elicitation/create","params":{"message":"?"}}},"requestState":state}}));
            let request = drain(&mut s).into_iter().find_map(|o| match o {
                Output::CallSuspended { request, .. } => Some(request),
                _ => None,
            });
            let Some(request) = request else { break };
            resume = Some(Resume { answer: Answer::ok(&request.id, None), request });
        }
    }

    /// A call whose response stream is lost any number of times, with or
    /// without event ids, in either era: it goes out exactly once, every
    /// reattach names it and only a legacy session reattaches (at most 5
    /// times), and it ends exactly once — with the answer if a reattached
    /// stream brought it, else in doubt.
    #[test]
    fn a_call_with_lost_streams_is_sent_once_and_ends_once(
        legacy in any::<bool>(),
        losses in proptest::collection::vec(proptest::option::of("[a-z0-9]{0,6}"), 0..9),
        answered in any::<bool>(),
    ) {
        let mut cfg = SessionConfig::new("srv", TransportKind::Http);
        cfg.era = Some(if legacy { Era::Legacy } else { Era::Modern });
        let mut s = Session::new(cfg).unwrap();
        s.handle_input(Timestamp(1), Input::Call(CallRequest { call: "c".into(), tool: "t".into(), arguments: json!({}), resume: None })).unwrap();
        let mut outs = drain(&mut s);
        if legacy {
            recv(&mut s, json!({"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}));
            outs.extend(drain(&mut s));
        }
        let call_id = sent(&outs).iter().find(|m| m["method"] == "tools/call").map(|m| m["id"].clone()).unwrap();
        let (mut reattaches, mut ended) = (0, 0);
        for last in losses {
            let _ = s.handle_input(Timestamp(1), Input::StreamLost { id: RequestId::Num(call_id.as_i64().unwrap()), last_event_id: last });
            for o in drain(&mut s) {
                match o {
                    Output::Reattach { id, .. } => {
                        prop_assert!(legacy);
                        prop_assert_eq!(id, RequestId::Num(call_id.as_i64().unwrap()));
                        reattaches += 1;
                    }
                    Output::CallDone { result, .. } => {
                        prop_assert!(result.output.contains("may or may not have completed"));
                        ended += 1;
                    }
                    Output::Transmit(t) => {
                        let m: Value = serde_json::from_slice(&t.message).unwrap();
                        prop_assert_ne!(m["method"].as_str(), Some("tools/call"), "the call was sent again");
                    }
                    _ => {}
                }
            }
        }
        if answered {
            recv(&mut s, json!({"jsonrpc":"2.0","id":call_id,"result":{"content":[{"type":"text","text":"ok"}]}}));
            for o in drain(&mut s) {
                if let Output::CallDone { result, .. } = o {
                    prop_assert_eq!(result.output, "ok");
                    ended += 1;
                }
            }
        }
        prop_assert!(reattaches <= 5);
        prop_assert!(ended <= 1);
        prop_assert_eq!(ended == 1, answered || s.calls_in_progress() == 0);
    }
}
