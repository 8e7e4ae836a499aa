//! Metrics: one event per model exchange, tool execution and run, given to
//! the host's `on_metric` callback; [`Metrics`] aggregates them into
//! counters and histograms and renders the Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// One measurement.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Metric {
    /// A model exchange ended.
    Llm {
        /// The model asked for.
        model: String,
        /// `ok` when it produced a model turn, else `error`.
        status: &'static str,
        /// The HTTP status, when a response came.
        http_status: Option<u16>,
        /// From send to the end of the body.
        latency: Duration,
        /// 0 for the first attempt, then the retry number.
        attempt: u32,
        /// Prompt tokens of this call (0 on error).
        prompt_tokens: u64,
        /// Completion tokens of this call (0 on error).
        completion_tokens: u64,
    },
    /// A tool execution ended or suspended.
    Tool {
        /// The tool name.
        name: String,
        /// How long it ran.
        latency: Duration,
        /// Whether the result is an error result.
        is_error: bool,
        /// Whether it suspended (a suspension is not an error).
        pending: bool,
    },
    /// A model call moved on to another upstream.
    Failover {
        /// The upstream left, as `style model`.
        from: String,
        /// The upstream moved to, as `style model`.
        to: String,
        /// Why: the failure, or `circuit open`.
        reason: String,
    },
    /// A run ended, or stopped pending.
    Run {
        /// The model asked for.
        model: String,
        /// `done`, `pending`, `incomplete` or `failed`.
        status: &'static str,
        /// Model calls made.
        turns: u32,
        /// Tool calls with recorded results.
        tool_calls: usize,
        /// Total tokens.
        total_tokens: u64,
        /// Wall time of this drive (a resumed run counts from the resume).
        latency: Duration,
        /// Why it failed.
        error: Option<String>,
    },
}

const BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// Bucket bounds for sub-millisecond latencies (the gateway's own overhead
/// sits there), up to a minute.
#[cfg(feature = "serve")]
pub(crate) const FINE_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

#[derive(Debug, Clone)]
pub(crate) struct Histogram {
    buckets: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::with_buckets(BUCKETS)
    }
}

impl Histogram {
    /// An empty histogram over these upper bounds (ascending; `+Inf` is implied).
    pub(crate) fn with_buckets(buckets: &'static [f64]) -> Histogram {
        Histogram { buckets, counts: Vec::new(), sum: 0.0, count: 0 }
    }

    pub(crate) fn observe(&mut self, secs: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; self.buckets.len()];
        }
        for (i, b) in self.buckets.iter().enumerate() {
            if secs <= *b {
                if let Some(c) = self.counts.get_mut(i) {
                    *c += 1;
                }
            }
        }
        self.sum += secs;
        self.count += 1;
    }
}

#[derive(Debug, Default)]
struct Registry {
    llm_requests: BTreeMap<String, u64>,
    llm_tokens: BTreeMap<String, u64>,
    llm_duration: BTreeMap<String, Histogram>,
    tool_calls: BTreeMap<String, u64>,
    tool_duration: BTreeMap<String, Histogram>,
    runs: BTreeMap<String, u64>,
    run_errors: BTreeMap<String, u64>,
    failovers: BTreeMap<String, u64>,
}

/// Counters and histograms over [`Metric`]s, rendered as Prometheus text.
///
/// ```
/// use std::sync::Arc;
/// let metrics = Arc::new(nexus_drive::Metrics::new());
/// let sink = metrics.clone();
/// let on_metric = move |m: &nexus_drive::Metric| sink.observe(m);
/// # let _ = on_metric;
/// assert!(metrics.render().contains("# TYPE nexus_llm_requests_total counter"));
/// ```
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Registry>,
}

impl Metrics {
    /// Empty counters.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Counts one measurement.
    pub fn observe(&self, m: &Metric) {
        let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match m {
            Metric::Llm { model, status, latency, prompt_tokens, completion_tokens, .. } => {
                *r.llm_requests.entry(labels(&[("model", model), ("status", status)])).or_default() += 1;
                if *status == "ok" {
                    *r.llm_tokens.entry(labels(&[("type", "prompt")])).or_default() += prompt_tokens;
                    *r.llm_tokens.entry(labels(&[("type", "completion")])).or_default() += completion_tokens;
                }
                r.llm_duration.entry(labels(&[("model", model)])).or_default().observe(latency.as_secs_f64());
            }
            Metric::Tool { name, latency, is_error, pending } => {
                let key = labels(&[
                    ("tool", name),
                    ("is_error", if *is_error { "true" } else { "false" }),
                    ("pending", if *pending { "true" } else { "false" }),
                ]);
                *r.tool_calls.entry(key).or_default() += 1;
                r.tool_duration.entry(labels(&[("tool", name)])).or_default().observe(latency.as_secs_f64());
            }
            Metric::Failover { from, to, .. } => {
                *r.failovers.entry(labels(&[("from", from), ("to", to)])).or_default() += 1;
            }
            Metric::Run { model, status, .. } => {
                *r.runs.entry(labels(&[("model", model), ("status", status)])).or_default() += 1;
                if *status == "failed" {
                    *r.run_errors.entry(labels(&[("model", model)])).or_default() += 1;
                }
            }
        }
    }

    /// The Prometheus text exposition: HELP and TYPE lines always, series
    /// sorted by their label text, a trailing newline.
    pub fn render(&self) -> String {
        let r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        counter(&mut out, "nexus_llm_requests_total", "Model requests by model and status.", &r.llm_requests);
        counter(&mut out, "nexus_llm_tokens_total", "Tokens of successful model requests by type.", &r.llm_tokens);
        histogram(&mut out, "nexus_llm_request_duration_seconds", "Model request latency.", &r.llm_duration);
        counter(&mut out, "nexus_tool_calls_total", "Tool executions by tool, error and pending.", &r.tool_calls);
        histogram(&mut out, "nexus_tool_duration_seconds", "Tool execution latency.", &r.tool_duration);
        counter(&mut out, "nexus_runs_total", "Runs by model and final status.", &r.runs);
        counter(&mut out, "nexus_run_errors_total", "Failed runs by model.", &r.run_errors);
        counter(
            &mut out,
            "nexus_failovers_total",
            "Model calls moved to another upstream, by upstreams.",
            &r.failovers,
        );
        out
    }
}

/// `k="v",…` with Prometheus escaping (backslash, quote, newline).
pub(crate) fn labels(pairs: &[(&str, &str)]) -> String {
    let mut s = String::new();
    labels_into(&mut s, pairs);
    s
}

/// [`labels`] written into `s`, replacing what it held.
pub(crate) fn labels_into(s: &mut String, pairs: &[(&str, &str)]) {
    s.clear();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(k);
        s.push_str("=\"");
        // Label values are almost always plain (a model, a status, a key
        // name): copied whole, escaped a character at a time only when needed.
        if !v.bytes().any(|b| matches!(b, b'\\' | b'"' | b'\n')) {
            s.push_str(v);
        } else {
            for c in v.chars() {
                match c {
                    '\\' => s.push_str("\\\\"),
                    '"' => s.push_str("\\\""),
                    '\n' => s.push_str("\\n"),
                    c => s.push(c),
                }
            }
        }
        s.push('"');
    }
}

pub(crate) fn counter(out: &mut String, name: &str, help: &str, series: &BTreeMap<String, u64>) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (l, v) in series {
        let _ = writeln!(out, "{name}{{{l}}} {v}");
    }
}

pub(crate) fn histogram(out: &mut String, name: &str, help: &str, series: &BTreeMap<String, Histogram>) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (l, h) in series {
        for (b, c) in h.buckets.iter().zip(&h.counts) {
            let _ = writeln!(out, "{name}_bucket{{{l},le=\"{b}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{{l},le=\"+Inf\"}} {}", h.count);
        let _ = writeln!(out, "{name}_sum{{{l}}} {}", h.sum);
        let _ = writeln!(out, "{name}_count{{{l}}} {}", h.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_only_where_needed() {
        assert_eq!(labels(&[("model", "gpt-4o"), ("status", "200")]), "model=\"gpt-4o\",status=\"200\"");
        assert_eq!(labels(&[("tool", "a\\b\"c\nd é")]), "tool=\"a\\\\b\\\"c\\nd é\"");
    }

    #[test]
    fn counts_and_renders() {
        let m = Metrics::new();
        let empty = m.render();
        assert!(empty.contains("# TYPE nexus_tool_calls_total counter\n# HELP"));
        assert!(!empty.contains("nexus_tool_calls_total{"));
        m.observe(&Metric::Tool {
            name: "a\"b".into(),
            latency: Duration::from_millis(20),
            is_error: false,
            pending: true,
        });
        m.observe(&Metric::Llm {
            model: "m".into(),
            status: "ok",
            http_status: Some(200),
            latency: Duration::from_millis(300),
            attempt: 0,
            prompt_tokens: 7,
            completion_tokens: 3,
        });
        m.observe(&Metric::Run {
            model: "m".into(),
            status: "failed",
            turns: 1,
            tool_calls: 0,
            total_tokens: 10,
            latency: Duration::from_millis(1),
            error: Some("x".into()),
        });
        m.observe(&Metric::Failover { from: "openai a".into(), to: "gemini b".into(), reason: "503".into() });
        let text = m.render();
        assert!(text.contains("nexus_failovers_total{from=\"openai a\",to=\"gemini b\"} 1\n"), "{text}");
        assert!(
            text.contains("nexus_tool_calls_total{tool=\"a\\\"b\",is_error=\"false\",pending=\"true\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("nexus_llm_tokens_total{type=\"prompt\"} 7\n"));
        // 0.3 s falls in the 0.5 bucket and above, not in 0.25.
        assert!(text.contains("nexus_llm_request_duration_seconds_bucket{model=\"m\",le=\"0.25\"} 0\n"));
        assert!(text.contains("nexus_llm_request_duration_seconds_bucket{model=\"m\",le=\"0.5\"} 1\n"));
        assert!(text.contains("nexus_run_errors_total{model=\"m\"} 1\n"));
        assert!(text.ends_with('\n'));
    }
}
