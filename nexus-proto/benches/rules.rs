//! What the loop's rules add to a run: typed output (native and prompted)
//! and the context budget, against a plain run of the same two-turn tool
//! loop (two parallel calls, then the final answer), timed in alternating
//! pairs. The provider's answers are scripted bytes fed from memory, so the
//! figures are the machine's own work per run (encoding both requests,
//! decoding both answers, the ledger and the rules), without any I/O.

mod harness;
#[path = "../tests/sim/mod.rs"]
mod sim;

use harness::{micros, paired, samples};
use nexus_proto::{
    ContextPolicy, Input, Message, Outcome, Output, OutputMode, OutputSpec, Run, RunConfig, Style, Timestamp,
    ToolBatch, ToolDecl, ToolReply, ToolResult,
};
use serde_json::json;

/// The final answer: the JSON every typed variant validates, so all of
/// them send the same two requests as the plain run.
const FINAL: &str = r#"{"city":"Paris","weather":"Sunny, 22C","sum":4}"#;

fn tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::new(
            "get_weather",
            "Get the current weather for a city.",
            json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}),
        ),
        ToolDecl::new(
            "add",
            "Add two integers.",
            json!({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}),
        ),
    ]
}

fn output(mode: OutputMode) -> OutputSpec {
    let mut spec = OutputSpec::new(json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "weather": {"type": "string"},
            "sum": {"type": "integer"}
        },
        "required": ["city", "weather", "sum"],
        "additionalProperties": false
    }));
    spec.name = "report".into();
    spec.mode = mode;
    spec
}

/// One run to its end, answering each request with the next scripted body.
fn run_once(cfg: &RunConfig, tools: &[ToolDecl], answers: &[Vec<u8>]) {
    let now = Timestamp(1_000);
    let mut run = Run::new(cfg.clone(), tools.to_vec(), vec![Message::user("Weather in Paris, and 2 + 2?")]).unwrap();
    let mut next = answers.iter();
    loop {
        match run.poll_output() {
            Output::Send(req) => {
                let body = next.next().expect("a scripted answer per request");
                let ct = ("content-type".to_string(), "application/json".to_string());
                run.handle_input(now, Input::ResponseHead { exchange: req.exchange, status: 200, headers: vec![ct] })
                    .unwrap();
                run.handle_input(now, Input::ResponseBody { exchange: req.exchange, chunk: body }).unwrap();
                run.handle_input(now, Input::ResponseEnd { exchange: req.exchange }).unwrap();
            }
            Output::RunTools(ToolBatch { calls, .. }) => {
                for inv in calls {
                    let reply = ToolReply::Done(ToolResult::ok("Sunny, 22C."));
                    run.handle_input(now, Input::ToolReply { call_id: inv.call_id.clone(), reply }).unwrap();
                }
            }
            Output::Event(_) => {}
            Output::Done(Outcome::Done) => return,
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn main() {
    let s = samples(41);
    let style = Style::OpenAi;
    let answers = vec![
        sim::wire(
            style,
            &sim::Turn::calls(&[
                ("call_1", "get_weather", r#"{"city":"Paris"}"#),
                ("call_2", "add", r#"{"a":2,"b":2}"#),
            ]),
            false,
        ),
        sim::wire(style, &sim::Turn::text(FINAL), false),
    ];
    let tools = tools();
    let plain = sim::config(style, false);
    let with = |f: &dyn Fn(&mut RunConfig)| {
        let mut c = plain.clone();
        f(&mut c);
        c
    };
    let budget = || ContextPolicy { windows: [(0, 200_000)].into(), ..ContextPolicy::default() };
    let rows: Vec<(&str, RunConfig)> = vec![
        ("typed output, native (`response_format`)", with(&|c| c.output = Some(output(OutputMode::Native)))),
        (
            "typed output, prompted (schema in the system prompt)",
            with(&|c| c.output = Some(output(OutputMode::Prompted))),
        ),
        ("context budget (a window the run never nears)", with(&|c| c.context = Some(budget()))),
        (
            "both: native output and the budget",
            with(&|c| {
                c.output = Some(output(OutputMode::Native));
                c.context = Some(budget());
            }),
        ),
    ];
    println!("## Loop rules: a two-turn tool run with each rule on vs a plain run (OpenAI Chat, in memory)\n");
    println!("| run | median (p95) | plain run median | cost over plain (median of pairs) |");
    println!("|---|---|---|---|");
    for (name, cfg) in &rows {
        let (ours, base, base_over_ours) =
            paired(s, 20, || run_once(cfg, &tools, &answers), || run_once(&plain, &tools, &answers));
        println!(
            "| {name} | {:.1} µs ({:.1}) | {:.1} µs | {:+.1} % |",
            micros(ours.median),
            micros(ours.p95),
            micros(base.median),
            (1.0 / base_over_ours - 1.0) * 100.0
        );
    }
}
