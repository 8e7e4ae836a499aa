//! The gateway's spans (SPEC §22.5): a SERVER span per client request,
//! continuing the client's `traceparent`, and a CLIENT `chat {model}` span
//! per upstream attempt under it (a failover shows as sibling attempts),
//! whose context goes upstream as `traceparent`. Without the `otel` feature
//! or a configured telemetry, a [`SpanHandle`] is empty and every call here
//! does nothing.

/// An open span, or nothing.
#[derive(Clone, Default)]
pub(crate) struct SpanHandle {
    #[cfg(feature = "otel")]
    cx: Option<opentelemetry::Context>,
}

#[cfg(not(feature = "otel"))]
impl SpanHandle {
    pub(crate) fn server(_: &super::ServeConfig, _: &str, _: &str, _: &hyper::HeaderMap) -> SpanHandle {
        SpanHandle::default()
    }
    pub(crate) fn attempt(&self, _: &super::ServeConfig, _: &super::gateway::Target, _: &str, _: bool) -> SpanHandle {
        SpanHandle::default()
    }
    pub(crate) fn traceparent(&self) -> Option<String> {
        None
    }
    pub(crate) fn trace_id(&self) -> Option<String> {
        None
    }
    pub(crate) fn end(&self, _: Option<u16>, _: Option<&str>) {}
    pub(crate) fn note_usage(&self, _: Option<&str>, _: u64, _: u64) {}
}

#[cfg(feature = "otel")]
mod on {
    use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
    use opentelemetry::KeyValue;

    use super::SpanHandle;
    use crate::serve::gateway::Target;
    use crate::serve::ServeConfig;
    use crate::telemetry::names as n;

    impl SpanHandle {
        /// The request's SERVER span, under the client's `traceparent`
        /// when it sent a valid one.
        pub(crate) fn server(cfg: &ServeConfig, method: &str, path: &str, headers: &hyper::HeaderMap) -> SpanHandle {
            let Some(tel) = &cfg.telemetry else {
                return SpanHandle::default();
            };
            let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
            let parent = header("traceparent")
                .and_then(|tp| crate::telemetry::extract(tp, header("tracestate")))
                .unwrap_or_else(opentelemetry::Context::current);
            let builder =
                tel.tracer.span_builder(format!("{method} {path}")).with_kind(SpanKind::Server).with_attributes([
                    KeyValue::new("http.request.method", method.to_string()),
                    KeyValue::new("url.path", path.to_string()),
                ]);
            let span = tel.tracer.build_with_context(builder, &parent);
            SpanHandle { cx: Some(parent.with_span(span)) }
        }

        /// One upstream attempt's CLIENT span, under this (the request's) span.
        pub(crate) fn attempt(&self, cfg: &ServeConfig, target: &Target, url: &str, stream: bool) -> SpanHandle {
            let (Some(tel), Some(parent)) = (&cfg.telemetry, &self.cx) else {
                return SpanHandle::default();
            };
            let (_, mut attrs) =
                crate::telemetry::spans::chat_attributes(target.style(), target.model(), url, stream, tel.latest);
            attrs.push(KeyValue::new("nexus.upstream", target.upstream().to_string()));
            let builder = tel
                .tracer
                .span_builder(format!("{} {}", n::OP_CHAT, target.model()))
                .with_kind(SpanKind::Client)
                .with_attributes(attrs);
            let span = tel.tracer.build_with_context(builder, parent);
            SpanHandle { cx: Some(parent.with_span(span)) }
        }

        /// The span's W3C `traceparent`, to send upstream.
        pub(crate) fn traceparent(&self) -> Option<String> {
            let sc = self.cx.as_ref()?.span().span_context().clone();
            sc.is_valid().then(|| crate::telemetry::inject(&sc).0)
        }

        /// The trace id, for the access log.
        pub(crate) fn trace_id(&self) -> Option<String> {
            let sc = self.cx.as_ref()?.span().span_context().clone();
            sc.is_valid().then(|| sc.trace_id().to_string())
        }

        /// The request's model (as the client named it) and the tokens its
        /// answer reported.
        pub(crate) fn note_usage(&self, model: Option<&str>, input: u64, output: u64) {
            let Some(cx) = &self.cx else {
                return;
            };
            let span = cx.span();
            if let Some(m) = model {
                span.set_attribute(KeyValue::new(n::REQUEST_MODEL, m.to_string()));
            }
            span.set_attribute(KeyValue::new(n::USAGE_INPUT_TOKENS, i64::try_from(input).unwrap_or(i64::MAX)));
            span.set_attribute(KeyValue::new(n::USAGE_OUTPUT_TOKENS, i64::try_from(output).unwrap_or(i64::MAX)));
        }

        /// Ends the span with the response status and what failed (a short
        /// name, never a message).
        pub(crate) fn end(&self, status: Option<u16>, error: Option<&str>) {
            let Some(cx) = &self.cx else {
                return;
            };
            let span = cx.span();
            if let Some(s) = status.filter(|s| *s > 0) {
                span.set_attribute(KeyValue::new("http.response.status_code", i64::from(s)));
            }
            let error = error.map(str::to_string).or_else(|| status.filter(|s| *s >= 400).map(|s| s.to_string()));
            if let Some(e) = error {
                span.set_attribute(KeyValue::new(n::ERROR_TYPE, e.clone()));
                span.set_status(Status::error(e));
            }
            span.end();
        }
    }
}
