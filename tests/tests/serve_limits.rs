//! `nexus serve` keys at fleet scale, over loopback against the fake
//! provider and a real `redis-server`: three gateway instances sharing one
//! Redis hold a key's requests and tokens per minute and its budget
//! together; a circuit opened by one routes the others away; Redis killed
//! mid-load leaves every request answered (counted locally, said in
//! `/ready` and `/metrics`) and shared counting resumes when it is back.
//! Every surface refuses in its own dialect with the headers its SDK reads,
//! and the official openai and anthropic clients wait out `Retry-After`.

mod serve_support;
use serve_support::redis::RedisServer;
use serve_support::{metric, parse_answer, Answer};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nexus_drive::serve::{serve, ServeConfig, Server};
use nexus_tests::fake::{FakeProvider, Fault, FaultKind, Script, Scripts, Style, Turn};
use serde_json::json;

const UPSTREAM_KEY: &str = "sk-upstream-secret";
/// Input and output tokens of every scripted answer.
const USAGE: (u64, u64) = (11, 7);

fn fake() -> FakeProvider {
    let text = || Turn::text("Hello from the fake").usage(USAGE.0, USAGE.1);
    let overloaded = Fault::new(FaultKind::Status { status: 529, retry_after: None, body: None }).times(100_000);
    FakeProvider::start(
        Scripts::new(UPSTREAM_KEY)
            .model("m-text", Script::new(vec![text()]))
            .model("m-529", Script::new(vec![text().fault(overloaded)])),
    )
}

/// A gateway on `fake` with these `[limits]` lines and `[[keys]]` tables
/// (each key's secret is its name followed by `-secret`); lines of `keys`
/// before its first table are top-level fields.
fn gateway(fake: &FakeProvider, limits: &str, keys: &str) -> Server {
    let (top, keys) = match keys.find("\n[") {
        Some(i) if !keys.starts_with('[') => keys.split_at(i),
        _ => ("", keys),
    };
    let text = format!(
        r#"
listen = "127.0.0.1:0"
log_requests = false
{top}
[limits]
{limits}
[timeouts]
probe_interval = 0.2
[breaker]
failures = 2
cooldown = 30
[[upstreams]]
name = "oai"
style = "openai"
base_url = "{oai}"
api_key_env = "UPSTREAM_KEY"
[[upstreams]]
name = "anth"
style = "anthropic"
base_url = "{anth}"
api_key_env = "UPSTREAM_KEY"
[[routes]]
model = "failing"
upstreams = [{{ name = "anth", model = "m-529" }}, {{ name = "oai", model = "m-text" }}]
[[routes]]
model = "*"
upstream = "oai"
upstream_model = "m-text"
{keys}
"#,
        oai = fake.base_url(Style::OpenAi),
        anth = fake.base_url(Style::Anthropic),
    );
    serve(ServeConfig::from_toml(&text, env).expect("the configuration reads")).expect("the gateway starts")
}

/// The environment the configurations read: the upstream's key, and
/// `<NAME>_KEY` = `<name>-secret` for each client key.
fn env(v: &str) -> Option<String> {
    match v {
        "UPSTREAM_KEY" => Some(UPSTREAM_KEY.to_string()),
        v => v.strip_suffix("_KEY").map(|name| format!("{}-secret", name.to_ascii_lowercase())),
    }
}

fn key(name: &str, limits: &str) -> String {
    format!("[[keys]]\nname = \"{name}\"\nkey_env = \"{}_KEY\"\n{limits}\n", name.to_ascii_uppercase())
}

fn call(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    serve_support::call(addr, method, path, headers, body.as_bytes())
}

/// A Chat Completions request with key `name` (its estimate: the body's
/// bytes / 4 plus 7, more than the 18 tokens the answer reports).
fn chat(addr: SocketAddr, name: &str) -> Answer {
    let auth = format!("Bearer {name}-secret");
    let body = json!({"model": "m", "max_tokens": 7, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    call(addr, "POST", "/v1/chat/completions", &[("authorization", &auth)], &body)
}

fn get(addr: SocketAddr, path: &str) -> Answer {
    call(addr, "GET", path, &[], "")
}

/// `jobs` requests of key `name` from `threads` clients at once, spread
/// over `gateways` in turn; the statuses.
fn load(gateways: &[SocketAddr], name: &str, threads: usize, jobs: usize) -> Vec<u16> {
    let next = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (next, gateways, name) = (next.clone(), gateways.to_vec(), name.to_string());
            std::thread::spawn(move || {
                let mut statuses = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= jobs {
                        return statuses;
                    }
                    statuses.push(chat(gateways[i % gateways.len()], &name).status);
                }
            })
        })
        .collect();
    handles.into_iter().flat_map(|h| h.join().expect("a load thread")).collect()
}

fn three(fake: &FakeProvider, redis: &RedisServer, keys: &str) -> Vec<Server> {
    let limits = format!("store = \"{}\"", redis.url());
    (0..3).map(|_| gateway(fake, &limits, keys)).collect()
}

fn addrs(servers: &[Server]) -> Vec<SocketAddr> {
    servers.iter().map(Server::local_addr).collect()
}

#[test]
fn three_instances_sharing_redis_hold_a_keys_requests_per_minute() {
    let Some(redis) = RedisServer::start() else { return };
    let fake = fake();
    let servers = three(&fake, &redis, &key("team", "rpm = 20"));
    let statuses = load(&addrs(&servers), "team", 12, 60);
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((ok, limited), (20, 40), "{statuses:?}");
    assert_eq!(fake.requests_for("m-text").len(), 20, "only admitted requests reached the upstream");
    let a = chat(servers[1].local_addr(), "team");
    assert_eq!(a.status, 429);
    let wait: u64 = a.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert_eq!(a.header("x-ratelimit-limit-requests"), Some("20"));
    assert_eq!(a.header("x-ratelimit-remaining-requests"), Some("0"));
    let rejected: f64 = servers
        .iter()
        .map(|s| {
            metric(
                &get(s.local_addr(), "/metrics").text(),
                "nexus_gateway_key_rejections_total{key=\"team\",limit=\"rpm\"}",
            )
        })
        .sum();
    assert_eq!(rejected, 41.0);
}

#[test]
fn three_instances_sharing_redis_hold_tokens_per_minute_within_one_answer() {
    let Some(redis) = RedisServer::start() else { return };
    let fake = fake();
    let limit = 300;
    let servers = three(&fake, &redis, &key("tok", &format!("tpm = {limit}")));
    let gateways = addrs(&servers);
    let mut ok = load(&gateways, "tok", 12, 60).iter().filter(|s| **s == 200).count();
    // Then one at a time until refused: every reservation has been settled
    // to the reported usage, so what is left is the limit's own slack.
    for i in 0.. {
        std::thread::sleep(Duration::from_millis(30));
        match chat(gateways[i % 3], "tok").status {
            200 => ok += 1,
            429 => break,
            s => panic!("status {s}"),
        }
    }
    let per_answer = USAGE.0 + USAGE.1;
    let used = ok as u64 * per_answer;
    assert!(used >= limit && used <= limit + per_answer, "{ok} answers, {used} tokens for a limit of {limit}");
    assert_eq!(fake.requests_for("m-text").len(), ok);
    let m = get(gateways[0], "/metrics").text();
    assert!(metric(&m, "nexus_gateway_key_tokens_total{key=\"tok\",kind=\"output\"}") > 0.0, "{m}");
}

#[test]
fn a_daily_budget_holds_across_instances_and_names_itself_in_each_dialect() {
    let Some(redis) = RedisServer::start() else { return };
    let fake = fake();
    let servers = three(&fake, &redis, &key("budget", "daily_tokens = 50"));
    let gateways = addrs(&servers);
    let mut ok = 0;
    let refused = loop {
        let a = chat(gateways[ok % 3], "budget");
        if a.status != 200 {
            break a;
        }
        ok += 1;
        assert!(ok < 10, "the budget never ran out");
        std::thread::sleep(Duration::from_millis(30));
    };
    // 18 tokens each: the third answer crosses 50.
    assert_eq!(ok, 3);
    assert_eq!(refused.status, 429);
    let e = refused.json();
    assert_eq!(e["error"]["code"], "insufficient_quota", "{e}");
    assert!(e["error"]["message"].as_str().unwrap().contains("daily_tokens"), "{e}");
    // Anthropic's own status for spending that is not allowed.
    let body = json!({"model": "m", "max_tokens": 7, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let a = call(
        gateways[2],
        "POST",
        "/v1/messages",
        &[("x-api-key", "budget-secret"), ("anthropic-version", "2023-06-01")],
        &body,
    );
    assert_eq!(a.status, 402);
    assert_eq!(a.json()["error"]["type"], "billing_error");
    assert!(a.header("retry-after").is_some());
}

#[test]
fn a_circuit_opened_by_one_instance_routes_the_others_away() {
    let Some(redis) = RedisServer::start() else { return };
    let fake = fake();
    let servers = three(&fake, &redis, &key("team", ""));
    let gateways = addrs(&servers);
    let ask = |at: SocketAddr| {
        let body = json!({"model": "failing", "messages": [{"role": "user", "content": "hi"}]}).to_string();
        call(at, "POST", "/v1/chat/completions", &[("authorization", "Bearer team-secret")], &body)
    };
    // Two failures open the circuit at the first instance (each failed over to oai).
    for _ in 0..2 {
        let a = ask(gateways[0]);
        assert_eq!((a.status, a.header("x-nexus-upstream")), (200, Some("oai")));
    }
    let tried = fake.requests_for("m-529").len();
    assert_eq!(tried, 2);
    std::thread::sleep(Duration::from_millis(600));
    for at in &gateways[1..] {
        let a = ask(*at);
        assert_eq!((a.status, a.header("x-nexus-upstream")), (200, Some("oai")));
        let ready = get(*at, "/ready").json();
        assert_eq!(ready["upstreams"]["anth"]["circuit"], "open", "{ready}");
    }
    assert_eq!(fake.requests_for("m-529").len(), tried, "the other instances never tried the open circuit");
}

#[test]
fn redis_killed_mid_load_leaves_every_request_answered_and_shared_counting_resumes() {
    let Some(mut redis) = RedisServer::start() else { return };
    let fake = fake();
    let keys = format!("{}{}", key("busy", "rpm = 100000"), key("after", "rpm = 3"));
    let servers = three(&fake, &redis, &keys);
    let gateways = addrs(&servers);
    let stop = Arc::new(AtomicUsize::new(0));
    let loaders: Vec<_> = (0..6)
        .map(|t| {
            let (gateways, stop) = (gateways.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut statuses = Vec::new();
                while stop.load(Ordering::SeqCst) == 0 {
                    statuses.push(chat(gateways[(t + statuses.len()) % 3], "busy").status);
                }
                statuses
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    redis.kill();
    std::thread::sleep(Duration::from_millis(800));
    stop.store(1, Ordering::SeqCst);
    let statuses: Vec<u16> = loaders.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert!(statuses.len() > 20, "{}", statuses.len());
    assert!(statuses.iter().all(|s| *s == 200), "fail-open answers every request: {statuses:?}");
    let ready = get(gateways[0], "/ready").json();
    assert_eq!(ready["limit_store"]["status"], "unreachable", "{ready}");
    assert_eq!(ready["limit_store"]["counting"], "local");
    assert_eq!(metric(&get(gateways[1], "/metrics").text(), "nexus_gateway_limit_store_up"), 0.0);

    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    for at in &gateways {
        // A request (or the circuit poll) finds it again within moments.
        while get(*at, "/ready").json()["limit_store"]["status"] != "ok" {
            assert!(Instant::now() < deadline, "the gateway did not reconnect");
            let _ = chat(*at, "busy");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let statuses = load(&gateways, "after", 3, 9);
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 3, "shared again: {statuses:?}");
}

/// One surface's refusal: the first request of a key with `rpm = 1` passes,
/// the second is refused; returns both answers.
fn refused_twice(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> (Answer, Answer) {
    let first = call(addr, "POST", path, headers, body);
    assert_eq!(first.status, 200, "{}", first.text());
    (first, call(addr, "POST", path, headers, body))
}

#[test]
fn every_surface_refuses_in_its_own_dialect_with_the_headers_its_sdk_reads() {
    let fake = fake();
    let keys: String = ["chat", "resp", "anth", "gem"].iter().map(|k| key(k, "rpm = 1")).collect();
    let server = gateway(&fake, "", &keys);
    let at = server.local_addr();
    let msgs = json!([{"role": "user", "content": "hi"}]);

    let (ok, no) = refused_twice(
        at,
        "/v1/chat/completions",
        &[("authorization", "Bearer chat-secret")],
        &json!({"model": "m", "messages": msgs}).to_string(),
    );
    assert_eq!(ok.header("x-ratelimit-remaining-requests"), Some("0"), "success answers carry the headers too");
    assert_eq!(no.status, 429);
    assert_eq!(no.json()["error"]["code"], "rate_limit_exceeded");
    assert_eq!(no.json()["error"]["type"], "requests");
    assert!(no.header("retry-after").is_some() && no.header("retry-after-ms").is_some());
    assert_eq!(no.header("x-ratelimit-limit-requests"), Some("1"));
    assert!(no.header("x-ratelimit-reset-requests").is_some_and(|v| v.ends_with('s')));
    assert!(no.header("anthropic-ratelimit-requests-limit").is_none());

    let (_, no) = refused_twice(
        at,
        "/v1/responses",
        &[("authorization", "Bearer resp-secret")],
        &json!({"model": "m", "input": "hi"}).to_string(),
    );
    assert_eq!(no.status, 429);
    assert_eq!(no.json()["error"]["code"], "rate_limit_exceeded", "{}", no.text());
    assert_eq!(no.header("x-ratelimit-remaining-requests"), Some("0"));

    let anth = [("x-api-key", "anth-secret"), ("anthropic-version", "2023-06-01")];
    let (_, no) =
        refused_twice(at, "/v1/messages", &anth, &json!({"model": "m", "max_tokens": 7, "messages": msgs}).to_string());
    assert_eq!(no.status, 429);
    assert_eq!(no.json()["type"], "error");
    assert_eq!(no.json()["error"]["type"], "rate_limit_error");
    assert_eq!(no.header("anthropic-ratelimit-requests-limit"), Some("1"));
    assert_eq!(no.header("anthropic-ratelimit-requests-remaining"), Some("0"));
    let reset = no.header("anthropic-ratelimit-requests-reset").expect("reset time");
    assert!(reset.len() == 20 && reset.ends_with('Z') && reset.as_bytes()[10] == b'T', "{reset}");
    assert!(no.header("x-ratelimit-limit-requests").is_none());
    assert!(no.header("retry-after").is_some());

    let gem = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).to_string();
    let (_, no) = refused_twice(at, "/v1beta/models/m:generateContent", &[("x-goog-api-key", "gem-secret")], &gem);
    assert_eq!(no.status, 429);
    assert_eq!(no.json()["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(no.json()["error"]["code"], 429);
    let wait = no.header("retry-after").expect("Retry-After");
    let detail = &no.json()["error"]["details"][0];
    assert_eq!(detail["@type"], "type.googleapis.com/google.rpc.RetryInfo");
    assert_eq!(detail["retryDelay"], format!("{wait}s"), "the body says the same wait");
}

/// The official Python client `sdk` (openai or anthropic) through the
/// gateway with one retry: the second call is refused with `Retry-After`,
/// the client waits it out and its retry succeeds.
fn sdk_honours_retry_after(sdk: &str) {
    let Some(py) = nexus_tests::oracle::python() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI: the {sdk} client needs the oracle venv (NEXUS_ORACLE_PY)"
        );
        println!("skipped: no oracle interpreter (set NEXUS_ORACLE_PY)");
        return;
    };
    let fake = fake();
    // 30 per minute over a 2 s window: one request per 2 s.
    let server = gateway(&fake, "window = 2", &key("sdk", "rpm = 30"));
    let base = format!("http://{}", server.local_addr());
    let script = match sdk {
        "openai" => format!(
            r#"
import time, openai
c = openai.OpenAI(base_url="{base}/v1", api_key="sdk-secret", max_retries=1)
ask = lambda: c.chat.completions.create(model="m", messages=[{{"role": "user", "content": "hi"}}])
ask(); t = time.monotonic(); r = ask(); print(time.monotonic() - t, r.choices[0].message.content)
"#
        ),
        _ => format!(
            r#"
import time, anthropic
c = anthropic.Anthropic(base_url="{base}", api_key="sdk-secret", max_retries=1)
ask = lambda: c.messages.create(model="m", max_tokens=7, messages=[{{"role": "user", "content": "hi"}}])
ask(); t = time.monotonic(); r = ask(); print(time.monotonic() - t, r.content[0].text)
"#
        ),
    };
    let out = std::process::Command::new(&py).args(["-c", &script]).output().expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{sdk}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let (waited, text) = stdout.trim().split_once(' ').expect("seconds and text");
    let waited: f64 = waited.parse().unwrap();
    assert!(waited >= 1.0, "{sdk} retried after {waited} s, before the window had room");
    assert_eq!(text, "Hello from the fake");
    let m = get(server.local_addr(), "/metrics").text();
    assert_eq!(metric(&m, "nexus_gateway_key_rejections_total{key=\"sdk\",limit=\"rpm\"}"), 1.0, "{m}");
    assert_eq!(fake.requests_for("m-text").len(), 2);
}

#[test]
fn the_openai_python_client_waits_out_retry_after() {
    sdk_honours_retry_after("openai");
}

#[test]
fn the_anthropic_python_client_waits_out_retry_after() {
    sdk_honours_retry_after("anthropic");
}

/// SHA-256 of `filed-secret`, as a keys file holds it.
const FILED_SHA256: &str = "2880a3a2ed01b95e5152ec96543cc2f37c5f117776584ad1fce4a7995205af5c";

/// Sends one keep-alive request on `s` and reads its answer (`buf` keeps what follows).
fn on_connection(s: &mut TcpStream, buf: &mut Vec<u8>, auth: &str) -> Answer {
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {auth}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut piece = [0u8; 16 * 1024];
    loop {
        if let Some((answer, used)) = parse_answer(buf) {
            buf.drain(..used);
            return answer;
        }
        let n = s.read(&mut piece).expect("read an answer");
        assert!(n > 0, "the gateway closed the connection");
        buf.extend_from_slice(&piece[..n]);
    }
}

#[test]
fn a_reloaded_keys_file_disables_a_key_on_a_connection_that_stays_open() {
    let fake = fake();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("keys.toml");
    let write = |extra: &str| {
        std::fs::write(&file, format!("[[keys]]\nname = \"filed\"\nsha256 = \"{FILED_SHA256}\"\n{extra}\n")).unwrap()
    };
    write("rpm = 100");
    let server = gateway(&fake, "", &format!("keys_file = \"{}\"\n{}", file.display(), key("conf", "")));
    let keys = server.keys_handle();
    let mut s = TcpStream::connect(server.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let a = on_connection(&mut s, &mut buf, "filed-secret");
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(a.header("x-ratelimit-limit-requests"), Some("100"));

    write("disabled = true");
    assert_eq!(keys.reload().expect("the file reads"), 2, "the configuration's key and the file's");
    let a = on_connection(&mut s, &mut buf, "filed-secret");
    assert_eq!(a.status, 401);
    assert!(a.json()["error"]["message"].as_str().unwrap().contains("disabled"), "{}", a.text());
    assert_eq!(on_connection(&mut s, &mut buf, "conf-secret").status, 200, "the configuration's key stays");

    std::fs::write(&file, "[[keys]]\nname = \"filed\"\nsha256 = \"not hex\"\n").unwrap();
    let e = keys.reload().expect_err("a wrong file");
    assert!(e.to_string().contains("sha256"), "{e}");
    assert_eq!(on_connection(&mut s, &mut buf, "filed-secret").status, 401, "the keys in effect stay");

    write("");
    keys.reload().unwrap();
    assert_eq!(on_connection(&mut s, &mut buf, "filed-secret").status, 200, "enabled again, same connection");
    let m = get(server.local_addr(), "/metrics").text();
    assert_eq!(metric(&m, "nexus_gateway_key_rejections_total{key=\"filed\",limit=\"disabled\"}"), 2.0, "{m}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_keys_model_limits_count_apart_and_cost_is_counted_per_key() {
    let fake = fake();
    let keys = format!("{}[[keys.models]]\nmodel = \"cheap-*\"\nrpm = 1\n", key("mixed", "rpm = 100"));
    let prices = "[[prices]]\nmodel = \"cheap-*\"\ninput = 1.0\noutput = 2.0\n";
    let server = gateway(&fake, "", &format!("{prices}{keys}"));
    let at = server.local_addr();
    let ask = |model: &str| {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        call(at, "POST", "/v1/chat/completions", &[("authorization", "Bearer mixed-secret")], &body)
    };
    assert_eq!(ask("cheap-a").status, 200);
    let no = ask("cheap-b");
    assert_eq!(no.status, 429);
    assert!(no.json()["error"]["message"].as_str().unwrap().contains("`cheap-*`"), "{}", no.text());
    assert_eq!(ask("other").status, 200, "other models count only against the key's own limit");
    let m = get(at, "/metrics").text();
    let cost = metric(&m, "nexus_gateway_key_cost_usd_total{key=\"mixed\",model=\"cheap-a\"}");
    let want = (USAGE.0 as f64 * 1.0 + USAGE.1 as f64 * 2.0) / 1e6;
    assert!((cost - want).abs() < 1e-12, "{cost} != {want}\n{m}");
    assert_eq!(metric(&m, "nexus_gateway_key_tokens_total{key=\"mixed\",kind=\"input\"}"), 2.0 * USAGE.0 as f64);
    assert_eq!(metric(&m, "nexus_gateway_key_requests_total{key=\"mixed\",status=\"429\"}"), 1.0);
}

#[test]
fn a_streamed_answer_settles_its_reservation_to_the_reported_usage() {
    let fake = fake();
    let server = gateway(&fake, "", &key("stream", "tpm = 1000"));
    let at = server.local_addr();
    let auth = [("authorization", "Bearer stream-secret")];
    let streamed = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let a = call(at, "POST", "/v1/chat/completions", &auth, &streamed);
    assert_eq!(a.status, 200);
    assert!(a.text().contains("[DONE]"), "{}", a.text());
    std::thread::sleep(Duration::from_millis(50));
    let whole = json!({"model": "m", "max_tokens": 7, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let b = call(at, "POST", "/v1/chat/completions", &auth, &whole);
    // What the stream reported, then this request's own estimate (bytes / 4 + max_tokens).
    let estimate = (whole.len() as u64).div_ceil(4) + 7;
    let left = 1000 - (USAGE.0 + USAGE.1) - estimate;
    assert_eq!(b.header("x-ratelimit-remaining-tokens"), Some(left.to_string().as_str()));
    assert_eq!(b.header("x-ratelimit-limit-tokens"), Some("1000"));
}

#[test]
fn failing_closed_refuses_limited_requests_while_redis_is_away() {
    let Some(mut redis) = RedisServer::start() else { return };
    let fake = fake();
    let limits = format!("store = \"{}\"\non_store_failure = \"closed\"", redis.url());
    let server = gateway(&fake, &limits, &format!("{}{}", key("limited", "rpm = 100"), key("free", "")));
    let at = server.local_addr();
    assert_eq!(chat(at, "limited").status, 200);
    redis.kill();
    let deadline = Instant::now() + Duration::from_secs(5);
    let refused = loop {
        let a = chat(at, "limited");
        if a.status != 200 {
            break a;
        }
        assert!(Instant::now() < deadline, "never refused");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(refused.status, 503);
    assert!(refused.header("retry-after").is_some());
    assert_eq!(chat(at, "free").status, 200, "a key without limits does not need the store");
    let ready = get(at, "/ready");
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(ready.json()["limit_store"]["status"], "unreachable");
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while chat(at, "limited").status != 200 {
        assert!(Instant::now() < deadline, "never admitted again");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_routes_limit_counts_every_keys_requests_on_it() {
    let fake = fake();
    let text = format!(
        r#"
listen = "127.0.0.1:0"
log_requests = false
[[upstreams]]
name = "oai"
style = "openai"
base_url = "{oai}"
api_key_env = "UPSTREAM_KEY"
[[routes]]
model = "capped"
upstream = "oai"
upstream_model = "m-text"
rpm = 2
[[routes]]
model = "*"
upstream = "oai"
upstream_model = "m-text"
{a}{b}"#,
        oai = fake.base_url(Style::OpenAi),
        a = key("one", ""),
        b = key("two", ""),
    );
    let server = serve(ServeConfig::from_toml(&text, env).unwrap()).unwrap();
    let ask = |name: &str, model: &str| {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string();
        call(
            server.local_addr(),
            "POST",
            "/v1/chat/completions",
            &[("authorization", &format!("Bearer {name}-secret"))],
            &body,
        )
    };
    assert_eq!(ask("one", "capped").status, 200);
    assert_eq!(ask("two", "capped").status, 200);
    let no = ask("one", "capped");
    assert_eq!(no.status, 429);
    assert!(no.json()["error"]["message"].as_str().unwrap().contains("route `capped`"), "{}", no.text());
    assert_eq!(ask("two", "other").status, 200, "another route is not capped");
}
