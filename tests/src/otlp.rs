//! A loopback OTLP/HTTP collector: it accepts `POST /v1/traces` and
//! `/v1/metrics` (protobuf), decodes them with the official definitions
//! (`opentelemetry-proto`) and keeps everything it received, raw bytes
//! included (a test searches them for what must never be exported). It can
//! also hang: accept and read requests but never answer.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// The official OTLP protobuf definitions the receiver decodes with.
pub use opentelemetry_proto as proto;

use crate::fake::http::{write_full, Conn, ReadError};

#[derive(Default)]
struct Received {
    raw: Vec<u8>,
    spans: Vec<(Vec<KeyValue>, Span)>,
    metrics: Vec<Metric>,
    requests: usize,
}

/// The collector; it stops with the test process.
pub struct OtlpReceiver {
    addr: SocketAddr,
    got: Arc<Mutex<Received>>,
}

impl OtlpReceiver {
    /// A collector that answers every export with 200.
    pub fn start() -> OtlpReceiver {
        OtlpReceiver::serve(false)
    }

    /// A collector that reads every export and never answers it.
    pub fn hanging() -> OtlpReceiver {
        OtlpReceiver::serve(true)
    }

    fn serve(hang: bool) -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let got = Arc::new(Mutex::new(Received::default()));
        let shared = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let got = shared.clone();
                std::thread::spawn(move || connection(stream, &got, hang));
            }
        });
        OtlpReceiver { addr, got }
    }

    /// The base endpoint, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received, with its resource's attributes.
    pub fn spans(&self) -> Vec<(Vec<KeyValue>, Span)> {
        self.got.lock().unwrap_or_else(|e| e.into_inner()).spans.clone()
    }

    /// Every metric received (each export's data points as sent).
    pub fn metrics(&self) -> Vec<Metric> {
        self.got.lock().unwrap_or_else(|e| e.into_inner()).metrics.clone()
    }

    /// Every request body received, concatenated.
    pub fn raw(&self) -> Vec<u8> {
        self.got.lock().unwrap_or_else(|e| e.into_inner()).raw.clone()
    }

    /// How many export requests arrived.
    pub fn requests(&self) -> usize {
        self.got.lock().unwrap_or_else(|e| e.into_inner()).requests
    }

    /// Waits until `ready` holds for the spans received (or `timeout` passes).
    pub fn wait_for(&self, timeout: Duration, ready: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let until = Instant::now() + timeout;
        loop {
            let spans: Vec<Span> = self.spans().into_iter().map(|(_, s)| s).collect();
            if ready(&spans) || Instant::now() >= until {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// An endpoint on which nothing listens: connections are refused.
pub fn refused_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    drop(listener);
    format!("http://{addr}")
}

fn connection(stream: std::net::TcpStream, got: &Mutex<Received>, hang: bool) {
    let Ok(mut conn) = Conn::new(stream, Arc::new(AtomicBool::new(false))) else {
        return;
    };
    loop {
        let req = match conn.read_request() {
            Ok(r) => r,
            Err(ReadError::Closed) if hang => continue,
            Err(_) => return,
        };
        {
            let mut g = got.lock().unwrap_or_else(|e| e.into_inner());
            g.requests += 1;
            g.raw.extend_from_slice(&req.body);
            match req.path() {
                "/v1/traces" => {
                    if let Ok(export) = ExportTraceServiceRequest::decode(req.body.as_slice()) {
                        for rs in export.resource_spans {
                            let resource = rs.resource.map(|r| r.attributes).unwrap_or_default();
                            for ss in rs.scope_spans {
                                for span in ss.spans {
                                    g.spans.push((resource.clone(), span));
                                }
                            }
                        }
                    }
                }
                "/v1/metrics" => {
                    if let Ok(export) = ExportMetricsServiceRequest::decode(req.body.as_slice()) {
                        for rm in export.resource_metrics {
                            for sm in rm.scope_metrics {
                                g.metrics.extend(sm.metrics);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if hang {
            // Holds the connection open, answering nothing.
            std::thread::sleep(Duration::from_secs(3600));
            return;
        }
        if write_full(&mut conn.stream, 200, "application/x-protobuf", &[], false, &[]).is_err() {
            return;
        }
    }
}

/// A span's attribute as text (strings as they are; numbers, booleans and
/// arrays in their JSON form).
pub fn attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()).map(text)
}

fn text(v: &AnyValue) -> String {
    match &v.value {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        Some(Any::ArrayValue(a)) => {
            let items: Vec<String> = a.values.iter().map(|v| format!("{:?}", text(v))).collect();
            format!("[{}]", items.join(","))
        }
        _ => String::new(),
    }
}

/// A span's or event's trace or span id as lowercase hex.
pub fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}
