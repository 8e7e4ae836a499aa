//! A readable trace of a run: each model turn, each tool call with its
//! arguments and result, suspensions, answers, and the final text. Used by
//! `nexus demo` and `nexus replay`.

use std::io::Write;
use std::path::PathBuf;

use nexus_drive::cassette::Observer;
use nexus_proto::{
    Answer, HttpRequest, Outcome, Request, Role, Run, StopReason, StreamEvent, ToolInvocation, ToolReply,
};

use crate::{out, out_inline};

/// Prints a trace to standard output.
#[derive(Default)]
pub struct Trace {
    /// Where a stored state is written when the recorded run stopped
    /// suspended (`None`: handed over in memory).
    pub state_dir: Option<PathBuf>,
    /// Show each request line.
    pub show_requests: bool,
    runs: usize,
    handoffs: usize,
    /// The label of the text being printed without its line end (`model:`
    /// or `thinking:`), so streamed pieces continue one line.
    open: Option<&'static str>,
    /// The last turn's stop reason, for the JSON result.
    pub last_stop: Option<StopReason>,
}

impl Trace {
    /// A trace that writes stored states to `state_dir` (when given) and
    /// shows request lines when `show_requests` is set.
    pub fn new(state_dir: Option<PathBuf>, show_requests: bool) -> Trace {
        Trace { state_dir, show_requests, ..Trace::default() }
    }

    fn close_text(&mut self) {
        if self.open.take().is_some() {
            out("");
        }
    }

    /// Streamed pieces of one kind continue the same line.
    fn inline(&mut self, label: &'static str, text: &str) {
        if self.open != Some(label) {
            self.close_text();
            out_inline(&format!("  {label} "));
            self.open = Some(label);
        }
        out_inline(&text.replace('\n', "\n            "));
    }

    fn line(&mut self, s: &str) {
        self.close_text();
        out(s);
    }
}

/// `s` cut to `max` characters, on one line.
pub fn short(s: &str, max: usize) -> String {
    let one_line = s.replace('\n', " ⏎ ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let cut: String = one_line.chars().take(max).collect();
    format!("{cut}…")
}

impl Observer for Trace {
    fn run_started(&mut self, run: &Run, resumed: bool) {
        if resumed {
            self.line(&format!(
                "  ▶ run {} resumed from its saved state in a new process ({} messages so far)",
                run.id(),
                run.transcript().len()
            ));
            return;
        }
        self.runs += 1;
        let c = run.config();
        self.line("");
        self.line(&format!(
            "━━ run {} · {} · model {} · {} tool(s): {}",
            self.runs,
            c.style.name(),
            c.model,
            run.tools().len(),
            run.tools().iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
        ));
        if let Some(system) = &c.system {
            self.line(&format!("  system:   {}", short(system, 200)));
        }
        if let Some(user) = run.transcript().iter().rev().find(|m| m.role == Role::User) {
            self.line(&format!("  user:     {}", short(&user.text(), 400)));
        }
    }

    fn request(&mut self, req: &HttpRequest) {
        if self.show_requests {
            self.line(&format!(
                "  → {} {} ({} bytes, identical to the recording)",
                req.method,
                req.url,
                req.body.len()
            ));
        }
    }

    fn event(&mut self, event: &StreamEvent) {
        match event {
            StreamEvent::TurnStarted { turn } => self.line(&format!("  [turn {turn}]")),
            StreamEvent::TextDelta { text } => self.inline("model:   ", text),
            StreamEvent::ReasoningDelta { text } => self.inline("thinking:", text),
            StreamEvent::ToolCallFinished { call } => {
                self.line(&format!("  ⚙ call   {}({})  [{}]", call.name, short(&call.arguments, 200), call.id));
            }
            StreamEvent::TurnFinished { turn, stop } => {
                self.last_stop = Some(*stop);
                self.close_text();
                let word =
                    serde_json::to_value(stop).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
                self.line(&format!("    turn {turn} ended: {word}"));
            }
            StreamEvent::ToolResult { name, result, .. } => {
                let mark = if result.is_error { "✗ error " } else { "← result" };
                self.line(&format!("  {mark} {name}: {}", short(&result.output, 300)));
            }
            StreamEvent::Pending { request } => {
                self.line(&format!("  ⏸ {} request {}: {}", request.kind, request.id, short(&request.prompt, 300)));
            }
            StreamEvent::Compaction { turn, tokens_before, tokens_after, turns_replaced, .. } => self.line(&format!(
                "  [compacted before turn {turn}: ~{tokens_before} → ~{tokens_after} tokens, {turns_replaced} turns summarized]"
            )),
            StreamEvent::Retrying { attempt, delay_ms, reason } => {
                self.line(&format!("  ↻ retry {attempt} after {delay_ms} ms: {}", short(reason, 200)));
            }
            _ => {}
        }
    }

    fn tools(&mut self, calls: &[ToolInvocation]) {
        for c in calls.iter().filter(|c| c.answer.is_some()) {
            self.line(&format!("  ⚙ re-run {} with the answer to its request  [{}]", c.name, c.call_id));
        }
    }

    fn tool_reply(&mut self, _call: &ToolInvocation, _reply: &ToolReply) {}

    fn suspended(&mut self, requests: &[Request]) {
        self.line(&format!("  ⏸ run suspended: waiting for {} answer(s)", requests.len()));
    }

    fn answer(&mut self, answer: &Answer) {
        let verdict = if answer.ok {
            "ok".to_string()
        } else {
            format!("declined ({})", answer.reason.as_deref().unwrap_or("declined"))
        };
        let data = answer
            .data
            .as_ref()
            .map(|d| format!(" {}", short(&serde_json::to_string(d).unwrap_or_default(), 200)))
            .unwrap_or_default();
        self.line(&format!("  ✔ answer {}: {verdict}{data}", answer.id));
    }

    fn handoff(&mut self, state: &[u8]) -> Result<Vec<u8>, String> {
        let Some(dir) = &self.state_dir else {
            return Ok(state.to_vec());
        };
        self.handoffs += 1;
        let path = dir.join(format!("state-{}.json", self.handoffs));
        std::fs::write(&path, state).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        self.line(&format!(
            "  ⏹ the process stops here (exit code 3): state saved to {} ({} bytes, no API key in it)",
            path.display(),
            state.len()
        ));
        let back = std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        self.line(&format!("  … later, a new process reads {} and feeds the answer", path.display()));
        Ok(back)
    }

    fn finished(&mut self, run: &Run, outcome: &Outcome) {
        let u = run.usage();
        let how = match outcome {
            Outcome::Done => "done".to_string(),
            Outcome::Incomplete { limit } => format!("incomplete ({limit})"),
            Outcome::Failed { error } => format!("failed: {error}"),
        };
        self.line(&format!(
            "  ■ {how} after {} turn(s), {} tool call(s); tokens: {} in, {} out",
            run.turns(),
            run.tool_calls().len(),
            u.prompt_tokens,
            u.completion_tokens
        ));
        if matches!(outcome, Outcome::Done) {
            self.line(&format!("  final:    {}", run.final_text()));
        }
        let _ = std::io::stdout().flush();
    }
}
