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

const FINAL: &str = "The weather in Paris is Sunny, 22C. And 2 + 2 = 4.";
/// The crates this floor is pinned to in Cargo.toml (kept in step with it).
const VERSION: &str = "ureq 2.12.1 + serde_json 1.0.154";

struct Tally {
    weather: u64,
    add: u64,
    bad: u64,
}

fn exec_one(name: &str, arguments: &str, t: &mut Tally) -> Result<(), String> {
    let args: Value = serde_json::from_str(arguments).map_err(|e| e.to_string())?;
    match name {
        "get_weather" => {
            t.weather += 1;
            let city = args["city"].as_str().unwrap_or("");
            if city != "Paris" {
                t.bad += 1
            }
            std::hint::black_box(format!("The weather in {city} is Sunny, 22C."));
        }
        "add" => {
            t.add += 1;
            let s = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
            if s != 4 {
                t.bad += 1
            }
            std::hint::black_box(s.to_string());
        }
        other => return Err(format!("unknown tool {other}")),
    }
    Ok(())
}

/// A whole Responses object must have completed.
fn completed(v: &Value) -> Result<(), String> {
    match v["status"].as_str() {
        Some("completed") => Ok(()),
        other => Err(format!("response status {other:?}: {}", v["error"])),
    }
}

/// Turn 1: run every `function_call` item of `output`.
fn exec_tools(v: &Value, t: &mut Tally) -> Result<(), String> {
    completed(v)?;
    let mut calls = 0;
    for item in v["output"].as_array().ok_or("no output")? {
        if item["type"] != "function_call" {
            continue;
        }
        if item["call_id"].as_str().is_none_or(str::is_empty) {
            return Err("function_call without call_id".into());
        }
        exec_one(item["name"].as_str().unwrap_or(""), item["arguments"].as_str().unwrap_or("{}"), t)?;
        calls += 1;
    }
    if calls == 0 {
        return Err("turn 1 answered no function_call".into());
    }
    Ok(())
}

/// Turn 2: the text of the `message` item(s).
fn final_text(v: &Value) -> Result<String, String> {
    completed(v)?;
    let mut text = String::new();
    for item in v["output"].as_array().ok_or("no output")? {
        if item["type"] != "message" {
            continue;
        }
        for part in item["content"].as_array().ok_or("message without content")? {
            if part["type"] == "output_text" {
                text.push_str(part["text"].as_str().unwrap_or(""));
            }
        }
    }
    Ok(text)
}

/// One streamed output item, by its `output_index`.
#[derive(Default)]
struct StreamCall {
    call: bool,
    call_id: String,
    name: String,
    args: String,
}

/// Incremental SSE reader for Responses events: fed bytes as they arrive, it
/// splits lines (LF or CRLF), gathers `data:` fields into events, parses each
/// event's JSON and folds the deltas.
#[derive(Default)]
struct Sse {
    line: Vec<u8>, // the unfinished line carried between reads
    data: Vec<u8>, // the current event's data field(s)
    text: String,  // concatenated output_text deltas
    items: Vec<StreamCall>,
    completed: bool,
    events: u64,
}

impl Sse {
    fn reset(&mut self) {
        self.line.clear();
        self.data.clear();
        self.text.clear();
        self.items.clear();
        self.completed = false;
        self.events = 0;
    }

    fn feed(&mut self, mut bytes: &[u8]) -> Result<(), String> {
        while let Some(nl) = bytes.iter().position(|&b| b == b'\n') {
            let (head, rest) = bytes.split_at(nl);
            bytes = &rest[1..];
            if self.line.is_empty() {
                self.on_line(head)?;
            } else {
                let mut l = std::mem::take(&mut self.line);
                l.extend_from_slice(head);
                self.on_line(&l)?;
                l.clear();
                self.line = l;
            }
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn on_line(&mut self, l: &[u8]) -> Result<(), String> {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        if l.is_empty() {
            return self.dispatch();
        }
        if let Some(v) = l.strip_prefix(b"data:") {
            let v = v.strip_prefix(b" ").unwrap_or(v);
            if !self.data.is_empty() {
                self.data.push(b'\n')
            }
            self.data.extend_from_slice(v);
        }
        Ok(()) // event: (the type is in the JSON too), id:, retry: and comments carry nothing here
    }

    fn item(&mut self, v: &Value) -> Result<&mut StreamCall, String> {
        let i = v["output_index"].as_u64().ok_or("event without output_index")? as usize;
        if self.items.len() <= i {
            self.items.resize_with(i + 1, StreamCall::default)
        }
        Ok(&mut self.items[i])
    }

    fn dispatch(&mut self) -> Result<(), String> {
        if self.data.is_empty() {
            return Ok(());
        }
        self.events += 1;
        let v: Value = serde_json::from_slice(&self.data).map_err(|e| format!("bad SSE JSON: {e}"))?;
        self.data.clear();
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

    /// End of body: the stream must have delivered `response.completed`.
    fn end(&self) -> Result<(), String> {
        if !self.completed {
            return Err("stream ended without response.completed".into());
        }
        if !self.line.is_empty() || !self.data.is_empty() {
            return Err("stream ended inside an event".into());
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
    exec_tools(&r1, t)?;
    let r2: Value = serde_json::from_slice(&c.post(b2)?).map_err(|e| e.to_string())?;
    final_text(&r2)
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

fn pct(s: &[f64], q: f64) -> f64 {
    if s.is_empty() {
        return f64::NAN;
    }
    let k = ((q / 100.0 * s.len() as f64).ceil() as isize - 1).clamp(0, s.len() as isize - 1);
    s[k as usize]
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
    let mut t = Tally { weather: 0, add: 0, bad: 0 };
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
    let summary = |lat: &Vec<f64>, t: &Tally, requests: u64, text_ok: bool, err: &Option<String>, last: &str| {
        let mut s = lat.clone();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = s.len();
        let mean = if n > 0 { s.iter().sum::<f64>() / n as f64 } else { f64::NAN };
        serde_json::json!({
            "framework": name, "version": VERSION, "n": n, "mean_ms": mean,
            "p50_ms": pct(&s, 50.0), "p95_ms": pct(&s, 95.0),
            "min_ms": s.first(), "max_ms": s.last(), "init_ms": init_ms,
            "requests_total": requests, "last_text": last, "error": err,
            "tool_calls": {"get_weather": t.weather, "add": t.add, "bad_args": t.bad},
            "final_ok": text_ok && err.is_none() && requests > 0 && t.weather == requests
                        && t.add == requests && t.bad == 0,
        })
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
        emit(summary(&lat, &t, requests, text_ok, &err, &last));
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
    emit(summary(&lat, &t, requests, text_ok, &err, &last));
}
