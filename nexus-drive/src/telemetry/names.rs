//! The names nexus emits, as OpenTelemetry's GenAI semantic conventions
//! spell them. They are the project's own constants: the conventions moved
//! out of the core registry and are still in development, and the Rust
//! semantic-conventions crate marks its GenAI names deprecated.

/// `gen_ai.operation.name`: `chat`, `invoke_agent`, `execute_tool`.
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name`: `anthropic`, `openai`, `gcp.gemini`.
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
/// The provider attribute before `gen_ai.provider.name` replaced it (v1.36
/// and older); emitted beside it unless the latest shape is asked for.
pub const SYSTEM: &str = "gen_ai.system";
/// The model asked for.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// The request's output token limit.
pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
/// Whether the model call streams.
pub const REQUEST_STREAM: &str = "gen_ai.request.stream";
/// The model that answered.
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// The provider's id of the response.
pub const RESPONSE_ID: &str = "gen_ai.response.id";
/// Why the model stopped, one entry per choice.
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// Seconds from the request to the first chunk of a streamed response.
pub const RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
/// Input tokens.
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Output tokens.
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Of the input tokens, those read from the provider's prompt cache.
pub const USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// Of the output tokens, those spent on reasoning.
pub const USAGE_REASONING_OUTPUT_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";
/// The conversation a span belongs to: the run id, on every segment of a run.
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// The agent's name.
pub const AGENT_NAME: &str = "gen_ai.agent.name";
/// A sub-agent's path in its run's tree (the delegating call ids, `/`-joined).
pub const AGENT_PATH: &str = "nexus.agent.path";
/// The agent's id (the run id).
pub const AGENT_ID: &str = "gen_ai.agent.id";
/// The tool's name.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// The provider's id of the tool call.
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `function` (host code), `extension` (an MCP server's tool) or `datastore`.
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
/// The call's arguments (content: opt-in).
pub const TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
/// The call's result (content: opt-in).
pub const TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
/// The messages sent to the model (content: opt-in).
pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// The messages the model produced (content: opt-in).
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// The system prompt (content: opt-in).
pub const SYSTEM_INSTRUCTIONS: &str = "gen_ai.system_instructions";
/// The tools offered to the model (content: opt-in).
pub const TOOL_DEFINITIONS: &str = "gen_ai.tool.definitions";
/// Which kind of tokens a `token.usage` measurement counts: `input` or `output`.
pub const TOKEN_TYPE: &str = "gen_ai.token.type";
/// The host the model call went to.
pub const SERVER_ADDRESS: &str = "server.address";
/// The port the model call went to.
pub const SERVER_PORT: &str = "server.port";
/// What failed: an HTTP status, or a short name of the failure. Never its message.
pub const ERROR_TYPE: &str = "error.type";

/// A run's span (`invoke_agent {name}`) and its operation name.
pub const OP_INVOKE_AGENT: &str = "invoke_agent";
/// A model call's span (`chat {model}`) and its operation name.
pub const OP_CHAT: &str = "chat";
/// A tool call's span (`execute_tool {tool}`) and its operation name.
pub const OP_EXECUTE_TOOL: &str = "execute_tool";

/// A model call moved on to another upstream (an event on the `chat` span).
pub const EVENT_FAILOVER: &str = "nexus.failover";
/// A model call is retried after a failure (an event on the `chat` span).
pub const EVENT_RETRY: &str = "nexus.retry";
/// The run's context was compacted (an event on the `invoke_agent` span).
pub const EVENT_COMPACTION: &str = "nexus.compaction";
/// The run suspended on requests (the segment's last event).
pub const EVENT_SUSPENDED: &str = "nexus.run.suspended";
/// A run resumed from a stored trace context (the new segment's first event).
pub const EVENT_RESUMED: &str = "nexus.run.resumed";
/// The draft conventions' names for the same two events, emitted under
/// `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`.
pub const EVENT_PAUSED_LATEST: &str = "gen_ai.agent.paused";
/// See [`EVENT_PAUSED_LATEST`].
pub const EVENT_RESUMED_LATEST: &str = "gen_ai.agent.resumed";
/// The ids of the requests a run suspended on (an attribute of the suspension event).
pub const REQUEST_IDS: &str = "nexus.request.ids";
/// Why an incomplete run stopped (a limit).
pub const RUN_LIMIT: &str = "nexus.run.limit";
/// How a run segment ended: `done`, `pending`, `incomplete`, `failed`.
pub const RUN_STATUS: &str = "nexus.run.status";
/// The retry number of a model call's attempt.
pub const ATTEMPT: &str = "nexus.attempt";
/// The upstream a model call left and the one it moved to (`style model`).
pub const FAILOVER_FROM: &str = "nexus.failover.from";
/// See [`FAILOVER_FROM`].
pub const FAILOVER_TO: &str = "nexus.failover.to";

/// Tokens of model calls, by `gen_ai.token.type` (histogram, `{token}`).
pub const METRIC_TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// Duration of model calls (histogram, seconds).
pub const METRIC_OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
/// Time to the first chunk of streamed model calls (histogram, seconds).
pub const METRIC_TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
/// The latest conventions' name for [`METRIC_OPERATION_DURATION`].
pub const METRIC_INFERENCE_DURATION_LATEST: &str = "gen_ai.client.inference.duration";
/// The latest conventions' name for [`METRIC_TIME_TO_FIRST_CHUNK`].
pub const METRIC_TIME_TO_FIRST_CHUNK_LATEST: &str = "gen_ai.client.inference.time_to_first_chunk";
/// The latest conventions' input token instrument.
pub const METRIC_INPUT_TOKENS_LATEST: &str = "gen_ai.client.inference.usage.input_tokens";
/// The latest conventions' output token instrument.
pub const METRIC_OUTPUT_TOKENS_LATEST: &str = "gen_ai.client.inference.usage.output_tokens";

/// The variable that asks for the latest experimental shape, and its value.
pub const STABILITY_OPT_IN: &str = "OTEL_SEMCONV_STABILITY_OPT_IN";
/// See [`STABILITY_OPT_IN`].
pub const LATEST_EXPERIMENTAL: &str = "gen_ai_latest_experimental";
/// The variable that turns content capture on.
pub const CAPTURE_MESSAGE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// The state envelope's member that holds a suspended run's trace context.
pub const STATE_MEMBER: &str = "trace";
