//! The stdio transport: a server as a child process in its own process
//! group, one JSON-RPC message per line.
//!
//! * stdout carries only protocol lines (split by the core's
//!   [`LineDecoder`]): each becomes an [`Inbound::Message`] for the session
//!   to judge; a line over the size cap becomes an [`Inbound::Malformed`]
//!   (the rest of it is skipped), so one bad line is an error for that
//!   server and the stream goes on.
//! * stderr goes into a bounded ring buffer ([`StderrRing`]) whose tail is
//!   attached to the server's errors; it never reaches the host's terminal.
//! * Writing happens on a writer thread fed by a channel, reading on reader
//!   threads feeding another: [`StdioLink::send`] never blocks on a full
//!   pipe, and both drivers wait on the same channel (the blocking one with
//!   [`StdioLink::recv_timeout`], the async one with
//!   [`StdioLink::recv`]`.await`).
//! * Shutdown: close stdin, wait, SIGTERM the group, wait, SIGKILL the group.
//!   The group is signalled even after its leader exited, so a grandchild the
//!   server left behind never outlives it, and the child is always reaped.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nexus_proto::mcp::LineDecoder;
use rustix::process::{kill_process_group, Pid, Signal};

use super::config::SAFE_ENV;
use super::{Inbound, McpError, ServerExit};

/// How much of a server's stderr is kept (its tail).
pub const STDERR_RING_BYTES: usize = 16 * 1024;
/// How much of the stderr tail an error message carries.
pub const STDERR_TAIL_IN_ERRORS: usize = 2 * 1024;

/// The last bytes a server wrote to stderr.
#[derive(Debug, Default)]
pub struct StderrRing {
    bytes: Mutex<VecDeque<u8>>,
    cap: usize,
}

impl StderrRing {
    /// A ring keeping the last `cap` bytes.
    pub fn new(cap: usize) -> StderrRing {
        StderrRing { bytes: Mutex::new(VecDeque::with_capacity(cap.min(4096))), cap }
    }

    fn push(&self, chunk: &[u8]) {
        let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let chunk = chunk.get(chunk.len().saturating_sub(self.cap)..).unwrap_or_default();
        let overflow = (b.len() + chunk.len()).saturating_sub(self.cap);
        let drop_n = overflow.min(b.len());
        b.drain(..drop_n);
        b.extend(chunk);
    }

    /// The last `max` bytes, as text, starting at a line start when one is
    /// in reach (so the tail does not begin mid-line).
    pub fn tail(&self, max: usize) -> String {
        let b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let start = b.len().saturating_sub(max);
        let bytes: Vec<u8> = b.iter().skip(start).copied().collect();
        let from = if start > 0 { bytes.iter().position(|&c| c == b'\n').map_or(0, |p| p + 1) } else { 0 };
        String::from_utf8_lossy(bytes.get(from..).unwrap_or_default()).trim_end().to_string()
    }

    /// How many bytes are held.
    pub fn len(&self) -> usize {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the stdio transport is told.
#[derive(Debug, Clone)]
pub struct StdioOptions {
    /// A stdout line longer than this is refused (the default is 16 MiB).
    pub max_message_bytes: usize,
    /// How long shutdown waits after closing stdin, and again after SIGTERM.
    pub grace: Duration,
}

impl Default for StdioOptions {
    fn default() -> Self {
        StdioOptions { max_message_bytes: 16 * 1024 * 1024, grace: Duration::from_secs(2) }
    }
}

struct ChildState {
    child: Child,
    status: Option<ExitStatus>,
}

/// One running stdio server.
pub struct StdioLink {
    name: String,
    pgid: Pid,
    pid: u32,
    child: Arc<Mutex<ChildState>>,
    to_child: Mutex<Option<async_channel::Sender<Vec<u8>>>>,
    inbox: async_channel::Receiver<Inbound>,
    stderr: Arc<StderrRing>,
    grace: Duration,
    closed: Mutex<bool>,
}

impl std::fmt::Debug for StdioLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioLink").field("name", &self.name).field("pid", &self.pid).finish_non_exhaustive()
    }
}

impl StdioLink {
    /// Starts `command` as server `name`, in its own process group, with the
    /// safe base environment plus `env`.
    pub fn spawn(
        name: &str,
        command: &str,
        args: &[String],
        env: &std::collections::BTreeMap<String, String>,
        cwd: Option<&std::path::Path>,
        options: &StdioOptions,
    ) -> Result<StdioLink, McpError> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(command);
        cmd.args(args).env_clear();
        for key in SAFE_ENV {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        cmd.envs(env);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| McpError::Spawn { server: name.to_string(), message: format!("{command}: {e}") })?;
        let pid = child.id();
        let pgid = Pid::from_child(&child);
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr_pipe = child.stderr.take();
        let child = Arc::new(Mutex::new(ChildState { child, status: None }));
        let stderr = Arc::new(StderrRing::new(STDERR_RING_BYTES));
        let (in_tx, inbox) = async_channel::unbounded();
        let (out_tx, out_rx) = async_channel::unbounded::<Vec<u8>>();

        // Closed (and so readable as "done") when the stderr reader ends.
        let (stderr_tx, stderr_done) = async_channel::bounded::<()>(1);
        if let Some(mut pipe) = stderr_pipe {
            let ring = stderr.clone();
            spawn_named(format!("mcp-{name}-stderr"), move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = pipe.read(&mut buf) {
                    ring.push(buf.get(..n).unwrap_or_default());
                }
                drop(stderr_tx);
            })?;
        }
        if let Some(stdin) = stdin {
            spawn_named(format!("mcp-{name}-stdin"), move || write_lines(stdin, out_rx))?;
        }
        if let Some(stdout) = stdout {
            let (child, ring, max, tx) = (child.clone(), stderr.clone(), options.max_message_bytes, in_tx);
            spawn_named(format!("mcp-{name}-stdout"), move || {
                read_lines(stdout, max, &tx);
                // stdout is closed: the server exited (or is about to).
                let status = reap(&child, pgid, Duration::from_secs(5));
                // What it wrote last may still be in the stderr pipe: let the
                // reader drain it (its group is gone, so the pipe ends soon).
                let _ = recv_deadline(&stderr_done, Instant::now() + Duration::from_secs(2));
                let _ = tx.send_blocking(Inbound::Exited(ServerExit {
                    status: status.map(describe).unwrap_or_else(|| "closed its stdout".into()),
                    stderr_tail: ring.tail(STDERR_TAIL_IN_ERRORS),
                }));
            })?;
        }
        Ok(StdioLink {
            name: name.to_string(),
            pgid,
            pid,
            child,
            to_child: Mutex::new(Some(out_tx)),
            inbox,
            stderr,
            grace: options.grace,
            closed: Mutex::new(false),
        })
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Queues one message (a JSON-RPC message without a newline in it).
    pub fn send(&self, message: &[u8]) -> Result<(), McpError> {
        if message.contains(&b'\n') {
            return Err(McpError::Protocol {
                server: self.name.clone(),
                message: "a stdio message may not contain a newline".into(),
            });
        }
        let guard = self.to_child.lock().unwrap_or_else(|e| e.into_inner());
        let tx = guard.as_ref().ok_or_else(|| self.gone("its stdin is closed"))?;
        tx.try_send(message.to_vec()).map_err(|_| self.gone("its stdin is closed"))
    }

    /// The next inbound item, waiting at most `timeout` (`None` on timeout).
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Inbound> {
        recv_deadline(&self.inbox, Instant::now() + timeout)
    }

    /// The next inbound item (async). After [`Inbound::Exited`] the channel
    /// is closed and this returns `None`.
    pub async fn recv(&self) -> Option<Inbound> {
        self.inbox.recv().await.ok()
    }

    /// The inbound channel itself (for a `select` over several servers).
    pub fn inbox(&self) -> &async_channel::Receiver<Inbound> {
        &self.inbox
    }

    /// The server's recent stderr.
    pub fn stderr_tail(&self, max: usize) -> String {
        self.stderr.tail(max)
    }

    /// Whether the child has exited (reaped).
    pub fn has_exited(&self) -> bool {
        let mut st = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if st.status.is_none() {
            st.status = st.child.try_wait().ok().flatten();
        }
        st.status.is_some()
    }

    /// Shuts the server down: close stdin, wait `grace`, SIGTERM the group,
    /// wait `grace`, SIGKILL the group; the child is reaped and no member of
    /// its group is left running. Returns how it ended. Idempotent.
    pub fn shutdown(&self) -> String {
        {
            let mut closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
            if *closed {
                let st = self.child.lock().unwrap_or_else(|e| e.into_inner());
                return st.status.map(describe).unwrap_or_else(|| "stopped".into());
            }
            *closed = true;
        }
        // Closing stdin: dropping the sender ends the writer thread, which drops the pipe.
        self.to_child.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut status = reap(&self.child, self.pgid, self.grace);
        if status.is_none() {
            let _ = kill_process_group(self.pgid, Signal::TERM);
            status = reap(&self.child, self.pgid, self.grace);
        }
        if status.is_none() {
            let _ = kill_process_group(self.pgid, Signal::KILL);
            let mut st = self.child.lock().unwrap_or_else(|e| e.into_inner());
            st.status = st.child.wait().ok();
            status = st.status;
        }
        status.map(describe).unwrap_or_else(|| "stopped".into())
    }

    fn gone(&self, why: &str) -> McpError {
        McpError::Closed {
            server: self.name.clone(),
            message: why.to_string(),
            stderr_tail: self.stderr.tail(STDERR_TAIL_IN_ERRORS),
        }
    }
}

impl Drop for StdioLink {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Waits on a channel until `deadline` (blocking).
pub(crate) fn recv_deadline<T>(rx: &async_channel::Receiver<T>, deadline: Instant) -> Option<T> {
    // async-channel has no blocking timeout; a timer raced against the
    // receive does it (async-io drives timers from its own thread, so any
    // executor, `block_on` included, can wait on one).
    futures_lite::future::block_on(futures_lite::future::or(async { rx.recv().await.ok() }, async {
        smol::Timer::at(deadline).await;
        None
    }))
}

fn spawn_named(name: String, f: impl FnOnce() + Send + 'static) -> Result<(), McpError> {
    thread::Builder::new()
        .name(name)
        .spawn(f)
        .map(|_| ())
        .map_err(|e| McpError::Spawn { server: String::new(), message: format!("thread: {e}") })
}

fn write_lines(mut stdin: ChildStdin, rx: async_channel::Receiver<Vec<u8>>) {
    while let Ok(mut line) = rx.recv_blocking() {
        line.push(b'\n');
        if stdin.write_all(&line).and_then(|_| stdin.flush()).is_err() {
            // The server closed its stdin: the stdout reader reports the exit.
            return;
        }
    }
}

/// Splits stdout into lines under the size cap (the protocol core's line
/// decoder); an over-long line is reported once, and the stream goes on.
fn read_lines(mut stdout: impl Read, max: usize, tx: &async_channel::Sender<Inbound>) {
    let mut decoder = LineDecoder::new(max);
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = Vec::new();
    loop {
        let n = match stdout.read(&mut buf) {
            Ok(0) | Err(_) => {
                decoder.finish(&mut lines);
                0
            }
            Ok(n) => {
                decoder.feed(buf.get(..n).unwrap_or_default(), &mut lines);
                n
            }
        };
        for line in lines.drain(..) {
            let item = match line {
                Ok(message) => Inbound::Message(message),
                Err(e) => Inbound::Malformed(e.to_string()),
            };
            if tx.send_blocking(item).is_err() {
                return;
            }
        }
        if n == 0 {
            return;
        }
    }
}

/// Waits up to `wait` for the child to exit; once it has, signals its group
/// so no grandchild outlives it (a server's children are its business, and
/// they die with it).
fn reap(child: &Mutex<ChildState>, pgid: Pid, wait: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + wait;
    loop {
        {
            let mut st = child.lock().unwrap_or_else(|e| e.into_inner());
            if st.status.is_none() {
                st.status = st.child.try_wait().ok().flatten();
            }
            if let Some(s) = st.status {
                // The leader is gone; anything left in its group is an orphan.
                let _ = kill_process_group(pgid, Signal::KILL);
                return Some(s);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}
