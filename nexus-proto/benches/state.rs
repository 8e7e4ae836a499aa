//! Durable state cost as the transcript grows: snapshot + restore of a
//! suspended run against a plain serde_json round trip of the transcript alone.

mod harness;
#[path = "../tests/sim/mod.rs"]
mod sim;

use harness::{micros, paired, samples};
use nexus_proto::{
    Block, ContextPolicy, Message, Output, Run, Style, ToolBatch, ToolCall, ToolDecl, ToolReply, ToolResultBlock,
};
use serde_json::json;

fn transcript(n: usize) -> Vec<Message> {
    let mut msgs = Vec::with_capacity(n);
    for i in 0..n {
        msgs.push(match i % 4 {
            0 => Message::user(format!(
                "question {i}: what is the weather like in Paris today, and should I bring a coat?"
            )),
            1 => Message {
                role: nexus_proto::Role::Assistant,
                content: vec![
                    Block::text("Let me check the weather for you."),
                    Block::ToolCall(ToolCall {
                        id: format!("call_{i}"),
                        name: "get_weather".into(),
                        input: json!({"city": "Paris", "units": "metric"}),
                        arguments: r#"{"city":"Paris","units":"metric"}"#.into(),
                        provider_data: None,
                    }),
                ],
            },
            2 => Message {
                role: nexus_proto::Role::User,
                content: vec![Block::ToolResult(ToolResultBlock {
                    call_id: format!("call_{}", i - 1),
                    name: "get_weather".into(),
                    output: "Sunny, 22C, light wind from the west".into(),
                    is_error: false,
                })],
            },
            _ => Message::assistant("It is sunny and 22C in Paris: no coat needed, a light jacket at most."),
        });
    }
    if msgs.last().map(|m| m.role) != Some(nexus_proto::Role::User) {
        msgs.push(Message::user("thanks"));
    }
    msgs
}

fn main() {
    let s = samples(15);
    println!("## Durable state: snapshot + restore of a run vs a serde_json round trip of its transcript\n");
    println!("| messages | transcript JSON | state size | size ratio | snapshot+restore median (p95) | transcript round trip median | time ratio (median of pairs) |");
    println!("|---|---|---|---|---|---|---|");
    for n in [10, 100, 1_000, 10_000] {
        let msgs = transcript(n);
        let tools = vec![ToolDecl::new("get_weather", "weather", json!({"type":"object"}))];
        let run = Run::new(sim::config(Style::OpenAi, false), tools, msgs.clone()).unwrap();
        let plain = serde_json::to_vec(&msgs).unwrap();
        let state = run.snapshot();
        let inner = (10_000 / n).max(1);
        let (ours, floor, floor_over_ours) = paired(
            s,
            inner,
            || {
                let bytes = run.snapshot();
                std::hint::black_box(Run::restore(&bytes).unwrap());
            },
            || {
                let bytes = serde_json::to_vec(&msgs).unwrap();
                let back: Vec<Message> = serde_json::from_slice(&bytes).unwrap();
                std::hint::black_box(back);
            },
        );
        println!(
            "| {n} | {} B | {} B | {:.3} | {:.1} µs ({:.1}) | {:.1} µs | {:.2} |",
            plain.len(),
            state.len(),
            state.len() as f64 / plain.len() as f64,
            micros(ours.median),
            micros(ours.p95),
            micros(floor.median),
            1.0 / floor_over_ours
        );
    }
    println!();
    growth_table();
}

/// The state's size before each model request of a tool loop (one call per
/// turn), with the context budget off and on: what the budget adds to every
/// snapshot, and whether that grows with the turns.
fn growth_table() {
    const TURNS: usize = 50;
    println!("## Durable state per turn: the context budget off vs on ({TURNS}-turn tool loop)\n");
    println!("| before request | state, budget off | state, budget on | budget's share | growth per turn, off | growth per turn, on |");
    println!("|---|---|---|---|---|---|");
    let (off, on) = (sizes_per_turn(false, TURNS), sizes_per_turn(true, TURNS));
    assert_eq!(off.len(), on.len(), "both runs send the same requests");
    for i in [0, 1, 2, 10, 25, TURNS] {
        let growth = |v: &[usize]| (v[i] - v[0]).checked_div(i).map_or_else(|| "—".to_string(), |b| format!("{b} B"));
        println!(
            "| {} | {} B | {} B | {} B | {} | {} |",
            i + 1,
            off[i],
            on[i],
            on[i] as i64 - off[i] as i64,
            growth(&off),
            growth(&on)
        );
    }
}

fn sizes_per_turn(budget: bool, turns: usize) -> Vec<usize> {
    let mut script: Vec<sim::Turn> = (0..turns)
        .map(|i| sim::Turn::calls(&[(&format!("call_{i}"), "get_weather", r#"{"city":"Paris","units":"metric"}"#)]))
        .collect();
    script.push(sim::Turn::text("It is sunny and 22C in Paris."));
    let mut cfg = sim::config(Style::OpenAi, false);
    cfg.max_turns = turns as u32 + 1;
    if budget {
        // A window the loop never nears: the budget estimates and records,
        // never compacts.
        cfg.context = Some(ContextPolicy { windows: [(0, 1_000_000)].into(), ..ContextPolicy::default() });
    }
    let tools = vec![ToolDecl::new("get_weather", "weather", json!({"type":"object"}))];
    let run = Run::new(cfg, tools, vec![Message::user("what is the weather in Paris, each hour?")]).unwrap();
    let mut sim = sim::Sim::from_run(run, script);
    let mut sizes = Vec::new();
    loop {
        match sim.run.poll_output() {
            Output::Send(req) => {
                sizes.push(sim.run.snapshot().len());
                sim.serve(&req);
            }
            Output::RunTools(ToolBatch { calls, .. }) => {
                for inv in calls {
                    let reply = ToolReply::Done(nexus_proto::ToolResult::ok("Sunny, 22C, light wind from the west"));
                    sim.run
                        .handle_input(sim.now, nexus_proto::Input::ToolReply { call_id: inv.call_id.clone(), reply })
                        .unwrap();
                }
            }
            Output::Event(_) => {}
            Output::Done(outcome) => {
                assert!(matches!(outcome, nexus_proto::Outcome::Done), "{outcome:?}");
                return sizes;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
