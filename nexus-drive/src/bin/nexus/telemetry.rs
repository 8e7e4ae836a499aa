//! The process's OpenTelemetry export (SPEC §22): built once from the
//! standard `OTEL_*` variables when they name an endpoint, flushed at exit.

use std::sync::OnceLock;

use nexus_drive::telemetry::{OtlpPipeline, Telemetry};

use crate::Fail;

static PIPELINE: OnceLock<Option<OtlpPipeline>> = OnceLock::new();

fn pipeline() -> Option<&'static OtlpPipeline> {
    PIPELINE
        .get_or_init(|| match OtlpPipeline::from_env() {
            Ok(p) => p,
            // A telemetry setting never costs a run: warned about, then off.
            Err(e) => {
                eprintln!("nexus: {e}; telemetry is off");
                None
            }
        })
        .as_ref()
}

/// What a run records into, under `traceparent` (with `$TRACESTATE`) when
/// given; `None` when no endpoint is configured.
pub fn for_run(traceparent: Option<&str>) -> Result<Option<Telemetry>, Fail> {
    let Some(p) = pipeline() else {
        return Ok(None);
    };
    let tel = p.telemetry();
    match traceparent.map(str::trim).filter(|t| !t.is_empty()) {
        None => Ok(Some(tel)),
        Some(tp) => {
            let state = std::env::var("TRACESTATE").ok().filter(|s| !s.trim().is_empty());
            tel.traceparent(tp, state.as_deref()).map(Some).map_err(|e| Fail::usage(format!("--traceparent: {e}")))
        }
    }
}

/// What the gateway records into when its file names a traces endpoint.
pub fn for_endpoint(url: &str, timeout: std::time::Duration) -> Result<Option<Telemetry>, Fail> {
    let pipeline = OtlpPipeline::to_endpoint(url, timeout).map_err(|e| Fail::usage(format!("[telemetry]: {e}")))?;
    let telemetry = pipeline.telemetry();
    // The first pipeline of the process is the one flushed at exit.
    let _ = PIPELINE.set(Some(pipeline));
    Ok(Some(telemetry))
}

/// Sends what is queued, within the export timeout.
pub fn shutdown() {
    if let Some(Some(p)) = PIPELINE.get() {
        p.shutdown();
    }
}
