//! # nexus-tests
//!
//! Test infrastructure for nexus: [`fake`], a fake LLM provider server that
//! speaks the three real wire formats over loopback HTTP/1.1 (scripted
//! turns, provider rejections, injected faults, request recording), and
//! [`oracle`], runners for the official-SDK validators in `shared/oracles`;
//! [`otlp`], a loopback OpenTelemetry collector (OTLP/HTTP, protobuf).
//! No real provider is reachable from the test machines, so every
//! end-to-end test talks to the fake.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod fake;
pub mod oracle;
pub mod otlp;
