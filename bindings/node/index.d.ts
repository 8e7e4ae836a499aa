// Types of nexus-loop. Field names follow the CLI's `--json` output and the
// state format (SPEC.md), so a result, an event or a request reads the same
// from every nexus.

/** Which wire format a provider speaks. */
export type Style = 'anthropic' | 'openai' | 'gemini' | 'openai-responses';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** A JSON Schema object, or a zod (4) schema: anything with zod's `toJSONSchema()`. */
export type InputSchema = JsonObject | { toJSONSchema(...args: any[]): unknown; parse(value: unknown): unknown };

/** Something the run waits for (SPEC §5). */
export interface Request {
  id: string;
  /** `approval`, `input`, `question`, `authorization`, `tool_call` (relay), `in_doubt`, … */
  kind: string;
  prompt: string;
  url?: string;
  data?: JsonObject;
  expiresAt?: string;
  /**
   * A sub-agent's request: the agent path of the run that asks (its
   * delegating call ids, joined by `/`). Its `id` is qualified by that path:
   * answer it by `id` as it is.
   */
  agent?: string;
}

/** The host's reply to a request. */
export interface Answer {
  id: string;
  ok: boolean;
  data?: JsonObject;
  /** When `ok` is false: `declined` | `cancelled` | `expired`. */
  reason?: string;
}

export interface Usage {
  promptTokens: number;
  completionTokens: number;
  totalTokens: number;
  cachedTokens?: number;
  reasoningTokens?: number;
}

export interface ToolCallRecord {
  id: string;
  name: string;
  input: Json;
  output: string;
  isError: boolean;
}

export interface ToolCall {
  id: string;
  name: string;
  input: Json;
  arguments: string;
  provider_data?: Json;
}

export interface ToolResult {
  output: string;
  isError: boolean;
  metadata?: Json;
}

/** How a typed output's schema reaches the model (SPEC §16). */
export type OutputMode = 'auto' | 'native' | 'tool' | 'prompted';

/** A JSON Schema object (root `type: 'object'`), or a zod (4) schema whose `parse` makes the result's `output`. */
export type OutputSchema<T = Json> = JsonObject | { toJSONSchema(...args: any[]): unknown; parse(value: unknown): T };

/** A typed output for a call (or, on `ClientOptions`, every call). */
export interface OutputOptions<T = Json> {
  outputSchema?: OutputSchema<T>;
  /** Default `auto`: the provider's own schema field, an output tool or the prompt, per model. */
  outputMode?: OutputMode;
  /** Invalid answers the model may replace before the run fails (default 2). */
  outputRetries?: number;
}

/** One sub-agent of a run (SPEC §17). */
export interface AgentReport {
  path: string;
  name: string;
  turns: number;
  usage: Usage;
  status: string;
}

/** What a run gave back. */
export interface RunResult<T = Json> {
  status: 'done' | 'pending' | 'incomplete';
  text: string;
  /** The validated typed output of a done run that asked for one (null otherwise); parsed by a zod schema when one was given. */
  output: T | null;
  /** The strategy that carried the typed output. */
  outputMode?: 'native' | 'tool' | 'prompted';
  /** Each sub-agent of the run; `turns` and `usage` above are the run's own. */
  agents?: AgentReport[];
  toolCalls: ToolCallRecord[];
  turns: number;
  usage: Usage;
  model: string;
  /** Which limit stopped an incomplete run (`maxTurns`). */
  limit?: string;
  /** What a pending run waits for (every outstanding request of the turn). */
  pending: Request[];
  stopReason?: string;
  /** The whole transcript (the neutral format of SPEC §6). */
  messages: JsonObject[];
  upstreams: { turn: number; style: Style; baseUrl: string; model: string }[];
  failovers: { turn: number; from: JsonObject; to: JsonObject; reason: string }[];
  /** A pending run's state: JSON text without secrets, for `resume` here, in another process or in the CLI. */
  state?: string;
  /** A pending run's id (its key in a store). */
  runId?: string;
}

/** One thing that happened in a run (SPEC §7), then `done` with the result. */
export type StreamEvent =
  | { type: 'turn_started'; turn: number }
  | { type: 'text_delta'; text: string }
  | { type: 'reasoning_delta'; text: string }
  | { type: 'tool_call_started'; id: string; name: string }
  | { type: 'tool_call_delta'; id: string; arguments: string }
  | { type: 'tool_call_finished'; call: ToolCall }
  | { type: 'usage'; usage: Usage }
  | { type: 'turn_finished'; turn: number; stop: string }
  | { type: 'tool_result'; call_id: string; name: string; result: ToolResult }
  | { type: 'pending'; request: Request }
  | { type: 'skill_activated'; call_id: string; name: string }
  | { type: 'failover'; turn: number; from: number; to: number; reason: string }
  | { type: 'retrying'; attempt: number; delay_ms: number; reason: string }
  | { type: 'output_partial'; value: Json }
  /** An event of a sub-agent's run: `agent` is its path; a `pending` inside carries the qualified request id. */
  | { type: 'agent'; agent: string; event: StreamEvent }
  | { type: 'done'; result: RunResult }
  | { type: string; [key: string]: unknown };

/** What a tool's `execute` gets besides its arguments. */
export interface ToolContext {
  callId: string;
  name: string;
  turn: number;
  /** `<run id>/<turn>/<call id>`: stable across retries and processes. */
  idempotencyKey: string;
  /** On the call's next round after `pending(...)`: the host's answer. */
  answer: Answer | null;
  /** With `answer`: the request it answers, as the tool made it. */
  request: Request | null;
  /** Aborted when the run is cancelled. */
  signal: AbortSignal;
}

declare const pendingMark: unique symbol;
/** What `pending(...)` returns. */
export interface Pending {
  readonly [pendingMark]: Request;
}

export interface Tool<Args = any> {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: JsonObject;
  readonly relay: boolean;
  readonly execute?: (args: Args, ctx: ToolContext) => unknown;
}

/**
 * A tool the model may call. A string result is given as it is, anything
 * else as JSON text; a thrown error becomes an error result; `pending(...)`
 * suspends the run.
 */
export function tool<Args = any>(spec: {
  name: string;
  description?: string;
  inputSchema?: InputSchema;
  execute: (args: Args, ctx: ToolContext) => unknown | Promise<unknown>;
}): Tool<Args>;

/** A tool whose calls are returned to the caller as one `tool_call` request per turn. */
export function relayTool(spec: { name: string; description?: string; inputSchema?: InputSchema }): Tool;

declare const agentMark: unique symbol;
/** A sub-agent, made by `agent(...)`: put it in a call's `tools`. */
export interface Agent {
  readonly [agentMark]: true;
  readonly name: string;
  readonly description: string;
}

/**
 * A sub-agent the model may delegate a task to (a tool taking `{ prompt }`):
 * a child run on the client's wire format with its own system prompt, model
 * (the client's when omitted), turn limit, tools and typed output.
 */
export function agent(spec: {
  name: string;
  description: string;
  system?: string;
  tools?: (Tool | Agent)[];
  model?: string;
  maxTurns?: number;
  outputSchema?: OutputSchema;
  outputMode?: OutputMode;
  outputRetries?: number;
}): Agent;

/** Suspends the run on a request. */
export function pending(request: { kind: string; prompt: string; data?: JsonObject; url?: string; expiresAt?: string }): Pending;

export interface Fallback {
  style: Style;
  baseUrl: string;
  model: string;
  /** The variable holding its key (default: the style's usual variable). */
  apiKeyEnv?: string;
}

export interface ClientOptions {
  style: Style;
  model: string;
  baseUrl?: string;
  /** The variable holding the API key (default ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY). */
  apiKeyEnv?: string;
  system?: string;
  maxTurns?: number;
  maxTokens?: number;
  /** Upstreams tried in order when the primary fails for its own fault. */
  fallbacks?: Fallback[];
  /** MCP servers, in the `{ mcpServers: { NAME: { command, args, env } | { type: 'http', url } } }` format. */
  mcp?: JsonObject;
  /** Where suspended runs are kept by run id: `memory`, `sqlite:PATH`, `dir:PATH` or a directory. */
  store?: string;
  /** A cassette file every call appends its session to (secrets redacted). */
  record?: string;
  /** Provider streaming for `run` too. */
  stream?: boolean;
  /** Extra request body keys. */
  params?: JsonObject;
  /** A whole-run deadline. */
  timeoutMs?: number;
  /** The built-in tools (`bash`, `read`, `write`, `edit`, `grep`, `glob`, `webfetch`, `question`, `apply_patch`, `todowrite`): all, or these. */
  builtins?: boolean | string[];
  /** The directory the built-in path tools are confined to (default: the current one). */
  root?: string;
  /** Agent Skills directories (folders with a SKILL.md). */
  skills?: string[];
  /** Markdown sub-agent definitions (`nexus run --agents DIR`): a directory or several. */
  agentsDir?: string | string[];
  /** The default typed output of every call. */
  outputSchema?: OutputSchema;
  outputMode?: OutputMode;
  outputRetries?: number;
}

export interface CallOptions {
  /** Tools and sub-agents. */
  tools?: (Tool | Agent)[];
  /** Answers requests in-process; without it a request ends the run `pending`. */
  /** `true`/`false` are short for `{ ok: true }` / `{ ok: false, reason: 'declined' }`. */
  waitFor?: (request: Request) => boolean | Omit<Answer, 'id'> | Answer | Promise<boolean | Omit<Answer, 'id'> | Answer>;
  /** Cancels the run. */
  signal?: AbortSignal;
}

export interface RunOptions<T = Json> extends CallOptions, OutputOptions<T> {
  /** Messages before the prompt (the neutral transcript). */
  history?: JsonObject[];
}

export interface ResumeOptions<T = Json> extends CallOptions {
  answers?: Answer[];
  /** Parses the output (the schema itself is in the state). */
  outputSchema?: OutputSchema<T>;
}

export class Client {
  constructor(options: ClientOptions);
  run<T = Json>(prompt: string, options?: RunOptions<T>): Promise<RunResult<T>>;
  stream<T = Json>(prompt: string, options?: RunOptions<T>): AsyncIterable<StreamEvent>;
  /** From a state's text, a pending result, or a run id in the client's store. */
  resume<T = Json>(stateOrRunId: string | RunResult<any>, options?: ResumeOptions<T>): Promise<RunResult<T>>;
  streamResume(stateOrRunId: string | RunResult<any>, options?: ResumeOptions): AsyncIterable<StreamEvent>;
  /** The client's counters over all its calls, as Prometheus text. */
  metrics(): string;
  /** Stops the client's MCP servers. */
  close(): void;
}

/** What the machine asks of its host (SPEC §3). */
export type Output =
  | { type: 'send'; exchange: number; method: string; url: string; headers: [string, string][]; body: string; streaming: boolean }
  | {
      type: 'run_tools';
      turn: number;
      calls: { callId: string; name: string; input: Json; arguments: string; idempotencyKey: string; answer: Answer | null; request: Request | null }[];
    }
  | { type: 'event'; event: StreamEvent }
  | { type: 'suspended'; requests: Request[] }
  | { type: 'wait'; until: number | null }
  | { type: 'done'; outcome: { status: 'done' } | { status: 'incomplete'; limit: string } | { status: 'failed'; error: JsonObject } };

/** What the host feeds the machine (the names of the machine's inputs, as in the Python package). */
export type Input =
  | { type: 'response_head'; exchange: number; status: number; headers: [string, string][] }
  | { type: 'response_body'; exchange: number; chunk: Uint8Array }
  | { type: 'response_end'; exchange: number }
  | { type: 'transport_error'; exchange: number; kind: 'connect' | 'io' | 'timeout' | 'aborted'; message: string }
  | { type: 'tool_reply'; callId: string; reply: { status: 'done'; value: { output: string; isError?: boolean } } | { status: 'pending'; value: Request } }
  | { type: 'answer'; answer: Answer }
  | { type: 'timeout' }
  | { type: 'cancel' }
  | { type: 'abort'; error: JsonObject };

/** The loop's state machine, for hosts that do their own I/O. */
export class Run {
  constructor(options: {
    /** Any key of the state format's run config (`style` and `model` required). */
    config: { style: Style; model: string; baseUrl?: string; system?: string; maxTurns?: number; maxTokens?: number; stream?: boolean; seed?: number; [key: string]: Json | undefined };
    tools?: Tool[] | { name: string; description?: string; inputSchema: JsonObject; relay?: boolean }[];
    prompt?: string;
    messages?: JsonObject[];
  });
  static restore(state: string): Run;
  snapshot(): string;
  setApiKey(key: string): void;
  handleInput(input: Input, now?: number): void;
  pollOutput(): Output;
  summary(): { runId: string; status: string; text: string; turns: number; usage: Usage; toolCalls: ToolCallRecord[]; pending: Request[]; outcome: JsonObject | null };
}

export class NexusError extends Error {
  kind: string;
  status?: number;
}
export class ConfigError extends NexusError {}
export class ProviderError extends NexusError {}
export class RunFailedError extends NexusError {}
export class CancelledError extends NexusError {
  code: 'ABORT_ERR';
}
export class InputError extends NexusError {}
export class StateError extends NexusError {}
export class StoreError extends NexusError {}
export class ClaimedError extends StoreError {}
export class NotFoundError extends StoreError {}
/** The run ended without a valid typed output; `raw` is what the model wrote. */
export class OutputError extends NexusError {
  raw: string;
}
export class OutputInvalidError extends OutputError {
  attempts: number;
  errors: string[];
}
export class OutputRefusedError extends OutputError {}
export class OutputTruncatedError extends OutputError {}
