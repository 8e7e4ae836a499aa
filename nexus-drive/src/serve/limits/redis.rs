//! The shared store: counters, budgets and open circuits in Redis (or
//! Valkey), so every `nexus serve` instance behind a load balancer counts
//! the same limits.
//!
//! One thread per instance owns the connection (redis-rs's blocking
//! client): the smol server hands it jobs over a channel and awaits the
//! answer, so no server thread ever blocks on a socket. Every admission is
//! one Lua script — prune, check every scope, record in every scope — which
//! Redis runs atomically; the script reads Redis's own clock (`TIME`), so
//! the instances' clocks need not agree.
//!
//! When Redis cannot be reached the thread says so at once (no job waits
//! for a connection attempt), tries again every [`RECONNECT`], and the
//! limiter counts in the process meanwhile (or refuses, failing closed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::{Connection, Script};

use super::{Check, CheckKind, CircuitChange, Count, Exceeded, Outcome, SharedCircuits};

/// How long a connection attempt, a read or a write may take.
const IO_TIMEOUT: Duration = Duration::from_millis(500);
/// How often a lost connection is tried again.
const RECONNECT: Duration = Duration::from_millis(250);
/// How often the other instances' open circuits are read.
const CIRCUIT_POLL: Duration = Duration::from_millis(200);
/// Every key this gateway writes starts with it.
const PREFIX: &str = "nexus:";
const CIRCUITS_KEY: &str = "nexus:circuits";

/// Checks every scope, then records the admission in every scope — or in
/// none. KEYS: one per check. ARGV: member id, estimate, then per check
/// kind (`w` window, `b` budget), span (window ms, or ms until the period
/// ends), max requests (-1: none), max tokens (-1: none).
/// Returns: refused check (1-based, 0: admitted), which limit (1 requests,
/// 2 tokens, 3 budget), wait ms, Redis's now, then per check requests,
/// tokens and reset ms.
const ADMIT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id, est = ARGV[1], tonumber(ARGV[2])
local refused, what, wait = 0, 0, 0
local counts = {}
for i = 1, #KEYS do
  local k, b = KEYS[i], 2 + (i - 1) * 4
  local kind, span, maxr, maxt = ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local req, tok, reset, w, x = 0, 0, 0, 0, 0
  if kind == 'w' then
    local th, sk = k .. ':t', k .. ':s'
    local old = redis.call('ZRANGEBYSCORE', k, '-inf', now - span)
    if #old > 0 then
      local gone = 0
      for _, m in ipairs(old) do gone = gone + tonumber(redis.call('HGET', th, m) or '0') end
      redis.call('HDEL', th, unpack(old))
      redis.call('ZREMRANGEBYSCORE', k, '-inf', now - span)
      redis.call('DECRBY', sk, gone)
    end
    req = redis.call('ZCARD', k)
    tok = tonumber(redis.call('GET', sk) or '0')
    if req > 0 then
      local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
      reset = tonumber(first[2]) + span - now
    end
    if maxr >= 0 and req >= maxr then
      w, x = math.max(reset, 1), 1
    elseif maxt >= 0 and tok >= maxt then
      local all = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
      local left = tok
      w, x = span, 2
      for j = 1, #all, 2 do
        left = left - tonumber(redis.call('HGET', th, all[j]) or '0')
        if left < maxt then
          w = math.max(tonumber(all[j + 1]) + span - now, 1)
          break
        end
      end
    end
  else
    tok = tonumber(redis.call('GET', k) or '0')
    reset = span
    if tok >= maxt then w, x = math.max(span, 1), 3 end
  end
  if x > 0 and refused == 0 then refused, what, wait = i, x, w end
  counts[i] = {req, tok, reset}
end
if refused == 0 then
  for i = 1, #KEYS do
    local k, b = KEYS[i], 2 + (i - 1) * 4
    local kind, span = ARGV[b + 1], tonumber(ARGV[b + 2])
    if kind == 'w' then
      redis.call('ZADD', k, now, id)
      redis.call('HSET', k .. ':t', id, est)
      redis.call('INCRBY', k .. ':s', est)
      redis.call('PEXPIRE', k, span + 1000)
      redis.call('PEXPIRE', k .. ':t', span + 1000)
      redis.call('PEXPIRE', k .. ':s', span + 1000)
      if counts[i][1] == 0 then counts[i][3] = span end
    else
      redis.call('INCRBY', k, est)
      redis.call('PEXPIRE', k, span + 86400000)
    end
    counts[i][1] = counts[i][1] + 1
    counts[i][2] = counts[i][2] + est
  end
end
local out = {refused, what, wait, now}
for i = 1, #KEYS do
  out[#out + 1] = counts[i][1]
  out[#out + 1] = counts[i][2]
  out[#out + 1] = counts[i][3]
end
return out
"#;

/// Adds `delta` to member id's tokens in every scope that still holds it.
/// KEYS: one per check. ARGV: id, delta, then each check's kind.
const SETTLE: &str = r#"
local id, d = ARGV[1], tonumber(ARGV[2])
for i = 1, #KEYS do
  local k = KEYS[i]
  if ARGV[2 + i] == 'w' then
    if redis.call('HEXISTS', k .. ':t', id) == 1 then
      redis.call('HINCRBY', k .. ':t', id, d)
      redis.call('INCRBY', k .. ':s', d)
    end
  elseif redis.call('EXISTS', k) == 1 then
    redis.call('INCRBY', k, d)
  end
end
return 1
"#;

/// Opens (ARGV: key, ms, upstream) or closes (ARGV: key) a circuit for every instance.
const CIRCUIT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], (now + tonumber(ARGV[2])) .. ' ' .. ARGV[3])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 1
"#;

/// The open circuits: Redis's now, then key, ms left, upstream for each (ended ones are removed).
const OPEN_CIRCUITS: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local out = {now}
for i = 1, #all, 2 do
  local sp = string.find(all[i + 1], ' ')
  local untl = tonumber(string.sub(all[i + 1], 1, sp - 1))
  if untl <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = tostring(untl - now)
    out[#out + 1] = string.sub(all[i + 1], sp + 1)
  end
end
return out
"#;

enum Job {
    Admit { id: String, checks: Vec<Check>, estimate: u64, reply: smol::channel::Sender<Option<Outcome>> },
    Settle { id: String, checks: Vec<Check>, delta: i64 },
    Circuit(CircuitChange),
}

/// Whether the store answers, and the last error, shared with the thread.
#[derive(Default)]
struct Status {
    up: AtomicBool,
    error: Mutex<Option<String>>,
}

/// The instance's handle on the shared store.
pub(crate) struct RedisCounters {
    jobs: Sender<Job>,
    status: Arc<Status>,
    circuits: Arc<SharedCircuits>,
    /// Makes member ids unique across instances.
    instance: u64,
}

impl RedisCounters {
    /// Starts the store's thread for `url`; it connects in the background.
    pub(crate) fn start(url: &str, instance: u64) -> RedisCounters {
        let (jobs, rx) = channel();
        let status = Arc::new(Status::default());
        let open = Arc::new(Mutex::new(HashMap::new()));
        let publish = jobs.clone();
        let circuits = Arc::new(SharedCircuits::new(
            open.clone(),
            Box::new(move |change| {
                let _ = publish.send(Job::Circuit(change));
            }),
        ));
        let worker = Worker {
            link: Link {
                url: url.to_string(),
                client: redis::Client::open(url).map_err(|e| e.to_string()),
                conn: None,
                retry_at: Instant::now(),
                status: status.clone(),
            },
            open,
            admit: Script::new(ADMIT),
            settle: Script::new(SETTLE),
            circuit: Script::new(CIRCUIT),
            open_circuits: Script::new(OPEN_CIRCUITS),
        };
        let spawned = std::thread::Builder::new().name("nexus-limits".into()).spawn(move || worker.run(rx));
        if let Err(e) = spawned {
            *status.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("no store thread: {e}"));
        }
        RedisCounters { jobs, status, circuits, instance }
    }

    pub(crate) fn circuits(&self) -> Arc<SharedCircuits> {
        self.circuits.clone()
    }

    /// Whether the store answered last, and the last error.
    pub(crate) fn state(&self) -> (bool, Option<String>) {
        (self.status.up.load(Ordering::Relaxed), self.status.error.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// The store's outcome, or `None` when it cannot be reached.
    pub(crate) async fn admit(&self, id: u64, checks: &[Check], estimate: u64) -> Option<Outcome> {
        if !self.status.up.load(Ordering::Relaxed) && self.status.error.lock().map(|e| e.is_some()).unwrap_or(true) {
            // Known down: the thread's own loop reconnects; no request waits for it.
            return None;
        }
        let (reply, answer) = smol::channel::bounded(1);
        let id = format!("{:x}-{id:x}", self.instance);
        self.jobs.send(Job::Admit { id, checks: checks.to_vec(), estimate, reply }).ok()?;
        answer.recv().await.ok().flatten()
    }

    /// Sends a settlement; never waits.
    pub(crate) fn settle(&self, id: u64, checks: &[Check], delta: i64) {
        let id = format!("{:x}-{id:x}", self.instance);
        let _ = self.jobs.send(Job::Settle { id, checks: checks.to_vec(), delta });
    }
}

/// The connection to the store, and what the instance knows of its state.
struct Link {
    url: String,
    client: Result<redis::Client, String>,
    conn: Option<Connection>,
    retry_at: Instant,
    status: Arc<Status>,
}

struct Worker {
    link: Link,
    open: Arc<Mutex<HashMap<String, (u64, String)>>>,
    admit: Script,
    settle: Script,
    circuit: Script,
    open_circuits: Script,
}

impl Worker {
    fn run(mut self, jobs: Receiver<Job>) {
        let mut polled = Instant::now().checked_sub(CIRCUIT_POLL).unwrap_or_else(Instant::now);
        loop {
            let wait = CIRCUIT_POLL.saturating_sub(polled.elapsed());
            match jobs.recv_timeout(wait) {
                Ok(job) => self.job(job),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if polled.elapsed() >= CIRCUIT_POLL {
                polled = Instant::now();
                self.poll_circuits();
            }
        }
    }

    fn job(&mut self, job: Job) {
        match job {
            Job::Admit { id, checks, estimate, reply } => {
                let out = self.run_admit(&id, &checks, estimate);
                let _ = reply.try_send(out);
            }
            Job::Settle { id, checks, delta } => {
                let mut inv = self.settle.prepare_invoke();
                inv.arg(&id).arg(delta);
                for c in &checks {
                    inv.key(format!("{PREFIX}{}", c.scope)).arg(kind_arg(c.kind));
                }
                let Some(conn) = self.link.conn() else { return };
                if let Err(e) = inv.invoke::<i64>(conn) {
                    self.link.down(e.to_string());
                }
            }
            Job::Circuit(change) => {
                let mut inv = self.circuit.prepare_invoke();
                inv.key(CIRCUITS_KEY);
                match &change {
                    CircuitChange::Opened { key, upstream, for_ms } => inv.arg(key).arg(for_ms).arg(upstream),
                    CircuitChange::Closed { key } => inv.arg(key),
                };
                let Some(conn) = self.link.conn() else { return };
                if let Err(e) = inv.invoke::<i64>(conn) {
                    self.link.down(e.to_string());
                }
            }
        }
    }

    fn run_admit(&mut self, id: &str, checks: &[Check], estimate: u64) -> Option<Outcome> {
        let mut inv = self.admit.prepare_invoke();
        inv.arg(id).arg(estimate);
        for c in checks {
            inv.key(format!("{PREFIX}{}", c.scope));
            let (span, maxr, maxt) = match c.kind {
                CheckKind::Window { span_ms, requests, tokens } => (span_ms, requests, tokens),
                CheckKind::Budget { tokens, ends_in_ms } => (ends_in_ms, None, Some(tokens)),
            };
            let max = |m: Option<u64>| m.map_or(-1, |m| i64::try_from(m).unwrap_or(i64::MAX));
            inv.arg(kind_arg(c.kind)).arg(span).arg(max(maxr)).arg(max(maxt));
        }
        let conn = self.link.conn()?;
        let raw: Vec<i64> = match inv.invoke(conn) {
            Ok(raw) => raw,
            Err(e) => {
                self.link.down(e.to_string());
                return None;
            }
        };
        let n = |i: usize| raw.get(i).copied().unwrap_or(0).max(0) as u64;
        let refused = match (n(0), n(1)) {
            (0, _) => None,
            (i, 1) => Some((i as usize - 1, Exceeded::Requests)),
            (i, 2) => Some((i as usize - 1, Exceeded::Tokens)),
            (i, _) => Some((i as usize - 1, Exceeded::Budget)),
        };
        let counts = (0..checks.len())
            .map(|c| Count { requests: n(4 + 3 * c), tokens: n(5 + 3 * c), reset_ms: n(6 + 3 * c) })
            .collect();
        Some(Outcome { refused, retry_after_ms: n(2), counts, now_ms: n(3) })
    }

    /// Reads which circuits the instances have opened.
    fn poll_circuits(&mut self) {
        let script = &self.open_circuits;
        let mut inv = script.prepare_invoke();
        inv.key(CIRCUITS_KEY);
        let Some(conn) = self.link.conn() else { return };
        let raw: Vec<String> = match inv.invoke(conn) {
            Ok(raw) => raw,
            Err(e) => {
                self.link.down(e.to_string());
                return;
            }
        };
        let local_now = crate::engine::now_ms();
        let open = raw
            .get(1..)
            .unwrap_or_default()
            .chunks_exact(3)
            .filter_map(|c| {
                let left: u64 = c[1].parse().ok()?;
                Some((c[0].clone(), (local_now + left, c[2].clone())))
            })
            .collect();
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) = open;
    }
}

impl Link {
    /// The connection, connecting when it is time to try again.
    fn conn(&mut self) -> Option<&mut Connection> {
        if self.conn.is_none() && Instant::now() >= self.retry_at {
            let connected = self.client.clone().and_then(|c| {
                let conn = c.get_connection_with_timeout(IO_TIMEOUT).map_err(|e| e.to_string())?;
                conn.set_read_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
                conn.set_write_timeout(Some(IO_TIMEOUT)).map_err(|e| e.to_string())?;
                Ok(conn)
            });
            match connected {
                Ok(c) => {
                    if self.status.error.lock().map(|e| e.is_some()).unwrap_or(false) {
                        eprintln!("{}", serde_json::json!({"limits_store": "reconnected", "url": redact(&self.url)}));
                    }
                    self.conn = Some(c);
                    self.status.up.store(true, Ordering::Relaxed);
                    *self.status.error.lock().unwrap_or_else(|e| e.into_inner()) = None;
                }
                Err(e) => self.down(e),
            }
        }
        self.conn.as_mut()
    }

    /// The store failed: say so once, count locally, try again later.
    fn down(&mut self, why: String) {
        self.conn = None;
        self.retry_at = Instant::now() + RECONNECT;
        let was_up = self.status.up.swap(false, Ordering::Relaxed);
        let mut error = self.status.error.lock().unwrap_or_else(|e| e.into_inner());
        if was_up || error.is_none() {
            eprintln!(
                "{}",
                serde_json::json!({"limits_store": "unreachable", "url": redact(&self.url), "error": why, "counting": "local"})
            );
        }
        *error = Some(why);
    }
}

fn kind_arg(kind: CheckKind) -> &'static str {
    match kind {
        CheckKind::Window { .. } => "w",
        CheckKind::Budget { .. } => "b",
    }
}

/// A store URL without its password, for logs and `/ready`.
pub(crate) fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://***@{}", &url[at + 1..]),
        _ => url.to_string(),
    }
}
