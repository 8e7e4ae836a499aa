//! What the floors in `bench/` (floor_responses, floor_smol) share, included
//! by path: `#[path = "../floor_common.rs"] mod common;`. Each floor is a
//! package of its own, outside the workspace; this file keeps their common
//! method in one place: the scenario's tools and their tally, the SSE
//! framing every streaming floor does, the reading of a whole Responses
//! answer, and the nearest-rank percentile of the shared harness.

use serde_json::Value;

/// The final text every request must end in.
pub const FINAL: &str = "The weather in Paris is Sunny, 22C. And 2 + 2 = 4.";

/// How many times each tool ran, and how many runs had unexpected arguments.
#[derive(Default)]
pub struct Tally {
    pub weather: u64,
    pub add: u64,
    pub bad: u64,
}

/// Runs one of the scenario's two tools on its JSON arguments.
pub fn exec_one(name: &str, arguments: &str, t: &mut Tally) -> Result<(), String> {
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

/// SSE framing, fed bytes as they arrive: splits lines (LF or CRLF) and
/// gathers `data:` fields into events, handing each event's data on.
/// `event:`, `id:`, `retry:` and comments carry nothing the floors need.
#[derive(Default)]
pub struct SseFrames {
    /// The unfinished line carried between reads.
    line: Vec<u8>,
    /// The current event's data field(s).
    data: Vec<u8>,
}

impl SseFrames {
    pub fn clear(&mut self) {
        self.line.clear();
        self.data.clear();
    }

    /// Nothing half-read: no partial line, no event without its blank line.
    pub fn is_idle(&self) -> bool {
        self.line.is_empty() && self.data.is_empty()
    }

    /// Feeds `bytes`, calling `on_event` with the data of each event they complete.
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        on_event: &mut impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        while let Some(nl) = bytes.iter().position(|&b| b == b'\n') {
            let (head, rest) = bytes.split_at(nl);
            bytes = &rest[1..];
            if self.line.is_empty() {
                self.on_line(head, on_event)?;
            } else {
                let mut l = std::mem::take(&mut self.line);
                l.extend_from_slice(head);
                self.on_line(&l, on_event)?;
                l.clear();
                self.line = l;
            }
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn on_line(&mut self, l: &[u8], on_event: &mut impl FnMut(&[u8]) -> Result<(), String>) -> Result<(), String> {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        if l.is_empty() {
            if self.data.is_empty() {
                return Ok(());
            }
            let done = on_event(&self.data);
            self.data.clear();
            return done;
        }
        if let Some(v) = l.strip_prefix(b"data:") {
            let v = v.strip_prefix(b" ").unwrap_or(v);
            if !self.data.is_empty() {
                self.data.push(b'\n')
            }
            self.data.extend_from_slice(v);
        }
        Ok(())
    }
}

/// A streaming floor's reader: its framing, and what it does with each
/// event's data.
pub trait SseFold {
    fn frames(&mut self) -> &mut SseFrames;
    fn event(&mut self, data: &[u8]) -> Result<(), String>;

    /// Feeds `bytes` as they arrive, folding every event they complete.
    fn feed(&mut self, bytes: &[u8]) -> Result<(), String> {
        // The framing is lent out while its events fold into the rest.
        let mut frames = std::mem::take(self.frames());
        let fed = frames.feed(bytes, &mut |data| self.event(data));
        *self.frames() = frames;
        fed
    }
}

/// A whole Responses object must have completed.
pub fn completed(v: &Value) -> Result<(), String> {
    match v["status"].as_str() {
        Some("completed") => Ok(()),
        other => Err(format!("response status {other:?}: {}", v["error"])),
    }
}

/// Responses turn 1: run every `function_call` item of `output`.
pub fn exec_response_calls(v: &Value, t: &mut Tally) -> Result<(), String> {
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

/// Responses turn 2: the text of the `message` item(s).
pub fn response_text(v: &Value) -> Result<String, String> {
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

/// Nearest-rank percentile of sorted samples, as the shared harness takes it.
pub fn pct(s: &[f64], q: f64) -> f64 {
    if s.is_empty() {
        return f64::NAN;
    }
    let k = ((q / 100.0 * s.len() as f64).ceil() as isize - 1).clamp(0, s.len() as isize - 1);
    s[k as usize]
}

/// The summary line the shared harness reads at the end of a runner's life.
/// `final_ok` is strict: every request ended in the exact final text and
/// each tool ran once per request with the scripted arguments.
#[allow(clippy::too_many_arguments)]
pub fn summary(
    name: &str,
    version: &str,
    lat: &[f64],
    t: &Tally,
    requests: u64,
    text_ok: bool,
    err: &Option<String>,
    last: &str,
    init_ms: f64,
) -> Value {
    let mut s = lat.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    let mean = if n > 0 { s.iter().sum::<f64>() / n as f64 } else { f64::NAN };
    serde_json::json!({
        "framework": name, "version": version, "n": n, "mean_ms": mean,
        "p50_ms": pct(&s, 50.0), "p95_ms": pct(&s, 95.0),
        "min_ms": s.first(), "max_ms": s.last(), "init_ms": init_ms,
        "requests_total": requests, "last_text": last, "error": err,
        "tool_calls": {"get_weather": t.weather, "add": t.add, "bad_args": t.bad},
        "final_ok": text_ok && err.is_none() && requests > 0 && t.weather == requests
                    && t.add == requests && t.bad == 0,
    })
}
