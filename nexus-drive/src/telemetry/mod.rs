//! Traces and metrics in OpenTelemetry's GenAI semantic conventions (feature
//! `otel`; SPEC §22).
//!
//! A run is an `invoke_agent {name}` span (INTERNAL); each model call is a
//! `chat {model}` span (CLIENT) covering its retries and, when streamed, its
//! last chunk; each tool call is an `execute_tool {tool}` span (INTERNAL).
//! Every span is started with its parent passed explicitly (the driver, not
//! a thread-local, knows which run a call belongs to), so tools that run
//! concurrently stay under their run.
//!
//! Content (messages, system instructions, tool definitions, arguments,
//! results, error messages) is recorded only when asked for
//! ([`Telemetry::capture_content`] or
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`). Keys and tokens are
//! never recorded.
//!
//! A suspended run keeps its span's W3C trace context beside its state: one
//! more member of the state's envelope (`"trace": {"traceparent": …}`, see
//! [`crate::workdir`] for the envelope), never inside the machine's own
//! bytes. The resumed run's segment is a new `invoke_agent` span in the same
//! trace, linked to the suspended one.
//!
//! Hosts with their own tracer provider pass a tracer
//! ([`Telemetry::from_tracer`]); the `nexus` binary builds one from the
//! standard `OTEL_*` variables ([`OtlpPipeline::from_env`]).

pub mod names;

#[cfg(feature = "otel")]
mod content;
#[cfg(feature = "otel")]
mod otlp;
#[cfg(feature = "otel")]
pub(crate) mod spans;

#[cfg(feature = "otel")]
pub use otlp::{OtlpPipeline, TelemetryError};
#[cfg(feature = "otel")]
pub(crate) use spans::RunSpans;

#[cfg(not(feature = "otel"))]
mod off;
#[cfg(not(feature = "otel"))]
pub(crate) use off::RunSpans;

#[cfg(feature = "otel")]
pub use on::*;

/// `state` without the trace context a traced run's suspension put in its
/// envelope: the bytes a recorded session keeps, so cassettes stay
/// deterministic (the envelope's ids are random). A state without one, or
/// that is not a JSON object, is returned as it is.
pub fn strip(state: &[u8]) -> Vec<u8> {
    crate::workdir::strip_member(state, names::STATE_MEMBER).unwrap_or_else(|_| state.to_vec())
}

#[cfg(feature = "otel")]
mod on {
    use std::collections::HashMap;
    use std::sync::Arc;

    use opentelemetry::global::BoxedTracer;
    use opentelemetry::metrics::{Histogram, Meter};
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::{SpanContext, TraceContextExt, Tracer};
    use opentelemetry::Context;
    use opentelemetry_sdk::propagation::TraceContextPropagator;

    use super::names;

    /// Where a client's runs send their spans and measurements, and what
    /// they may put in them.
    #[derive(Clone)]
    pub struct Telemetry {
        pub(crate) tracer: Arc<BoxedTracer>,
        pub(crate) instruments: Option<Arc<Instruments>>,
        pub(crate) capture: bool,
        pub(crate) latest: bool,
        pub(crate) parent: Option<Context>,
        pub(crate) agent_name: Option<String>,
    }

    impl std::fmt::Debug for Telemetry {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Telemetry")
                .field("metrics", &self.instruments.is_some())
                .field("capture", &self.capture)
                .field("latest", &self.latest)
                .field("parent", &self.parent.as_ref().map(|c| c.span().span_context().trace_id()))
                .finish()
        }
    }

    /// The histograms a model call is measured in.
    pub(crate) struct Instruments {
        pub(crate) duration: Histogram<f64>,
        pub(crate) time_to_first_chunk: Histogram<f64>,
        /// One instrument by `gen_ai.token.type` (the shape peers read today).
        pub(crate) tokens: Option<Histogram<u64>>,
        /// The latest conventions' split instruments: input, then output.
        pub(crate) tokens_split: Option<(Histogram<u64>, Histogram<u64>)>,
    }

    /// The conventions' buckets for durations, in seconds.
    const DURATION_BUCKETS: &[f64] =
        &[0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
    /// The conventions' buckets for token counts (powers of 4).
    const TOKEN_BUCKETS: &[f64] = &[
        1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
        67108864.0,
    ];

    impl Instruments {
        fn new(meter: &Meter, latest: bool) -> Instruments {
            let seconds = |name: &'static str, what: &'static str| {
                meter
                    .f64_histogram(name)
                    .with_unit("s")
                    .with_description(what)
                    .with_boundaries(DURATION_BUCKETS.to_vec())
                    .build()
            };
            let tokens = |name: &'static str| {
                meter
                    .u64_histogram(name)
                    .with_unit("{token}")
                    .with_description("Tokens of model calls")
                    .with_boundaries(TOKEN_BUCKETS.to_vec())
                    .build()
            };
            if latest {
                Instruments {
                    duration: seconds(names::METRIC_INFERENCE_DURATION_LATEST, "Duration of model calls"),
                    time_to_first_chunk: seconds(
                        names::METRIC_TIME_TO_FIRST_CHUNK_LATEST,
                        "Time to the first chunk of streamed model calls",
                    ),
                    tokens: None,
                    tokens_split: Some((
                        tokens(names::METRIC_INPUT_TOKENS_LATEST),
                        tokens(names::METRIC_OUTPUT_TOKENS_LATEST),
                    )),
                }
            } else {
                Instruments {
                    duration: seconds(names::METRIC_OPERATION_DURATION, "Duration of model calls"),
                    time_to_first_chunk: seconds(
                        names::METRIC_TIME_TO_FIRST_CHUNK,
                        "Time to the first chunk of streamed model calls",
                    ),
                    tokens: Some(tokens(names::METRIC_TOKEN_USAGE)),
                    tokens_split: None,
                }
            }
        }
    }

    impl Telemetry {
        /// Spans go to `tracer` (a host's own provider's). Content capture
        /// and the conventions' shape are read from the standard variables
        /// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`,
        /// `OTEL_SEMCONV_STABILITY_OPT_IN`); the methods below override them.
        pub fn from_tracer<T>(tracer: T) -> Telemetry
        where
            T: Tracer + Send + Sync + 'static,
            T::Span: Send + Sync + 'static,
        {
            Telemetry {
                tracer: Arc::new(BoxedTracer::new(Box::new(tracer))),
                instruments: None,
                capture: capture_from_env(),
                latest: latest_from_env(),
                parent: None,
                agent_name: None,
            }
        }

        /// Spans go to the global tracer provider's `nexus` tracer.
        pub fn global() -> Telemetry {
            Telemetry::from_tracer(opentelemetry::global::tracer("nexus"))
        }

        /// Model calls are also measured (`gen_ai.client.token.usage`,
        /// `gen_ai.client.operation.duration`, time to first chunk) on `meter`.
        pub fn meter(mut self, meter: &Meter) -> Telemetry {
            self.instruments = Some(Arc::new(Instruments::new(meter, self.latest)));
            self
        }

        /// Whether messages, system instructions, tool definitions, tool
        /// arguments and results and error messages are recorded (off unless asked).
        pub fn capture_content(mut self, on: bool) -> Telemetry {
            self.capture = on;
            self
        }

        /// Emit the newest experimental shape of the conventions (as
        /// `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental` does).
        /// Call before [`Telemetry::meter`]: the instruments' names follow it.
        pub fn latest_conventions(mut self, on: bool) -> Telemetry {
            self.latest = on;
            self
        }

        /// Runs start under this context (a host's request span).
        pub fn parent(mut self, cx: Context) -> Telemetry {
            self.parent = Some(cx);
            self
        }

        /// Runs start under the span this W3C `traceparent` names (with its
        /// `tracestate`, when given). A malformed value is refused.
        pub fn traceparent(self, traceparent: &str, tracestate: Option<&str>) -> Result<Telemetry, String> {
            let cx = extract(traceparent, tracestate)
                .ok_or_else(|| format!("{traceparent:?} is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"))?;
            Ok(self.parent(cx))
        }

        /// The agent's name on run spans (`invoke_agent {name}`); without
        /// one the span is plain `invoke_agent`.
        pub fn agent_name(mut self, name: impl Into<String>) -> Telemetry {
            self.agent_name = Some(name.into());
            self
        }
    }

    /// Whether `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` asks for content.
    fn capture_from_env() -> bool {
        std::env::var(names::CAPTURE_MESSAGE_CONTENT).is_ok_and(|v| capture_value(&v))
    }

    /// The variable's values that turn capture on: `true` (its first form)
    /// and the modes that put content somewhere (`SPAN_ONLY`,
    /// `EVENT_ONLY`, `SPAN_AND_EVENT`); `NO_CONTENT`, `false` and anything
    /// else keep it off.
    pub(crate) fn capture_value(v: &str) -> bool {
        matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "span_only" | "event_only" | "span_and_event")
    }

    fn latest_from_env() -> bool {
        std::env::var(names::STABILITY_OPT_IN)
            .is_ok_and(|v| v.split(',').any(|s| s.trim() == names::LATEST_EXPERIMENTAL))
    }

    /// The context a W3C `traceparent` (and `tracestate`) names, if valid.
    pub fn extract(traceparent: &str, tracestate: Option<&str>) -> Option<Context> {
        let mut carrier = HashMap::new();
        carrier.insert("traceparent".to_string(), traceparent.trim().to_string());
        if let Some(s) = tracestate {
            carrier.insert("tracestate".to_string(), s.to_string());
        }
        let cx = TraceContextPropagator::new().extract(&carrier);
        cx.span().span_context().is_valid().then_some(cx)
    }

    /// The W3C `traceparent` and `tracestate` of a span.
    pub fn inject(span: &SpanContext) -> (String, Option<String>) {
        let cx = Context::new().with_remote_span_context(span.clone());
        let mut carrier: HashMap<String, String> = HashMap::new();
        TraceContextPropagator::new().inject_context(&cx, &mut carrier);
        let state = carrier.remove("tracestate").filter(|s| !s.is_empty());
        (carrier.remove("traceparent").unwrap_or_default(), state)
    }

    /// The trace context a suspended run's state carries beside it, if any
    /// (a state written with telemetry on). Hosts may parent their own
    /// spans on it.
    pub fn stored_context(state: &[u8]) -> Option<Context> {
        let (parent, tracestate) = stored_traceparent(state)?;
        extract(&parent, tracestate.as_deref())
    }

    /// The `traceparent` and `tracestate` stored in a state's envelope.
    pub fn stored_traceparent(state: &[u8]) -> Option<(String, Option<String>)> {
        #[derive(serde::Deserialize)]
        struct Probe {
            trace: Option<Stored>,
        }
        #[derive(serde::Deserialize)]
        struct Stored {
            traceparent: String,
            tracestate: Option<String>,
        }
        let probe: Probe = serde_json::from_slice(state).ok()?;
        probe.trace.map(|t| (t.traceparent, t.tracestate))
    }

    /// `state` with the span's trace context in its envelope (a member
    /// after the machine's own; the machine's bytes stay a prefix).
    pub(crate) fn attach(state: Vec<u8>, span: &SpanContext) -> Vec<u8> {
        let (traceparent, tracestate) = inject(span);
        let mut member = serde_json::json!({ "traceparent": traceparent });
        if let Some(s) = tracestate {
            member["tracestate"] = s.into();
        }
        crate::workdir::append_member(&state, names::STATE_MEMBER, &member).unwrap_or(state)
    }
}

#[cfg(all(test, feature = "otel"))]
mod tests {
    use nexus_proto::{Message, Run, RunConfig, Style};
    use opentelemetry::trace::TraceContextExt;

    use super::*;
    use crate::workdir::{self, Workdir};

    #[test]
    fn the_trace_context_rides_in_the_envelope_beside_the_machines_bytes() {
        let state = Run::new(RunConfig::new(Style::OpenAi, "m"), Vec::new(), vec![Message::user("hi")])
            .unwrap_or_else(|e| panic!("{e}"))
            .snapshot();
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cx = extract(parent, Some("k=v")).unwrap_or_else(|| panic!("a valid traceparent"));
        let kept = attach(state.clone(), cx.span().span_context());
        assert!(kept.starts_with(&state[..state.len() - 1]), "the machine's bytes stay a prefix");
        assert_eq!(stored_traceparent(&kept), Some((parent.to_string(), Some("k=v".to_string()))));
        assert_eq!(stored_traceparent(&state), None);
        let run = Run::restore(&kept).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(run.snapshot(), state, "restore passes over it");
        // A host's workdir goes after it, and strips back to it.
        let both = workdir::attach(&kept, &Workdir::new("/srv")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(workdir::strip(&both).unwrap_or_else(|e| panic!("{e}")), kept);
        assert_eq!(strip(&kept), state, "stripped back to the machine's bytes");
        assert_eq!(strip(&state), state);
        assert_eq!(strip(b"not json"), b"not json".to_vec());
        assert_eq!(
            stored_context(&both).map(|c| c.span().span_context().trace_id()),
            Some(cx.span().span_context().trace_id())
        );
    }

    #[test]
    fn a_malformed_traceparent_is_refused_and_capture_values_are_read() {
        assert!(extract("00-nope", None).is_none());
        assert!(extract("00-00000000000000000000000000000000-b7ad6b7169203331-01", None).is_none());
        assert!(Telemetry::global().traceparent("garbage", None).is_err());
        for on in ["true", "SPAN_ONLY", "span_and_event", "EVENT_ONLY"] {
            assert!(capture_value(on), "{on}");
        }
        for off in ["false", "NO_CONTENT", "", "yes"] {
            assert!(!capture_value(off), "{off}");
        }
    }
}
