//! `nexus serve --config` as a process, under load, against the fake
//! provider over loopback: a thousand concurrent streams all complete on a
//! handful of threads, every upstream connection is reused by the next
//! wave, thousands of idle keep-alive connections cost no threads, the
//! access log is one JSON line per request with no secret in it, and a bad
//! configuration file is refused with a message naming what is wrong.
//!
//! Memory and thread counts come from `/proc/PID/status` of the gateway
//! process (required: this test runs on Linux). The peak RSS is printed.

mod cli_support;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cli_support::{nexus, run, scratch, KEY};
use nexus_tests::fake::{Fault, FaultKind, Script, Scripts, Style, Turn};
use serde_json::{json, Value};
use smol::io::{AsyncReadExt, AsyncWriteExt};

const CLIENT_KEY: &str = "client-key-7hQ2-not-for-logs";
const TEXT: &str = "Hello from the fake";
/// Executor threads the gateway is configured with.
const THREADS: usize = 2;

/// A running `nexus serve` and what it printed.
struct Gateway {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Gateway {
    fn start(config: &str) -> Gateway {
        Gateway::start_with(config, &[])
    }

    fn start_with(config: &str, extra_args: &[&str]) -> Gateway {
        let dir = scratch("serve");
        let path = dir.join("gateway.toml");
        std::fs::write(&path, config).unwrap();
        let mut cmd = nexus(&dir, None);
        cmd.args(["serve", "--config", path.to_str().unwrap()])
            .args(extra_args)
            .env("UPSTREAM_KEY", KEY)
            .env("CLIENT_KEY", CLIENT_KEY)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start nexus serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("the listening line");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        let addr = v["listening"].as_str().unwrap().parse().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Gateway { child, addr, stderr }
    }

    /// `(threads, VmRSS kB, VmHWM kB)` of the gateway process.
    fn status(&self) -> (u64, u64, u64) {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/PID/status (this test needs Linux)");
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} in /proc status"))
        };
        (field("Threads:"), field("VmRSS:"), field("VmHWM:"))
    }

    /// How many of the gateway's threads run its event loop, once `expected`
    /// have named themselves (a thread takes its name when it first runs,
    /// which may be after the listening line) or 10 s have passed.
    fn event_loop_threads(&self, expected: usize) -> usize {
        let count = || {
            std::fs::read_dir(format!("/proc/{}/task", self.child.id()))
                .expect("/proc/PID/task (this test needs Linux)")
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.starts_with("nexus-serve-"))
                .count()
        };
        let until = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let n = count();
            if n >= expected || std::time::Instant::now() > until {
                // A moment more: a thread beyond the expected ones would show by now.
                std::thread::sleep(Duration::from_millis(200));
                return count();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends SIGTERM and waits for a clean exit.
    fn stop(mut self) -> String {
        let _ = std::process::Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let status = self.child.wait().expect("wait for nexus serve");
        assert!(status.success(), "nexus serve exited with {status}");
        std::thread::sleep(Duration::from_millis(100));
        let text = self.stderr.lock().unwrap().clone();
        text
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(fake_base: &str, extra: &str) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
threads = {THREADS}
{extra}
[[upstreams]]
name = "anth"
style = "anthropic"
base_url = "{fake_base}"
api_key_env = "UPSTREAM_KEY"
[[keys]]
name = "load"
key_env = "CLIENT_KEY"
"#
    )
}

fn chat(model: &str) -> Vec<u8> {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": true}).to_string().into_bytes()
}

/// One streamed request on its own connection; the decoded text and whether it ended with `[DONE]`.
async fn stream_once(addr: SocketAddr, model: &str) -> Result<(String, bool), String> {
    let body = chat(model);
    let mut s = smol::net::TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {CLIENT_KEY}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.map_err(|e| format!("send: {e}"))?;
    s.write_all(&body).await.map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&raw);
    if !text.starts_with("HTTP/1.1 200") {
        return Err(format!("not a 200: {text}"));
    }
    let mut out = String::new();
    let mut done = false;
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).map_err(|e| format!("chunk {data}: {e}"))?;
        for c in v["choices"].as_array().into_iter().flatten() {
            out.push_str(c["delta"]["content"].as_str().unwrap_or_default());
        }
    }
    Ok((out, done))
}

/// Samples the gateway's thread count until `stop`; returns the maximum seen.
fn sample_threads(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut max = 0;
        while !stop.load(Ordering::SeqCst) {
            if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                let n = text
                    .lines()
                    .find_map(|l| l.strip_prefix("Threads:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                max = max.max(n);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        max
    })
}

/// `n` streams at once; panics unless every one completes with the whole text.
fn wave(addr: SocketAddr, n: usize, model: &str) {
    let ex = smol::Executor::new();
    let results = smol::block_on(ex.run(async {
        let tasks: Vec<_> = (0..n).map(|_| ex.spawn(stream_once(addr, model))).collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await);
        }
        out
    }));
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| match r {
            Ok((text, true)) if text == TEXT => None,
            Ok(other) => Some(format!("{other:?}")),
            Err(e) => Some(e),
        })
        .collect();
    assert!(failed.is_empty(), "{} of {n} streams failed; first: {:?}", failed.len(), failed.first());
}

#[test]
fn a_thousand_concurrent_streams_complete_on_a_few_threads_and_reuse_every_upstream_connection() {
    const STREAMS: usize = 1000;
    // Every stream pauses upstream for a second after its first event, so all
    // of a wave are open at once.
    let pause = Fault::new(FaultKind::StallMidStream { after_events: 1, ms: 1000 }).times(u32::MAX);
    let fake = nexus_tests::fake::FakeProvider::start(
        Scripts::new(KEY).model("m-long", Script::new(vec![Turn::text(TEXT).usage(3, 5).fault(pause)])),
    );
    let gw = Gateway::start(&config(&fake.base_url(Style::Anthropic), ""));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_threads(gw.child.id(), stop.clone());

    wave(gw.addr, STREAMS, "m-long");
    let first: std::collections::BTreeSet<u64> = fake.requests().iter().map(|r| r.connection).collect();
    fake.clear_requests();
    // The second wave finds the first wave's connections idle in the pool.
    wave(gw.addr, STREAMS, "m-long");
    let second: std::collections::BTreeSet<u64> = fake.requests().iter().map(|r| r.connection).collect();
    stop.store(true, Ordering::SeqCst);
    let max_threads = sampler.join().unwrap();
    let (_, rss, peak) = gw.status();
    println!(
        "{STREAMS} concurrent streams ×2: peak RSS {:.1} MB (now {:.1} MB), at most {max_threads} threads, \
         {} upstream connections for the first wave, {} new ones for the second",
        peak as f64 / 1024.0,
        rss as f64 / 1024.0,
        first.len(),
        second.difference(&first).count()
    );
    assert!(max_threads <= (THREADS + 8) as u64, "{max_threads} threads for {STREAMS} streams");
    assert!(
        second.is_subset(&first),
        "the second wave opened {} new upstream connections",
        second.difference(&first).count()
    );
    assert!(peak < 256 * 1024, "peak RSS {peak} kB");
    assert_eq!(fake.replies_cut_by_client(), 0);

    // One JSON access-log line per request, no secret anywhere in it.
    let log = gw.stop();
    assert!(!log.contains(KEY) && !log.contains(CLIENT_KEY), "a key in the access log");
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}")))
        .collect();
    assert_eq!(lines.len(), 2 * STREAMS, "one line per request");
    for l in &lines {
        assert_eq!(
            (l["status"].as_u64(), l["key"].as_str(), l["upstream"].as_str()),
            (Some(200), Some("load"), Some("anth")),
            "{l}"
        );
        assert_eq!(
            (l["tokens_in"].as_u64(), l["tokens_out"].as_u64(), l["outcome"].as_str()),
            (Some(3), Some(5), Some("complete")),
            "{l}"
        );
    }
}

/// The soft limit on open files of this process (the gateway inherits it).
fn open_file_limit() -> usize {
    let text = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    text.lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

#[test]
fn thousands_of_idle_keep_alive_connections_cost_no_threads() {
    let fake =
        nexus_tests::fake::FakeProvider::start(Scripts::new(KEY).model("m-text", Script::new(vec![Turn::text(TEXT)])));
    let gw = Gateway::start(&config(&fake.base_url(Style::Anthropic), "log_requests = false"));
    // Ten thousand where the descriptor limit allows (this process and the
    // gateway each hold one per connection).
    let n = 10_000.min(open_file_limit().saturating_sub(300));
    let addr = gw.addr;
    let ex = smol::Executor::new();
    let served = Arc::new(AtomicU64::new(0));
    let conns = smol::block_on(ex.run(async {
        let mut conns = Vec::new();
        for batch in (0..n).collect::<Vec<_>>().chunks(200) {
            let tasks: Vec<_> = batch
                .iter()
                .map(|_| {
                    let served = served.clone();
                    ex.spawn(async move {
                        let mut s = smol::net::TcpStream::connect(addr).await.expect("connect");
                        s.write_all(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n").await.expect("send");
                        let mut buf = vec![0u8; 512];
                        let mut got = Vec::new();
                        while !String::from_utf8_lossy(&got).contains("\"ok\"") {
                            let k = s.read(&mut buf).await.expect("read");
                            assert!(k > 0, "closed: {}", String::from_utf8_lossy(&got));
                            got.extend_from_slice(&buf[..k]);
                        }
                        assert!(got.starts_with(b"HTTP/1.1 200"));
                        served.fetch_add(1, Ordering::SeqCst);
                        s
                    })
                })
                .collect();
            for t in tasks {
                conns.push(t.await);
            }
        }
        conns
    }));
    assert_eq!(served.load(Ordering::SeqCst), n as u64);
    let (threads, rss, _) = gw.status();
    println!("{n} idle keep-alive connections: {threads} threads, RSS {:.1} MB", rss as f64 / 1024.0);
    assert!(threads <= (THREADS + 8) as u64, "{threads} threads for {n} idle connections");
    // Still serving while they idle.
    let r = smol::block_on(stream_once(addr, "m-text")).expect("a stream beside the idle connections");
    assert_eq!(r, (TEXT.to_string(), true));
    drop(conns);
    gw.stop();
}

#[test]
fn a_bad_configuration_file_is_refused_with_what_and_where() {
    let dir = scratch("serve-config");
    for (text, want) in [
        ("[[upstreams]]\nname = \"a\"\nstyle = \"anthropic\"\nbase_urll = \"http://x\"\n", "base_urll"),
        (
            "[[upstreams]]\nname = \"a\"\nstyle = \"anthropic\"\napi_key_env = \"NEXUS_TEST_UNSET_VAR\"\n",
            "NEXUS_TEST_UNSET_VAR, which is not set",
        ),
        (
            "[[upstreams]]\nname = \"a\"\nstyle = \"anthropic\"\n[[routes]]\nmodel = \"*\"\nupstream = \"b\"\n",
            "no upstream is named \"b\"",
        ),
    ] {
        let path = dir.join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let out = run(nexus(&dir, None).args(["serve", "--config", path.to_str().unwrap()]));
        assert_eq!(out.code, 2, "{text}: {}", out.stderr);
        assert!(out.stderr.contains("bad.toml") && out.stderr.contains(want), "{text}: {}", out.stderr);
    }
    let out = run(nexus(&dir, None).args(["serve", "--config", dir.join("missing.toml").to_str().unwrap()]));
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("missing.toml"), "{}", out.stderr);
    let out = run(nexus(&dir, None).args(["serve", "--config", "x.toml", "--upstream-style", "openai"]));
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--upstream-style"), "{}", out.stderr);
}

#[test]
fn the_readme_configuration_example_is_a_valid_configuration() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let block = readme
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(b, _)| b))
        .find(|b| b.contains("[[upstreams]]"))
        .expect("a configuration example in the README");
    let config = nexus_drive::serve::ServeConfig::from_toml(block, |var| Some(format!("value-of-{var}")))
        .unwrap_or_else(|e| panic!("the README example: {e}"));
    assert_eq!(config.upstreams.len(), 2);
    assert_eq!(config.routes.len(), 3);
    assert_eq!(config.keys[0].max_concurrent, Some(8));
    let smart = &config.routes[1];
    assert_eq!((smart.upstreams.len(), smart.upstream_models.len()), (2, 2), "{smart:?}");
    assert_eq!(smart.failover.policy.max_failovers, 1);
}

#[test]
fn the_access_log_names_the_upstream_that_answered_and_the_failovers() {
    let overloaded = Fault::new(FaultKind::Status { status: 529, retry_after: None, body: None }).times(u32::MAX);
    let fake = nexus_tests::fake::FakeProvider::start(
        Scripts::new(KEY)
            .model("m-529", Script::new(vec![Turn::text(TEXT).fault(overloaded)]))
            .model("m-text", Script::new(vec![Turn::text(TEXT).usage(3, 5)])),
    );
    let gw = Gateway::start(&format!(
        r#"
listen = "127.0.0.1:0"
threads = {THREADS}
[[upstreams]]
name = "anth"
style = "anthropic"
base_url = "{anth}"
api_key_env = "UPSTREAM_KEY"
[[upstreams]]
name = "oai"
style = "openai"
base_url = "{oai}"
api_key_env = "UPSTREAM_KEY"
[[routes]]
model = "smart"
upstreams = [{{ name = "anth", model = "m-529" }}, {{ name = "oai", model = "m-text" }}]
[[keys]]
name = "load"
key_env = "CLIENT_KEY"
"#,
        anth = fake.base_url(Style::Anthropic),
        oai = fake.base_url(Style::OpenAi),
    ));
    let (text, done) = smol::block_on(stream_once(gw.addr, "smart")).expect("an answer");
    assert_eq!((text.as_str(), done), (TEXT, true));
    let log = gw.stop();
    assert!(!log.contains(KEY) && !log.contains(CLIENT_KEY), "a key in the access log");
    assert!(!log.contains(&fake.addr().to_string()), "an upstream URL in the access log: {log}");
    let lines: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).expect("a JSON log line")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert_eq!((lines[0]["status"].as_u64(), lines[0]["upstream"].as_str()), (Some(200), Some("oai")), "{log}");
    assert_eq!(lines[0]["failovers"], json!([{"from": "anth", "to": "oai", "reason": "status_529"}]), "{log}");
}

#[test]
fn one_event_loop_thread_by_default_and_as_many_as_threads_asks() {
    // Nothing is sent upstream here: any base URL will do.
    let base = "http://127.0.0.1:9";
    let plain = config(base, "").replace(&format!("threads = {THREADS}\n"), "");
    assert!(!plain.contains("threads"), "{plain}");
    let gw = Gateway::start(&plain);
    assert_eq!(gw.event_loop_threads(1), 1, "the default");
    drop(gw);
    let gw = Gateway::start_with(&plain, &["--threads", "3"]);
    assert_eq!(gw.event_loop_threads(3), 3, "--threads 3");
    drop(gw);
    // The flag overrides the file.
    let gw = Gateway::start_with(&config(base, ""), &["--threads", "1"]);
    assert_eq!(gw.event_loop_threads(1), 1, "--threads 1 over the file's {THREADS}");
    drop(gw);
    let dir = scratch("serve-threads");
    let path = dir.join("gateway.toml");
    std::fs::write(&path, &plain).unwrap();
    let out = run(nexus(&dir, None).env("UPSTREAM_KEY", KEY).env("CLIENT_KEY", CLIENT_KEY).args([
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--threads",
        "many",
    ]));
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("--threads") && out.stderr.contains("many"),
        "names the flag and the value: {}",
        out.stderr
    );
}

/// SHA-256 of `filed-secret`, as a keys file holds it.
const FILED_SHA256: &str = "2880a3a2ed01b95e5152ec96543cc2f37c5f117776584ad1fce4a7995205af5c";

/// One whole Chat Completions request with `key`; its status.
fn whole_once(addr: SocketAddr, key: &str) -> u16 {
    use std::io::Write;
    let body = json!({"model": "m-text", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {key}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// The access log is written in batches (SPEC §14): a reader following it
/// still sees each request's line within the batch delay (100 ms) while the
/// gateway runs, every line whole, and a stop writes what is left.
#[test]
fn the_access_log_reaches_a_reader_while_the_gateway_runs() {
    let fake =
        nexus_tests::fake::FakeProvider::start(Scripts::new(KEY).model("m-text", Script::new(vec![Turn::text(TEXT)])));
    let gw = Gateway::start(&config(&fake.base_url(Style::Anthropic), ""));
    let lines = |gw: &Gateway| gw.stderr.lock().unwrap().lines().filter(|l| l.contains("\"path\"")).count();
    for sent in 1..=3 {
        assert_eq!(whole_once(gw.addr, CLIENT_KEY), 200);
        let asked = std::time::Instant::now();
        while lines(&gw) < sent {
            // Far more than the batch delay, for a loaded test machine.
            assert!(asked.elapsed() < Duration::from_secs(10), "no log line for request {sent} while running");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Requests in a burst are written together, and at the stop.
    for _ in 0..20 {
        assert_eq!(whole_once(gw.addr, CLIENT_KEY), 200);
    }
    let log = gw.stop();
    let parsed: Vec<Value> = log
        .lines()
        .filter(|l| l.contains("\"path\""))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a split log line ({e}): {l}")))
        .collect();
    assert_eq!(parsed.len(), 23, "{log}");
    assert!(parsed.iter().all(|l| l["status"] == 200), "{log}");
}

#[test]
fn sighup_reads_the_keys_file_again_and_each_request_logs_its_usage() {
    let fake = nexus_tests::fake::FakeProvider::start(
        Scripts::new(KEY).model("m-text", Script::new(vec![Turn::text(TEXT).usage(3, 5)])),
    );
    let dir = scratch("serve-keys");
    let keys = dir.join("keys.toml");
    let write = |extra: &str| {
        std::fs::write(&keys, format!("[[keys]]\nname = \"filed\"\nsha256 = \"{FILED_SHA256}\"\n{extra}\n")).unwrap()
    };
    write("rpm = 10");
    let extra = format!("keys_file = \"{}\"\n[[prices]]\nmodel = \"m-*\"\ninput = 1.0\noutput = 2.0\n", keys.display());
    let gw = Gateway::start(&config(&fake.base_url(Style::Anthropic), &extra));
    assert_eq!(whole_once(gw.addr, "filed-secret"), 200);
    write("disabled = true");
    let _ = std::process::Command::new("kill").arg("-HUP").arg(gw.child.id().to_string()).status();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !gw.stderr.lock().unwrap().contains("keys_reloaded") {
        assert!(std::time::Instant::now() < until, "no reload: {}", gw.stderr.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(whole_once(gw.addr, "filed-secret"), 401);
    assert_eq!(whole_once(gw.addr, CLIENT_KEY), 200, "the configuration's key is untouched");
    let log = gw.stop();
    assert!(!log.contains("filed-secret") && !log.contains(FILED_SHA256), "{log}");
    let lines: Vec<Value> =
        log.lines().filter(|l| l.contains("\"path\"")).map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(lines.len(), 3, "{log}");
    // Each event loop writes its own lines (SPEC §14): found by what they say, not by place.
    let first = lines.iter().find(|l| l["key"] == "filed" && l["status"] == 200).expect("the filed key's request");
    let refused = lines.iter().find(|l| l["status"] == 401).expect("the disabled key's request");
    assert_eq!((first["key"].as_str(), first["status"].as_u64()), (Some("filed"), Some(200)), "{first}");
    assert_eq!((first["route"].as_str(), first["upstream"].as_str()), (Some("*"), Some("anth")), "{first}");
    assert_eq!((first["tokens_in"].as_u64(), first["tokens_out"].as_u64()), (Some(3), Some(5)), "{first}");
    assert_eq!((first["tokens_cached"].as_u64(), first["tokens_reasoning"].as_u64()), (Some(0), Some(0)));
    assert!((first["cost_usd"].as_f64().unwrap() - 13e-6).abs() < 1e-12, "{first}");
    assert!(first["total_ms"].as_f64().is_some());
    assert_eq!(refused["limited_by"].as_str(), Some("disabled"), "{refused}");
}

#[path = "../../tests/tests/serve_support/redis.rs"]
#[allow(dead_code)]
mod redis_support;

#[test]
fn three_nexus_serve_processes_sharing_redis_hold_a_keys_rpm() {
    let Some(redis) = redis_support::RedisServer::start() else { return };
    let fake = nexus_tests::fake::FakeProvider::start(
        Scripts::new(KEY).model("m-text", Script::new(vec![Turn::text(TEXT).usage(3, 5)])),
    );
    let extra = format!("[limits]\nstore = \"{}\"", redis.url());
    let mut text = config(&fake.base_url(Style::Anthropic), &extra);
    text.push_str("rpm = 12\n");
    let gateways: Vec<Gateway> = (0..3).map(|_| Gateway::start(&text)).collect();
    let addrs: Vec<SocketAddr> = gateways.iter().map(|g| g.addr).collect();
    let handles: Vec<_> = (0..6)
        .map(|t| {
            let addrs = addrs.clone();
            std::thread::spawn(move || (0..6).map(|i| whole_once(addrs[(t + i) % 3], CLIENT_KEY)).collect::<Vec<u16>>())
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!((ok, statuses.len() - ok), (12, 24), "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "{statuses:?}");
    // Each refusal is in its instance's access log, naming the limit.
    let logs: String = gateways.into_iter().map(Gateway::stop).collect();
    assert_eq!(logs.lines().filter(|l| l.contains("\"limited_by\":\"rpm\"")).count(), 24, "{logs}");
}
