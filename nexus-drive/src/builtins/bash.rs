//! `bash`: one shell command, in its own process group, with a timeout.
//!
//! The command runs as `SHELL -c COMMAND` in a new process group. At the
//! timeout (or when the run is cancelled) the whole group is killed, not
//! just the shell: killing only the shell would leave `sleep 1000 &` and
//! friends running, reparented, holding the output pipe open. When the shell
//! exits on its own the group's leftovers are killed too, so a background job
//! cannot outlive the call and escape the timeout.
//!
//! stdout and stderr share one pipe, so the output interleaves as it did on
//! the terminal. A reader thread keeps the head and the tail of it (the end
//! is where errors usually are) within the output cap and counts the rest.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nexus_proto::ToolResult;
use serde::Deserialize;
use serde_json::{json, Value};

use super::paths::Jail;
use super::{lenient_u64, Settings};
use crate::tool::{ToolContext, ToolError, ToolOutcome};

/// How long the output may take to drain after the group is gone: a process
/// that left the group (`setsid`) may hold the pipe open forever.
const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// `bash` arguments.
#[derive(Deserialize)]
pub(crate) struct BashArgs {
    command: String,
    /// Milliseconds.
    #[serde(default, deserialize_with = "lenient_u64")]
    timeout: Option<u64>,
    #[serde(default)]
    workdir: Option<String>,
}

fn fail<T>(msg: impl std::fmt::Display) -> Result<T, ToolError> {
    Err(ToolError::msg(format!("bash: {msg}")))
}

/// How the command ended.
enum End {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
}

pub(crate) fn run(s: &Settings, args: BashArgs, ctx: &ToolContext) -> Result<ToolOutcome<Value>, ToolError> {
    if args.command.trim().is_empty() {
        return fail("command is required");
    }
    let jail = Jail::open(&s.root).or_else(fail)?;
    let dir = match args.workdir.as_deref().filter(|w| !w.is_empty()) {
        Some(w) => jail.resolve(w).or_else(fail)?,
        None => jail.root().to_path_buf(),
    };
    if !dir.is_dir() {
        return fail(format!("workdir {} is not a directory", jail.show(&dir)));
    }
    let timeout = match args.timeout {
        Some(ms) if ms > 0 => Duration::from_millis(ms),
        _ => s.bash_timeout,
    }
    .min(s.bash_max_timeout);

    let (reader, writer) = io::pipe().or_else(|e| fail(format!("cannot create a pipe: {e}")))?;
    let mut cmd = Command::new(&s.shell);
    cmd.arg("-c").arg(&args.command).current_dir(&dir).stdin(Stdio::null());
    cmd.stdout(writer.try_clone().or_else(|e| fail(format!("cannot create a pipe: {e}")))?);
    cmd.stderr(writer);
    for var in &s.scrub_env {
        cmd.env_remove(var);
    }
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let spawned = cmd.spawn();
    // The Command holds this process's copies of the pipe's write end; until
    // they are closed the reader never sees the end of the output.
    drop(cmd);
    let mut child = spawned.or_else(|e| fail(format!("cannot run {}: {e}", s.shell.display())))?;
    let group = child.id();

    let capture = Arc::new(Mutex::new(Capture::new(s.output_cap)));
    let (eof_tx, eof_rx) = mpsc::channel();
    {
        let capture = capture.clone();
        thread::spawn(move || {
            pump(reader, &capture);
            let _ = eof_tx.send(());
        });
    }

    let started = Instant::now();
    let end = wait(&mut child, started + timeout, ctx);
    // Whatever happened, nothing of the group survives the call.
    kill_group(s, group, &mut child);
    let status = match end {
        End::Exited(status) => Some(status),
        End::TimedOut | End::Cancelled => child.wait().ok(),
    };
    let _ = eof_rx.recv_timeout(DRAIN_GRACE);
    let (output, truncated) = capture.lock().map(|c| c.render()).unwrap_or_else(|p| p.into_inner().render());

    let mut meta = json!({"timedOut": matches!(end, End::TimedOut), "truncated": truncated});
    let result = match end {
        End::TimedOut => ToolResult::error(noted(
            &output,
            &format!(
                "[timed out after {} ms; the command and every process it started were killed]",
                timeout.as_millis()
            ),
        )),
        End::Cancelled => ToolResult::error(noted(&output, "[cancelled; the command was killed]")),
        End::Exited(status) => match status.code() {
            Some(0) => {
                meta["exitCode"] = json!(0);
                ToolResult::ok(if output.is_empty() { "(no output)".to_string() } else { output })
            }
            Some(code) => {
                meta["exitCode"] = json!(code);
                ToolResult::error(noted(&output, &format!("[exit code {code}]")))
            }
            None => ToolResult::error(noted(&output, &format!("[killed by {}]", describe_signal(status)))),
        },
    };
    if let (End::TimedOut | End::Cancelled, Some(code)) = (&end, status.and_then(|s| s.code())) {
        meta["exitCode"] = json!(code);
    }
    Ok(ToolOutcome::Result(ToolResult { metadata: Some(meta), ..result }))
}

/// The output with a note on its own line after it.
fn noted(output: &str, note: &str) -> String {
    if output.is_empty() {
        note.to_string()
    } else {
        format!("{output}\n{note}")
    }
}

/// Waits for the shell to exit, the deadline, or a cancel, whichever comes first.
fn wait(child: &mut Child, deadline: Instant, ctx: &ToolContext) -> End {
    // Polling, with a short sleep that grows: a quick command answers in a
    // millisecond, a long one costs a wake-up every 50 ms at most.
    let mut nap = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return End::Exited(status),
            Ok(None) => {}
            // The child cannot be waited for: treat it as gone at its deadline.
            Err(_) => return End::TimedOut,
        }
        let now = Instant::now();
        if now >= deadline {
            return End::TimedOut;
        }
        if ctx.is_cancelled() {
            return End::Cancelled;
        }
        thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(50));
    }
}

/// Kills every process in the group. The group's id is the shell's pid; while
/// the shell is unreaped (the timeout path) or any member lives, the id
/// cannot be reused, so the signal reaches only what the command started.
fn kill_group(s: &Settings, group: u32, child: &mut Child) {
    #[cfg(unix)]
    {
        // The shell's own `kill` builtin, which takes a negative pid (a group);
        // std has no killpg and this crate has no unsafe code to call it.
        let killed = Command::new(&s.shell)
            .arg("-c")
            .arg("kill -s KILL -- \"-$1\" 2>/dev/null; :")
            .arg("kill")
            .arg(group.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if killed.is_ok() {
            return;
        }
    }
    let _ = s;
    let _ = group;
    let _ = child.kill();
}

#[cfg(unix)]
fn describe_signal(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(sig) => format!("signal {sig}"),
        None => "an unknown cause".into(),
    }
}

#[cfg(not(unix))]
fn describe_signal(_status: ExitStatus) -> String {
    "an unknown cause".into()
}

/// Copies the pipe into the capture until every writer is gone.
fn pump(mut reader: io::PipeReader, capture: &Mutex<Capture>) {
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => match capture.lock() {
                Ok(mut c) => c.push(&buf[..n]),
                Err(_) => return,
            },
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The head and the tail of a stream, each at most half the cap.
struct Capture {
    half: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Capture {
    fn new(cap: usize) -> Capture {
        let half = (cap / 2).max(1);
        Capture { half, head: Vec::new(), tail: VecDeque::new(), total: 0 }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.half - self.head.len();
        if room > 0 {
            let n = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.len() >= self.half {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.half..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.half);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// The text, with a note where the middle was cut; and whether it was.
    fn render(&self) -> (String, bool) {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let head = String::from_utf8_lossy(&self.head);
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail);
        if kept == self.total {
            return (format!("{head}{tail}").trim_end_matches('\n').to_string(), false);
        }
        let cut = self.total - kept;
        let text = format!("{head}\n[output cut: {cut} bytes in the middle not shown]\n{tail}");
        (text.trim_end_matches('\n').to_string(), true)
    }
}

#[cfg(test)]
mod tests {
    use super::Capture;

    #[test]
    fn capture_keeps_head_and_tail_and_counts_the_rest() {
        let mut c = Capture::new(8);
        c.push(b"abcdefghij");
        c.push(b"klmnop");
        let (text, cut) = c.render();
        assert!(cut);
        assert!(text.starts_with("abcd\n[output cut: 8 bytes"), "{text}");
        assert!(text.ends_with("mnop"), "{text}");
        let mut small = Capture::new(64);
        small.push(b"hello\n");
        assert_eq!(small.render(), ("hello".to_string(), false));
    }
}
