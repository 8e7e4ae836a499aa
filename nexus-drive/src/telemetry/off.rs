//! Without the `otel` feature a run records nothing: the driver's hook
//! calls land here and compile to nothing.

use nexus_proto::{HttpRequest, Request, Run, StreamEvent, ToolReply};
use serde_json::Value;

use crate::config::ClientConfig;
use crate::error::DriveError;

pub(crate) struct RunSpans;

#[allow(clippy::unused_self)]
impl RunSpans {
    pub(crate) fn begin(_: &ClientConfig, _: &Run, _: Option<&[u8]>) -> RunSpans {
        RunSpans
    }
    pub(crate) fn send(&mut self, _: &Run, _: &HttpRequest, _: u32) {}
    pub(crate) fn first_chunk(&mut self, _: &str) {}
    pub(crate) fn event(&mut self, _: &Run, _: &StreamEvent) {}
    pub(crate) fn exchange_ended(&mut self, _: &Run, _: &str, _: bool, _: Option<u16>) {}
    pub(crate) fn tool_started(&mut self, _: &Run, _: &str, _: &str, _: &Value) -> Option<String> {
        None
    }
    pub(crate) fn tool_ended(&mut self, _: &str, _: &ToolReply) {}
    pub(crate) fn suspended(&mut self, _: &[Request], state: Vec<u8>) -> Vec<u8> {
        state
    }
    pub(crate) fn finished(&mut self, _: &Run, _: &'static str, _: Option<&str>, _: Option<&DriveError>) {}
}
