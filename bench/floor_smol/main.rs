//! Runtime floor (Rust, smol): the method of the shared harness's
//! `floor-rust --client raw` (`shared/bench/floor_rust/main.rs`) — the
//! scenario's two POSTs with prebuilt bodies over one keep-alive socket,
//! hand-written HTTP/1.1 — with every socket wait going through smol's reactor
//! (`smol::Async<TcpStream>`, async-io) instead of a blocking `recv`.
//!
//! Side by side with `floor-rust-raw` in one sitting, its p50 and p95 show what
//! waiting through smol's reactor costs with no loop work at all, so that the
//! async driver's rows can be read as runtime cost plus driver cost.
//!
//! Per request: POST body1 -> serde_json parse -> run the 2 returned tool calls
//! (parse their `arguments`, run trivial native fns) -> POST body2 (prebuilt) ->
//! parse -> final text. `--stream`: the same two POSTs streamed, the chunked
//! framing decoded by hand and the SSE body given the least work a correct
//! streaming client does (split lines/events, parse every `data:` payload, join
//! tool-call argument fragments by `index` and the content deltas, require
//! `data: [DONE]`), as the shared streaming floor does.
//!
//! `--responses`: the two whole-body POSTs to `/v1/responses` with the bodies
//! of `bench/floor_responses` (FLOOR_RESPONSES_BODIES_DIR), read as that floor
//! reads them.
//!
//! Each stdin `run K` / `warmup K` is one `smol::block_on` around K requests,
//! as our runner (`nexus-drive/examples/overhead.rs --driver async`) does, so
//! both start each batch with the reactor in the same hands. Stdin protocol and
//! summary line as `shared/bench/runners/harness.py` describes; `final_ok` is
//! as strict as the other floors'.
//!
//! Env: MOCK_URL (http://127.0.0.1:PORT), FLOOR_BODIES_DIR (the shared
//! harness's body1.json, body2.json and -stream variants),
//! FLOOR_RESPONSES_BODIES_DIR with `--responses`.
use std::io::{BufRead as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::time::Instant;

use serde_json::Value;
use smol::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use smol::Async;

#[path = "../floor_common.rs"]
mod common;
use common::{exec_one, exec_response_calls, response_text, summary, SseFold, SseFrames, Tally, FINAL};

/// One streamed tool call being assembled (by its `index`).
#[derive(Default)]
struct StreamCall {
    id: String,
    name: String,
    args: String,
}

/// Incremental SSE reader for Chat Completions chunks: the framing of
/// [`SseFrames`], each event's JSON parsed and its deltas folded.
#[derive(Default)]
struct Sse {
    frames: SseFrames,
    text: String,
    calls: Vec<StreamCall>,
    finish: bool,
    done: bool,
}

impl Sse {
    fn reset(&mut self) {
        self.frames.clear();
        self.text.clear();
        self.calls.clear();
        self.finish = false;
        self.done = false;
    }

    fn end(&self) -> Result<(), String> {
        if !self.done {
            return Err("stream ended without data: [DONE]".into());
        }
        if !self.finish {
            return Err("stream without finish_reason".into());
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
        if data == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        let v: Value = serde_json::from_slice(data).map_err(|e| format!("bad SSE JSON: {e}"))?;
        if v.get("error").is_some() {
            return Err(format!("stream error: {}", v["error"]));
        }
        let Some(ch) = v["choices"].as_array().and_then(|c| c.first()) else { return Ok(()) };
        let d = &ch["delta"];
        if let Some(s) = d["content"].as_str() {
            self.text.push_str(s)
        }
        if let Some(tcs) = d["tool_calls"].as_array() {
            for tc in tcs {
                let i = tc["index"].as_u64().ok_or("tool_call delta without index")? as usize;
                if self.calls.len() <= i {
                    self.calls.resize_with(i + 1, StreamCall::default)
                }
                let c = &mut self.calls[i];
                if let Some(s) = tc["id"].as_str() {
                    c.id.push_str(s)
                }
                let f = &tc["function"];
                if let Some(s) = f["name"].as_str() {
                    c.name.push_str(s)
                }
                if let Some(s) = f["arguments"].as_str() {
                    c.args.push_str(s)
                }
            }
        }
        if ch["finish_reason"].is_string() {
            self.finish = true
        }
        Ok(())
    }
}

/// What the response head said about the body.
struct Head {
    len: Option<usize>,
    chunked: bool,
    close: bool,
}

struct Raw {
    host: String,
    port: u16,
    path: &'static str,
    conn: Option<BufReader<Async<TcpStream>>>,
}

impl Raw {
    /// Write the request, read the status line and headers.
    async fn send(&mut self, body: &[u8]) -> Result<Head, String> {
        if self.conn.is_none() {
            let addr = (self.host.as_str(), self.port)
                .to_socket_addrs()
                .map_err(|e| e.to_string())?
                .next()
                .ok_or("MOCK_URL names no address")?;
            let s = Async::<TcpStream>::connect(addr).await.map_err(|e| e.to_string())?;
            s.get_ref().set_nodelay(true).ok();
            self.conn = Some(BufReader::with_capacity(65536, s));
        }
        let r = self.conn.as_mut().unwrap();
        let mut req = format!(
            "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-mock-not-a-real-key\r\nContent-Length: {}\r\n\r\n",
            self.path, self.host, self.port, body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        r.get_mut().write_all(&req).await.map_err(|e| e.to_string())?;
        let mut line = String::new();
        r.read_line(&mut line).await.map_err(|e| e.to_string())?;
        if !line.starts_with("HTTP/1.1 200") {
            return Err(format!("bad status: {line:?}"));
        }
        let mut h = Head { len: None, chunked: false, close: false };
        loop {
            line.clear();
            r.read_line(&mut line).await.map_err(|e| e.to_string())?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let k = k.trim().to_ascii_lowercase();
                if k == "content-length" {
                    h.len = Some(v.trim().parse().map_err(|_| "bad length")?);
                }
                if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
                    h.chunked = true;
                }
                if k == "connection" && v.trim().eq_ignore_ascii_case("close") {
                    h.close = true;
                }
            }
        }
        Ok(h)
    }

    async fn post(&mut self, body: &[u8]) -> Result<Vec<u8>, String> {
        let h = self.send(body).await?;
        let r = self.conn.as_mut().unwrap();
        let mut buf = vec![0u8; h.len.ok_or("no content-length")?];
        r.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
        if h.close {
            self.conn = None;
        }
        Ok(buf)
    }

    /// Feeds `n` body bytes to `sse` straight out of the reader's buffer.
    async fn feed(r: &mut BufReader<Async<TcpStream>>, mut left: usize, sse: &mut Sse) -> Result<(), String> {
        while left > 0 {
            let avail = r.fill_buf().await.map_err(|e| e.to_string())?;
            if avail.is_empty() {
                return Err("EOF inside the body".into());
            }
            let k = avail.len().min(left);
            sse.feed(&avail[..k])?;
            r.consume(k);
            left -= k;
        }
        Ok(())
    }

    async fn post_stream(&mut self, body: &[u8], sse: &mut Sse) -> Result<(), String> {
        let h = self.send(body).await?;
        let r = self.conn.as_mut().unwrap();
        if h.chunked {
            let mut line = String::new();
            loop {
                line.clear();
                r.read_line(&mut line).await.map_err(|e| e.to_string())?;
                let size = line.trim_end().split(';').next().unwrap_or("").trim();
                let n = usize::from_str_radix(size, 16).map_err(|_| format!("bad chunk size {line:?}"))?;
                if n == 0 {
                    loop {
                        line.clear();
                        let got = r.read_line(&mut line).await.map_err(|e| e.to_string())?;
                        if got == 0 || line.trim_end().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                Self::feed(r, n, sse).await?;
                let mut crlf = [0u8; 2];
                r.read_exact(&mut crlf).await.map_err(|e| e.to_string())?;
            }
        } else {
            Self::feed(r, h.len.ok_or("neither chunked nor a content-length")?, sse).await?;
        }
        if h.close {
            self.conn = None;
        }
        Ok(())
    }
}

async fn run_once(c: &mut Raw, b1: &[u8], b2: &[u8], t: &mut Tally) -> Result<String, String> {
    let r1: Value = serde_json::from_slice(&c.post(b1).await?).map_err(|e| e.to_string())?;
    let calls = r1["choices"][0]["message"]["tool_calls"].as_array().ok_or("no tool_calls")?;
    for call in calls {
        let f = &call["function"];
        exec_one(f["name"].as_str().unwrap_or(""), f["arguments"].as_str().unwrap_or("{}"), t)?;
    }
    let r2: Value = serde_json::from_slice(&c.post(b2).await?).map_err(|e| e.to_string())?;
    Ok(r2["choices"][0]["message"]["content"].as_str().unwrap_or("").to_string())
}

/// The same over `POST /v1/responses`, read as `bench/floor_responses` reads it.
async fn run_once_responses(c: &mut Raw, b1: &[u8], b2: &[u8], t: &mut Tally) -> Result<String, String> {
    let r1: Value = serde_json::from_slice(&c.post(b1).await?).map_err(|e| e.to_string())?;
    exec_response_calls(&r1, t)?;
    let r2: Value = serde_json::from_slice(&c.post(b2).await?).map_err(|e| e.to_string())?;
    response_text(&r2)
}

async fn run_once_stream(c: &mut Raw, b1: &[u8], b2: &[u8], t: &mut Tally, sse: &mut Sse) -> Result<String, String> {
    sse.reset();
    c.post_stream(b1, sse).await?;
    sse.end()?;
    if sse.calls.is_empty() {
        return Err("turn 1 streamed no tool calls".into());
    }
    for call in &sse.calls {
        if call.id.is_empty() {
            return Err("streamed tool call without id".into());
        }
        exec_one(&call.name, &call.args, t)?;
    }
    sse.reset();
    c.post_stream(b2, sse).await?;
    sse.end()?;
    Ok(std::mem::take(&mut sse.text))
}

struct Bench {
    conn: Raw,
    stream: bool,
    responses: bool,
    b1: Vec<u8>,
    b2: Vec<u8>,
    sse: Sse,
    tally: Tally,
    lat: Vec<f64>,
    requests: u64,
    text_ok: bool,
    err: Option<String>,
    last: String,
}

impl Bench {
    /// K requests inside one `block_on`, as the async runner runs a batch.
    fn batch(&mut self, k: usize, record: bool) -> bool {
        smol::block_on(async {
            let mut ok = true;
            for _ in 0..k {
                let s = Instant::now();
                let r = if self.stream {
                    run_once_stream(&mut self.conn, &self.b1, &self.b2, &mut self.tally, &mut self.sse).await
                } else if self.responses {
                    run_once_responses(&mut self.conn, &self.b1, &self.b2, &mut self.tally).await
                } else {
                    run_once(&mut self.conn, &self.b1, &self.b2, &mut self.tally).await
                };
                match r {
                    Ok(text) => {
                        let dt = s.elapsed().as_secs_f64() * 1e3;
                        self.requests += 1;
                        if !text.contains(FINAL) {
                            ok = false;
                            self.text_ok = false;
                        }
                        self.last = text;
                        if record {
                            self.lat.push(dt)
                        }
                    }
                    Err(e) => {
                        self.err = Some(e);
                        self.text_ok = false;
                        return false;
                    }
                }
            }
            ok
        })
    }

    fn summary(&self, name: &str, init_ms: f64) -> Value {
        let version = "smol 2 + serde_json 1.0.154";
        summary(name, version, &self.lat, &self.tally, self.requests, self.text_ok, &self.err, &self.last, init_ms)
    }
}

fn emit(v: Value) {
    let out = std::io::stdout();
    let mut o = out.lock();
    writeln!(o, "{v}").unwrap();
    o.flush().unwrap();
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut runs, mut warmup, mut serve, mut stream, mut responses) = (200usize, 20usize, false, false, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().expect("--runs N").parse().expect("--runs N"),
            "--warmup" => warmup = args.next().expect("--warmup N").parse().expect("--warmup N"),
            "--serve" => serve = true,
            "--stream" => stream = true,
            "--responses" => responses = true,
            _ => panic!("unknown arg {a}"),
        }
    }
    let mock = std::env::var("MOCK_URL").unwrap_or("http://127.0.0.1:8900".into());
    let hostport = mock.trim_end_matches('/').trim_start_matches("http://").to_string();
    let (host, port) = hostport.split_once(':').unwrap_or((&hostport, "80"));
    assert!(!(stream && responses), "--responses is for whole bodies only");
    let dir = if responses {
        std::env::var("FLOOR_RESPONSES_BODIES_DIR").expect("FLOOR_RESPONSES_BODIES_DIR")
    } else {
        std::env::var("FLOOR_BODIES_DIR").expect("FLOOR_BODIES_DIR")
    };
    let sfx = if stream { "-stream" } else { "" };
    let t0 = Instant::now();
    let mut bench = Bench {
        conn: Raw {
            host: host.into(),
            port: port.parse().expect("MOCK_URL port"),
            path: if responses { "/v1/responses" } else { "/v1/chat/completions" },
            conn: None,
        },
        stream,
        responses,
        b1: std::fs::read(format!("{dir}/body1{sfx}.json")).expect("body1 json"),
        b2: std::fs::read(format!("{dir}/body2{sfx}.json")).expect("body2 json"),
        sse: Sse::default(),
        tally: Tally::default(),
        lat: Vec::new(),
        requests: 0,
        text_ok: true,
        err: None,
        last: String::new(),
    };
    let init_ms = t0.elapsed().as_secs_f64() * 1e3;
    let name = format!("floor-rust-raw-smol{}{sfx}", if responses { "-responses" } else { "" });

    if !serve {
        bench.batch(warmup, false);
        bench.batch(runs, true);
        emit(bench.summary(&name, init_ms));
        return;
    }
    emit(serde_json::json!({"ready": true, "framework": name, "init_ms": init_ms}));
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("stdin");
        let f: Vec<&str> = line.split_whitespace().collect();
        match (f.first().copied(), f.get(1).and_then(|k| k.parse::<usize>().ok())) {
            (Some("warmup"), Some(k)) => {
                let ok = bench.batch(k, false);
                emit(serde_json::json!({"warmup": k, "ok": ok}));
            }
            (Some("run"), Some(k)) => {
                let before = bench.lat.len();
                let ok = bench.batch(k, true);
                emit(serde_json::json!({"lat": &bench.lat[before..], "ok": ok}));
            }
            (Some("quit"), _) => break,
            _ => {}
        }
    }
    emit(bench.summary(&name, init_ms));
}
