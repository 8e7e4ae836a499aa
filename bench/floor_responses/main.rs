//! Floor (Rust) for the OpenAI Responses wire: the scenario's two POSTs to
//! `/v1/responses` with prebuilt bodies, nothing else. The same method as the
//! shared harness's `floor-rust --client ureq` (`shared/bench/floor_rust/main.rs`),
//! speaking Responses instead of Chat Completions, so that our Responses rows
//! have a floor that pays what the wire costs: the mock's Responses path and
//! these bodies.
//!
//! Per request: POST body1 -> serde_json parse into a Value -> run the
//! `function_call` items of `output` (parse their `arguments`, run trivial native
//! fns) -> POST body2 (prebuilt: the same + the two calls echoed + one
//! `function_call_output` each) -> parse -> the text of the `message` item.
//!
//!   --stream   the same two POSTs with "stream": true. The SSE body is read to its
//!              end as it arrives, through ureq 2's body reader, with the least work a
//!              correct streaming client does: split lines/events, serde_json-parse every
//!              `data:` payload, take each call's name and call_id from
//!              `response.output_item.added`, join `response.function_call_arguments.delta`
//!              fragments by `output_index` and the `response.output_text.delta`s,
//!              require `response.completed`, then parse the assembled arguments and run
//!              the tools.
//!
//! One ureq 2 Agent (one pooled keep-alive connection). Stdin protocol and summary
//! line as `shared/bench/runners/harness.py` describes (`--serve`, or `--warmup N
//! --runs N` standalone). `final_ok` is strict: every request ends in the exact
//! final text and each tool ran once per request with the scripted arguments.
//!
//! Env: MOCK_URL (http://127.0.0.1:PORT), FLOOR_RESPONSES_BODIES_DIR (body1.json,
//! body2.json and the -stream variants, written by bodies.py). Built out of the
//! workspace by bench/run.sh.
use std::io::{BufRead, Read, Write};
use std::time::Instant;

use serde_json::Value;

#[path = "../floor_common.rs"]
mod common;
use common::{exec_one, exec_response_calls, response_text, summary, SseFold, SseFrames, Tally, FINAL};

/// The crates this floor is pinned to in Cargo.toml (kept in step with it).
const VERSION: &str = "ureq 2.12.1 + serde_json 1.0.154";

/// One streamed output item, by its `output_index`.
#[derive(Default)]
struct StreamCall {
    call: bool,
    call_id: String,
    name: String,
    args: String,
}

/// Incremental SSE reader for Responses events: fed bytes as they arrive, it
/// frames them into events ([`SseFrames`]), parses each event's JSON and
/// folds the deltas.
#[derive(Default)]
struct Sse {
    frames: SseFrames,
    text: String, // concatenated output_text deltas
    items: Vec<StreamCall>,
    completed: bool,
}

impl Sse {
    fn reset(&mut self) {
        self.frames.clear();
        self.text.clear();
        self.items.clear();
        self.completed = false;
    }

    fn item(&mut self, v: &Value) -> Result<&mut StreamCall, String> {
        let i = v["output_index"].as_u64().ok_or("event without output_index")? as usize;
        if self.items.len() <= i {
            self.items.resize_with(i + 1, StreamCall::default)
        }
        Ok(&mut self.items[i])
    }

    /// End of body: the stream must have delivered `response.completed`.
    fn end(&self) -> Result<(), String> {
        if !self.completed {
            return Err("stream ended without response.completed".into());
        }
        if !self.frames.is_idle() {
            return Err("stream ended inside an event".into());
        }
        Ok(())
    }
}

impl SseFold for Sse {
    fn frames(&mut self) -> &mut SseFrames {
        &mut self.frames
    }

    fn event(&mut self, data: &[u8]) -> Result<(), String> {
        let v: Value = serde_json::from_slice(data).map_err(|e| format!("bad SSE JSON: {e}"))?;
        match v["type"].as_str().unwrap_or("") {
            "response.output_text.delta" => self.text.push_str(v["delta"].as_str().unwrap_or("")),
            "response.function_call_arguments.delta" => {
                let d = v["delta"].as_str().unwrap_or("");
                self.item(&v)?.args.push_str(d);
            }
            "response.output_item.added" => {
                let it = &v["item"];
                if it["type"] == "function_call" {
                    let s = self.item(&v)?;
                    s.call = true;
                    s.call_id.push_str(it["call_id"].as_str().unwrap_or(""));
                    s.name.push_str(it["name"].as_str().unwrap_or(""));
                }
            }
            "response.completed" => self.completed = true,
            "response.failed" | "response.incomplete" | "error" => {
                return Err(format!("stream ended in {}: {v}", v["type"]));
            }
            _ => {}
        }
        Ok(())
    }
}

struct Ureq {
    agent: ureq::Agent,
    url: String,
}

impl Ureq {
    fn send(&self, body: &[u8]) -> Result<ureq::Response, String> {
        self.agent
            .post(&self.url)
            .set("Content-Type", "application/json")
            .set("Authorization", "Bearer sk-mock-not-a-real-key")
            .send_bytes(body)
            .map_err(|e| e.to_string())
    }

    fn post(&mut self, body: &[u8]) -> Result<Vec<u8>, String> {
        let mut buf = Vec::with_capacity(1024);
        self.send(body)?.into_reader().read_to_end(&mut buf).map_err(|e| e.to_string())?;
        Ok(buf)
    }

    /// POST and feed the response body to `sse` as it arrives, to its end.
    fn post_stream(&mut self, body: &[u8], sse: &mut Sse) -> Result<(), String> {
        let mut rd = self.send(body)?.into_reader();
        let mut buf = [0u8; 8192];
        loop {
            let n = rd.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            sse.feed(&buf[..n])?;
        }
        Ok(())
    }
}

fn run_once(c: &mut Ureq, b1: &[u8], b2: &[u8], t: &mut Tally) -> Result<String, String> {
    let r1: Value = serde_json::from_slice(&c.post(b1)?).map_err(|e| e.to_string())?;
    exec_response_calls(&r1, t)?;
    let r2: Value = serde_json::from_slice(&c.post(b2)?).map_err(|e| e.to_string())?;
    response_text(&r2)
}

fn run_once_stream(c: &mut Ureq, b1: &[u8], b2: &[u8], t: &mut Tally, sse: &mut Sse) -> Result<String, String> {
    sse.reset();
    c.post_stream(b1, sse)?;
    sse.end()?;
    let mut calls = 0;
    for item in sse.items.iter().filter(|i| i.call) {
        if item.call_id.is_empty() {
            return Err("streamed function_call without call_id".into());
        }
        exec_one(&item.name, &item.args, t)?;
        calls += 1;
    }
    if calls == 0 {
        return Err("turn 1 streamed no function_call".into());
    }
    sse.reset();
    c.post_stream(b2, sse)?;
    sse.end()?;
    Ok(std::mem::take(&mut sse.text))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut runs, mut warmup, mut serve, mut stream) = (200usize, 20usize, false, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().expect("--runs N").parse().expect("--runs N"),
            "--warmup" => warmup = args.next().expect("--warmup N").parse().expect("--warmup N"),
            "--serve" => serve = true,
            "--stream" => stream = true,
            _ => panic!("unknown arg {a} (usage: [--stream] [--serve | --warmup N --runs N])"),
        }
    }
    let mock = std::env::var("MOCK_URL").unwrap_or("http://127.0.0.1:8900".into());
    let url = format!("{}/v1/responses", mock.trim_end_matches('/'));
    let dir = std::env::var("FLOOR_RESPONSES_BODIES_DIR").expect("FLOOR_RESPONSES_BODIES_DIR");
    let sfx = if stream { "-stream" } else { "" };
    let b1 = std::fs::read(format!("{dir}/body1{sfx}.json")).expect("body1 json");
    let b2 = std::fs::read(format!("{dir}/body2{sfx}.json")).expect("body2 json");

    let t0 = Instant::now();
    let mut c = Ureq { agent: ureq::AgentBuilder::new().build(), url };
    let init_ms = t0.elapsed().as_secs_f64() * 1e3;
    let name = format!("floor-rust-ureq-responses{sfx}");
    let mut sse = Sse::default();
    let mut t = Tally::default();
    let mut lat: Vec<f64> = Vec::new();
    let (mut requests, mut text_ok, mut err, mut last) = (0u64, true, None::<String>, String::new());

    let mut batch = |k: usize, record: bool, lat: &mut Vec<f64>, t: &mut Tally| -> bool {
        let mut ok = true;
        for _ in 0..k {
            let s = Instant::now();
            let r = if stream { run_once_stream(&mut c, &b1, &b2, t, &mut sse) } else { run_once(&mut c, &b1, &b2, t) };
            match r {
                Ok(text) => {
                    let dt = s.elapsed().as_secs_f64() * 1e3;
                    requests += 1;
                    if text != FINAL {
                        ok = false;
                        text_ok = false;
                    }
                    last = text;
                    if record {
                        lat.push(dt)
                    }
                }
                Err(e) => {
                    err = Some(e);
                    text_ok = false;
                    return false;
                }
            }
        }
        ok
    };
    let summarize = |lat: &Vec<f64>, t: &Tally, requests: u64, text_ok: bool, err: &Option<String>, last: &str| {
        summary(&name, VERSION, lat, t, requests, text_ok, err, last, init_ms)
    };
    let out = std::io::stdout();
    let emit = |v: Value| {
        let mut o = out.lock();
        writeln!(o, "{v}").unwrap();
        o.flush().unwrap();
    };

    if !serve {
        batch(warmup, false, &mut lat, &mut t);
        batch(runs, true, &mut lat, &mut t);
        emit(summarize(&lat, &t, requests, text_ok, &err, &last));
        return;
    }
    emit(serde_json::json!({"ready": true, "framework": name, "init_ms": init_ms}));
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let f: Vec<&str> = line.split_whitespace().collect();
        let k = || f.get(1).and_then(|k| k.parse::<usize>().ok()).unwrap_or(0);
        match f.first().copied() {
            Some("warmup") => {
                let k = k();
                let ok = batch(k, false, &mut lat, &mut t);
                emit(serde_json::json!({"warmup": k, "ok": ok}));
            }
            Some("run") => {
                let k = k();
                let before = lat.len();
                let ok = batch(k, true, &mut lat, &mut t);
                emit(serde_json::json!({"lat": &lat[before..], "ok": ok}));
            }
            Some("quit") => break,
            _ => {}
        }
    }
    emit(summarize(&lat, &t, requests, text_ok, &err, &last));
}
