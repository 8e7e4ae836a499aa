//! OTLP/HTTP (protobuf) export configured the standard way, with the
//! official SDK's batch processor and periodic reader (each on a std thread
//! of its own) and ureq as the HTTP client: no async runtime.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use super::Telemetry;

/// Why the OTLP pipeline could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// An `OTEL_*` variable holds a value the exporter refuses.
    #[error("OpenTelemetry: {0}")]
    Config(String),
}

/// The standard default export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`), 10 s.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporters a process sends its spans and measurements with.
#[derive(Debug)]
pub struct OtlpPipeline {
    traces: SdkTracerProvider,
    metrics: Option<SdkMeterProvider>,
    timeout: Duration,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The export timeout of a signal: its own variable, else the general one
/// (milliseconds, as the specification defines them).
fn timeout(signal_var: &str) -> Duration {
    var(signal_var)
        .or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
}

impl OtlpPipeline {
    /// The pipeline the standard variables describe, or `None` when they
    /// name no endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) or `OTEL_SDK_DISABLED=true`:
    /// then nothing is built and runs record nothing.
    ///
    /// Also read: `OTEL_EXPORTER_OTLP_{,TRACES_,METRICS_}HEADERS` and
    /// `…TIMEOUT`, `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES`
    /// (service name `nexus` otherwise), `OTEL_TRACES_SAMPLER`(`_ARG`),
    /// `OTEL_BSP_*`, `OTEL_METRIC_EXPORT_INTERVAL`; metrics go out when
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` or `…_METRICS_ENDPOINT` is set and
    /// `OTEL_METRICS_EXPORTER` is not `none`.
    pub fn from_env() -> Result<Option<OtlpPipeline>, TelemetryError> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let general = var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        if !general && var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none() {
            return Ok(None);
        }
        let resource = resource();
        let warned = Arc::new(AtomicBool::new(false));
        let trace_timeout = timeout("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT");
        let traces = tracer_provider(None, trace_timeout, &resource, &warned)?;
        let metrics_on = (general || var("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").is_some())
            && !var("OTEL_METRICS_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
        let metrics = match metrics_on {
            false => None,
            true => {
                let metric_timeout = timeout("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT");
                let exporter = opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_timeout(metric_timeout)
                    .with_http_client(UreqClient::new(metric_timeout, warned))
                    .build()
                    .map_err(|e| TelemetryError::Config(e.to_string()))?;
                Some(SdkMeterProvider::builder().with_periodic_exporter(exporter).with_resource(resource).build())
            }
        };
        Ok(Some(OtlpPipeline { traces, metrics, timeout: trace_timeout }))
    }

    /// Spans only, sent to `traces_url` (the whole URL, `…/v1/traces`
    /// included) with `timeout` per export; the other settings as
    /// [`from_env`](Self::from_env) reads them.
    pub fn to_endpoint(traces_url: &str, timeout: Duration) -> Result<OtlpPipeline, TelemetryError> {
        let warned = Arc::new(AtomicBool::new(false));
        let traces = tracer_provider(Some(traces_url), timeout, &resource(), &warned)?;
        Ok(OtlpPipeline { traces, metrics: None, timeout })
    }

    /// What a client records into this pipeline.
    pub fn telemetry(&self) -> Telemetry {
        let tel = Telemetry::from_tracer(self.traces.tracer("nexus"));
        match &self.metrics {
            Some(m) => tel.meter(&m.meter("nexus")),
            None => tel,
        }
    }

    /// Sends what is still queued and stops the export threads, within the
    /// export timeout: a collector that hangs costs at most that (spans and
    /// measurements are flushed side by side, not one after the other).
    pub fn shutdown(&self) {
        std::thread::scope(|s| {
            if let Some(m) = &self.metrics {
                s.spawn(|| m.shutdown_with_timeout(self.timeout));
            }
            let _ = self.traces.shutdown_with_timeout(self.timeout);
        });
    }
}

/// The process's resource: the standard variables', service name `nexus`
/// when they name none.
fn resource() -> Resource {
    let mut resource = Resource::builder();
    let named = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    if !named {
        resource = resource.with_service_name("nexus");
    }
    resource.build()
}

/// Spans batched to an OTLP/HTTP exporter: to `endpoint`, else where the
/// variables say.
fn tracer_provider(
    endpoint: Option<&str>,
    timeout: Duration,
    resource: &Resource,
    warned: &Arc<AtomicBool>,
) -> Result<SdkTracerProvider, TelemetryError> {
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(timeout)
        .with_http_client(UreqClient::new(timeout, warned.clone()));
    if let Some(url) = endpoint {
        builder = builder.with_endpoint(url);
    }
    let spans = builder.build().map_err(|e| TelemetryError::Config(e.to_string()))?;
    // The batch processor's queue is bounded (OTEL_BSP_MAX_QUEUE_SIZE,
    // 2048): a slow collector drops spans, it never holds a run.
    Ok(SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(spans).build())
        .with_resource(resource.clone())
        .build())
}

/// OTLP's HTTP client on ureq. The SDK calls it from its export thread and
/// blocks on the future, so a blocking call inside is what it expects; each
/// request is bounded by the export timeout in total.
#[derive(Debug)]
struct UreqClient {
    agent: ureq::Agent,
    /// Set once a failure was reported: a dead collector warns once per process.
    warned: Arc<AtomicBool>,
}

impl UreqClient {
    fn new(timeout: Duration, warned: Arc<AtomicBool>) -> UreqClient {
        let agent =
            ureq::Agent::config_builder().timeout_global(Some(timeout)).http_status_as_error(false).build().new_agent();
        UreqClient { agent, warned }
    }

    fn warn(&self, url: &str, what: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!("nexus: telemetry export to {url} failed ({what}); spans and measurements are dropped");
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for UreqClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let url = request.uri().to_string();
        let request = request.map(|b| b.to_vec());
        let mut response = match self.agent.run(request) {
            Ok(r) => r,
            Err(e) => {
                self.warn(&url, &e.to_string());
                return Err(Box::new(e));
            }
        };
        let status = response.status();
        // A collector's answer is a small protobuf; a huge one is not read.
        let body = response.body_mut().with_config().limit(4 << 20).read_to_vec().unwrap_or_default();
        if !status.is_success() {
            self.warn(&url, &format!("HTTP {}", status.as_u16()));
        }
        let mut out = Response::builder().status(status);
        for (k, v) in response.headers() {
            out = out.header(k, v);
        }
        Ok(out.body(Bytes::from(body))?)
    }
}
