//! # MCP client, sans-IO
//!
//! A [`Session`] is the client side of one MCP server's connection as a
//! state machine, driven like [`Run`](crate::Run): the driver feeds it what
//! happened ([`Session::handle_input`]`(now, input)`) and does what it asks
//! ([`Session::poll_output`], until [`Output::Wait`]). It never touches a
//! socket, a process or a clock; the transports (stdio, Streamable HTTP) live
//! in `nexus-drive` and only move bytes.
//!
//! It speaks both wire eras. Modern (2026-07-28) servers are stateless:
//! every request carries `_meta` (protocol version, client capabilities,
//! client info) and the matching HTTP headers, and user input comes back as
//! an `input_required` result that the call answers by being sent again.
//! Legacy (2025-11-25 and older) servers need `initialize` first, keep a
//! session, ping, and ask the user in the middle of a call. The era is
//! found by probing: `server/discover` first; a result or a recognised modern
//! error means modern, anything else (another error, a timeout, an HTTP
//! 400/404/405 without a JSON-RPC body, fed as [`Input::Refused`]) means
//! legacy `initialize`. [`Session::discovery`] exports what was found so the
//! next connection skips the probe.
//!
//! ## Driving an MCP session
//!
//! | [`Output`] | the driver |
//! |---|---|
//! | `Transmit(t)` | sends `t.message` (stdio: one line; HTTP: a POST with `t.headers`), opening the connection first if none is open, and feeds every message that comes back as [`Input::Received`] |
//! | `Abandon{id}` | stops reading the response to `id` (HTTP: shuts its stream — in 2026 that is the cancellation) |
//! | `Reattach{id, last_event_id}` | legacy HTTP: resumes the lost stream of `id` with `GET` + `Last-Event-ID` |
//! | `ToolsListed{tools, changed}` / `ToolsFailed{error}` | updates the tools it exposes |
//! | `CallDone{call, result}` | gives the call its result |
//! | `CallSuspended{call, request}` | replies `Pending(request)` for the call; after the answer, calls again with [`CallRequest::resume`] |
//! | `Elicit{call, request}` | asks the host now (legacy, in-process only) and feeds [`Input::Answer`] |
//! | `Event(e)` | logs or shows it |
//! | `Wait{until}` | waits for input; feeds [`Input::Timeout`] once `until` passes |
//!
//! An HTTP driver that loses the SSE stream carrying a response feeds
//! [`Input::StreamLost`]: the session alone decides whether the stream is
//! reattached (legacy era, the server gave event ids) or the call ends in
//! doubt — it never sends a `tools/call` again on its own.
//!
//! ```
//! use nexus_proto::mcp::*;
//! use nexus_proto::Timestamp;
//!
//! let mut s = Session::new(SessionConfig::new("weather", TransportKind::Stdio))?;
//! let now = Timestamp(1_000);
//! s.handle_input(now, Input::Call(CallRequest {
//!     call: "call_1".into(),
//!     tool: "get_forecast".into(),
//!     arguments: serde_json::json!({"city": "Paris"}),
//!     resume: None,
//! }))?;
//! // The probe goes out first.
//! let Output::Transmit(t) = s.poll_output() else { panic!() };
//! assert!(String::from_utf8_lossy(&t.message).contains(r#""method":"server/discover""#));
//! // A modern server answers it; the call follows.
//! s.handle_input(now, Input::Received {
//!     message: br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}}"#,
//!     stream_of: None,
//! })?;
//! let Output::Event(Event::Connected { .. }) = s.poll_output() else { panic!() };
//! let Output::Transmit(t) = s.poll_output() else { panic!() };
//! assert_eq!(t.id, Some(RequestId::Num(2)));
//! s.handle_input(now, Input::Received {
//!     message: br#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"Sunny"}]}}"#,
//!     stream_of: None,
//! })?;
//! let Output::CallDone { call, result } = s.poll_output() else { panic!() };
//! assert_eq!((call.as_str(), result.output.as_str(), result.is_error), ("call_1", "Sunny", false));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Suspension
//!
//! User input rides nexus's one suspension primitive. A 2026 server that
//! needs input returns `input_required`; the session gives
//! [`Output::CallSuspended`] with a [`Request`](crate::Request) of kind
//! `input` whose `data` holds `{server, tool, inputs: [{key, mode, message,
//! requestedSchema}], requestState, round}` — everything the retry needs, so
//! the answer may come days later in another process. The tool replies
//! `Pending(request)`; once answered, the run re-runs the tool with
//! `ToolInvocation::answer` and `ToolInvocation::request`, which go into
//! [`CallRequest::resume`]: the session sends the call again with a new id,
//! `inputResponses` from the answer and the exact `requestState`. See
//! [`elicit`] for the mapping and SPEC.md §11 for the whole contract.

mod calls;
mod content;
pub mod elicit;
mod error;
pub mod jsonrpc;
mod session;
pub(crate) mod tools;
mod types;

pub use content::{check_schema, tool_result};
pub use elicit::{with_defaults, KIND_AUTHORIZATION, KIND_INPUT};
pub use error::{HandleError, McpInputError, ProtocolError};
pub use jsonrpc::{LineDecoder, Message, RequestId, RpcError};
pub use session::Session;
pub use tools::{digest, expose, exposed_name, header_params, header_value, McpTool, NameCollision, MAX_TOOL_NAME};
pub use types::{
    CallRequest, Discovery, Era, Event, Input, Output, Resume, SessionConfig, Transmit, TransportKind, LEGACY_VERSIONS,
    MODERN_VERSION,
};
