//! Property tests of the loop's invariants over random scripts: every
//! emitted request is balanced on the wire, restoring from a snapshot at any
//! point gives the same run as never stopping, and no completed tool call is
//! ever executed again.

mod sim;

use std::collections::HashMap;

use nexus_proto::{Answer, Outcome, Style, ToolDecl, ToolInvocation, ToolReply, ToolResult};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use sim::{Sim, Stop, Turn};

#[derive(Debug, Clone, Copy)]
enum Kind {
    Exec,
    Pending,
    Relay,
    Unknown,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Exec), Just(Kind::Pending), Just(Kind::Relay), Just(Kind::Unknown)]
}

fn tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::new("exec", "runs", json!({"type":"object"})),
        ToolDecl::new("approve", "suspends", json!({"type":"object"})),
        ToolDecl::relay("relay", "relayed", json!({"type":"object"})),
    ]
}

fn build_script(turns: &[Vec<Kind>]) -> Vec<Turn> {
    let mut script = Vec::new();
    for (t, kinds) in turns.iter().enumerate() {
        let calls = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let name = match k {
                    Kind::Exec => "exec",
                    Kind::Pending => "approve",
                    Kind::Relay => "relay",
                    Kind::Unknown => "missing",
                };
                (format!("id_{t}_{i}"), name.to_string(), format!(r#"{{"t":{t},"i":{i}}}"#))
            })
            .collect();
        script.push(Turn { text: None, calls });
    }
    script.push(Turn::text("all done"));
    script
}

fn tool(inv: &ToolInvocation) -> ToolReply {
    match (inv.name.as_str(), &inv.answer) {
        ("approve", None) => ToolReply::Pending(nexus_proto::Request::new("approval", "approve?")),
        _ => ToolReply::Done(ToolResult::ok(format!("{}={}", inv.name, inv.input))),
    }
}

/// Answers every outstanding request; `bits` picks ok/declined and which relay results to give.
fn answers(reqs: &[nexus_proto::Request], bits: &mut impl Iterator<Item = bool>) -> Vec<Answer> {
    let mut out = Vec::new();
    for r in reqs {
        let ok = bits.next().unwrap_or(true);
        if !ok {
            out.push(Answer::declined(r.id.clone(), "declined"));
            continue;
        }
        if r.kind == "tool_call" {
            let results: Vec<Value> = r.data.as_ref().unwrap()["calls"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|_| bits.next().unwrap_or(true))
                .map(|c| json!({"id": c["id"], "output": format!("relayed {}", c["arguments"].as_str().unwrap_or("")), "isError": false}))
                .collect();
            let mut data = Map::new();
            data.insert("results".into(), Value::Array(results));
            out.push(Answer::ok(r.id.clone(), Some(data)));
        } else {
            out.push(Answer::ok(r.id.clone(), None));
        }
    }
    out
}

/// Checks the request body on the wire: every tool call answered once in
/// the next turn (Responses: before the next model turn), and every earlier
/// turn's reasoning item echoed with its encrypted content, in order, right
/// before the item that followed it.
fn assert_balanced_on_wire(style: Style, body: &Value) {
    match style {
        Style::OpenAiResponses => {
            let items = body["input"].as_array().unwrap();
            assert_eq!(body["store"], false, "{body}");
            assert_eq!(body["include"], serde_json::json!(["reasoning.encrypted_content"]));
            let mut open: Vec<&str> = vec![];
            let mut turn = 0;
            for (i, item) in items.iter().enumerate() {
                match item["type"].as_str() {
                    Some("reasoning") => {
                        assert!(open.is_empty(), "a model turn before the outputs of {open:?}: {body}");
                        assert_eq!(item["encrypted_content"], sim::encrypted(turn), "turn {turn}: {body}");
                        assert_eq!(item["id"], format!("rs_{turn}"));
                        let next = &items[i + 1];
                        assert!(
                            next["id"].as_str().is_some_and(
                                |id| id.ends_with(&turn.to_string()) || id.starts_with(&format!("fc_{turn}_"))
                            ),
                            "reasoning without its item: {body}"
                        );
                        turn += 1;
                    }
                    Some("function_call") => open.push(item["call_id"].as_str().unwrap()),
                    Some("function_call_output") => {
                        let id = item["call_id"].as_str().unwrap();
                        let at =
                            open.iter().position(|o| *o == id).unwrap_or_else(|| panic!("orphan output {id}: {body}"));
                        open.remove(at);
                    }
                    _ => {}
                }
            }
            assert!(open.is_empty(), "unanswered calls {open:?}: {body}");
        }
        Style::OpenAi => {
            let msgs = body["messages"].as_array().unwrap();
            let mut i = 0;
            while i < msgs.len() {
                if let Some(calls) = msgs[i]["tool_calls"].as_array() {
                    let mut want: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
                    let mut j = i + 1;
                    let mut got = vec![];
                    while j < msgs.len() && msgs[j]["role"] == "tool" {
                        got.push(msgs[j]["tool_call_id"].as_str().unwrap());
                        j += 1;
                    }
                    want.sort();
                    got.sort();
                    assert_eq!(want, got, "unbalanced at messages[{i}]: {body}");
                    i = j;
                } else {
                    assert_ne!(msgs[i]["role"], "tool", "orphan tool message: {body}");
                    i += 1;
                }
            }
        }
        Style::Anthropic => {
            let msgs = body["messages"].as_array().unwrap();
            for (i, m) in msgs.iter().enumerate() {
                let ids = |m: &Value, ty: &str, key: &str| -> Vec<String> {
                    m["content"]
                        .as_array()
                        .map(|c| {
                            c.iter().filter(|b| b["type"] == ty).map(|b| b[key].as_str().unwrap().to_string()).collect()
                        })
                        .unwrap_or_default()
                };
                let mut uses = ids(m, "tool_use", "id");
                if !uses.is_empty() {
                    let mut results = ids(&msgs[i + 1], "tool_result", "tool_use_id");
                    uses.sort();
                    results.sort();
                    assert_eq!(uses, results, "unbalanced at messages[{i}]");
                }
                if i > 0 && !ids(m, "tool_result", "tool_use_id").is_empty() {
                    assert!(!ids(&msgs[i - 1], "tool_use", "id").is_empty(), "orphan tool_result");
                }
            }
        }
        Style::Gemini => {
            let contents = body["contents"].as_array().unwrap();
            for (i, c) in contents.iter().enumerate() {
                let count = |c: &Value, key: &str| {
                    c["parts"].as_array().map(|p| p.iter().filter(|p| p.get(key).is_some()).count()).unwrap_or(0)
                };
                let calls = count(c, "functionCall");
                if calls > 0 {
                    assert_eq!(calls, count(&contents[i + 1], "functionResponse"), "unbalanced at contents[{i}]");
                }
            }
        }
    }
}

/// Drives a whole run; `reload_bits` decides where to snapshot and restore.
fn run_all(style: Style, stream: bool, script: &[Turn], answer_bits: &[bool], reload_bits: &[bool]) -> (Stop, Sim) {
    let mut sim = Sim::new(style, stream, tools(), script.to_vec());
    let mut bits = answer_bits.iter().copied().cycle();
    let mut reloads = reload_bits.iter().copied().cycle();
    for _ in 0..50 {
        let stop = sim.drive(&mut tool);
        match stop {
            Stop::Done(_) => return (stop, sim),
            Stop::Suspended(reqs) => {
                for a in answers(&reqs, &mut bits) {
                    if reloads.next().unwrap_or(false) {
                        sim.reload();
                    }
                    sim.answer(a).unwrap();
                }
            }
        }
    }
    panic!("run did not finish");
}

fn styles() -> impl Strategy<Value = (Style, bool)> {
    (
        prop_oneof![Just(Style::Anthropic), Just(Style::OpenAi), Just(Style::Gemini), Just(Style::OpenAiResponses)],
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn runs_stay_balanced_equal_across_restores_and_never_rerun(
        (style, stream) in styles(),
        turns in prop::collection::vec(prop::collection::vec(kind(), 0..=5), 0..=4),
        answer_bits in prop::collection::vec(any::<bool>(), 1..16),
        reload_bits in prop::collection::vec(any::<bool>(), 1..16),
    ) {
        // a turn with zero calls would end the run: keep scripts meaningful
        let turns: Vec<Vec<Kind>> = turns.into_iter().filter(|t| !t.is_empty()).collect();
        let script = build_script(&turns);
        let (stop_a, a) = run_all(style, stream, &script, &answer_bits, &[false]);
        let (stop_b, b) = run_all(style, stream, &script, &answer_bits, &reload_bits);
        prop_assert_eq!(&stop_a, &stop_b);
        prop_assert_eq!(a.run.transcript(), b.run.transcript());
        prop_assert_eq!(a.run.usage(), b.run.usage());
        prop_assert_eq!(&a.sent, &b.sent, "the same request bodies, byte for byte");
        let expected_stop = if turns.len() < 10 { Stop::Done(Outcome::Done) } else { unreachable!() };
        prop_assert_eq!(stop_a, expected_stop);
        for body in a.sent.iter().chain(b.sent.iter()) {
            assert_balanced_on_wire(style, body);
        }
        // exactly once: a call runs once, plus at most once more with its answer
        for sim in [&a, &b] {
            let mut plain: HashMap<&str, usize> = HashMap::new();
            let mut answered: HashMap<&str, usize> = HashMap::new();
            for (id, ans) in &sim.executed {
                *if ans.is_some() { answered.entry(id) } else { plain.entry(id) }.or_default() += 1;
            }
            prop_assert!(plain.values().all(|n| *n == 1), "{:?}", sim.executed);
            prop_assert!(answered.values().all(|n| *n == 1), "{:?}", sim.executed);
            prop_assert!(answered.keys().all(|k| plain.contains_key(k)));
            // every call has exactly one result in the final transcript
            let calls: usize = sim.run.transcript().iter().map(|m| m.tool_calls().count()).sum();
            let results: usize = sim.run.transcript().iter().map(|m| m.tool_results().count()).sum();
            prop_assert_eq!(calls, results);
        }
    }

    #[test]
    fn snapshots_round_trip_byte_identically(
        (style, stream) in styles(),
        turns in prop::collection::vec(prop::collection::vec(kind(), 1..=4), 1..=3),
    ) {
        let script = build_script(&turns);
        let mut sim = Sim::new(style, stream, tools(), script);
        let stop = sim.drive(&mut tool);
        let bytes = sim.run.snapshot();
        let again = nexus_proto::Run::restore(&bytes).unwrap().snapshot();
        prop_assert_eq!(&bytes, &again);
        if let Stop::Suspended(reqs) = stop {
            prop_assert_eq!(nexus_proto::Run::restore(&bytes).unwrap().outstanding(), reqs);
        }
    }

    #[test]
    fn corrupt_state_is_a_typed_error(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = nexus_proto::Run::restore(&bytes);
    }
}
