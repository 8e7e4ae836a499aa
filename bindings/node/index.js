// nexus-loop: the tool-calling loop for Node, over nexus's Rust drivers.
//
// The native module (nexus.node, built from ./src by build.mjs) does the
// work: every call runs on a Rust thread of its own, and everything it needs
// from JavaScript (a tool's execute, waitFor, stream events, the result)
// comes back as JSON messages queued onto Node's thread. This file gives
// that Node's idiom: Promises, async iterables, AbortSignal, Error classes.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const native = require('./nexus.node');

// ---------------------------------------------------------------- errors

/** Every error this package throws. `kind` names what failed, as the Rust error does. */
export class NexusError extends Error {
  constructor(message, { kind = 'nexus', status, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.kind = kind;
    if (status != null) this.status = status;
  }
}
/** The options are unusable (unknown style, no API key, a bad tool set, an MCP server that failed). */
export class ConfigError extends NexusError {}
/** The provider refused the request (after retries, when retryable); `status` is its HTTP status. */
export class ProviderError extends NexusError {}
/** The run failed otherwise: bytes that made no sense, the network after retries, the deadline. */
export class RunFailedError extends NexusError {}
/** The run was cancelled by its AbortSignal. Named `AbortError`, as Node's own aborts are. */
export class CancelledError extends NexusError {
  constructor(message, options) {
    super(message, options);
    this.name = 'AbortError';
    this.code = 'ABORT_ERR';
  }
}
/** An answer, input or state the run refused; nothing changed. */
export class InputError extends NexusError {}
/** A saved state could not be restored. */
export class StateError extends NexusError {}
/** A run store failed. */
export class StoreError extends NexusError {}
/** The stored run is claimed by another resume under way. */
export class ClaimedError extends StoreError {}
/** No such run waits in the store (resumed to the end already, or never stored). */
export class NotFoundError extends StoreError {}
/**
 * The run ended without a valid typed output. `raw` is what the model
 * wrote (the refusal, for OutputRefusedError).
 */
export class OutputError extends NexusError {
  constructor(message, options = {}) {
    super(message, options);
    this.raw = options.raw ?? '';
  }
}
/** Every answer failed the output schema and the retries are spent: `attempts`, the validation `errors`. */
export class OutputInvalidError extends OutputError {
  constructor(message, options = {}) {
    super(message, options);
    this.attempts = options.attempts ?? 0;
    this.errors = options.errors ?? [];
  }
}
/** The model refused to give the output. */
export class OutputRefusedError extends OutputError {}
/** The output token cap cut the output off. */
export class OutputTruncatedError extends OutputError {}

const ERROR_KINDS = {
  config: ConfigError,
  provider: ProviderError,
  run: RunFailedError,
  cancelled: CancelledError,
  input: InputError,
  state: StateError,
  store: StoreError,
  claimed: ClaimedError,
  not_found: NotFoundError,
  output: OutputError,
  output_invalid: OutputInvalidError,
  output_refused: OutputRefusedError,
  output_truncated: OutputTruncatedError,
};

function nexusError({ kind, message, status, raw, attempts, errors }, cause) {
  const Kind = ERROR_KINDS[kind] ?? NexusError;
  return new Kind(message, { kind, status, cause, raw, attempts, errors });
}

/** Runs a native call, giving its refusal as `Kind`. */
function refusedAs(Kind, kind, f) {
  try {
    return f();
  } catch (e) {
    if (e instanceof NexusError) throw e;
    throw new Kind(e?.message ?? String(e), { kind });
  }
}

// ---------------------------------------------------------------- tools

const PENDING = Symbol('nexus.pending');

/**
 * A JSON Schema object as given, or a zod schema converted with zod's own
 * JSON-Schema export (zod 4's `toJSONSchema`).
 */
function jsonSchema(schema, name, zodOptions) {
  if (schema == null) return { type: 'object', properties: {} };
  if (typeof schema.toJSONSchema === 'function') return schema.toJSONSchema(zodOptions);
  if (schema._def !== undefined && typeof schema.safeParse === 'function') {
    throw new ConfigError(
      `tool ${name}: this zod schema has no JSON-Schema export (zod 3); use zod 4 or give a JSON Schema object`,
      { kind: 'config' },
    );
  }
  if (typeof schema !== 'object' || Array.isArray(schema)) {
    throw new ConfigError(`tool ${name}: inputSchema must be a JSON Schema object or a zod schema`, { kind: 'config' });
  }
  return schema;
}

function checkName(name) {
  if (typeof name !== 'string' || name === '') throw new ConfigError('a tool needs a name', { kind: 'config' });
}

/**
 * A tool the model may call. `execute(args, ctx)` may be async; what it
 * returns is the result (a string as it is, anything else as JSON), a thrown
 * error becomes an error result the model sees, and `pending({...})`
 * suspends the run on a request. With a zod `inputSchema`, `args` are parsed
 * by it first (a mismatch is an error result).
 */
export function tool({ name, description = '', inputSchema, execute }) {
  checkName(name);
  if (typeof execute !== 'function') throw new ConfigError(`tool ${name}: execute must be a function`, { kind: 'config' });
  const parse = typeof inputSchema?.parse === 'function' ? (args) => inputSchema.parse(args) : (args) => args;
  return Object.freeze({ name, description, inputSchema: jsonSchema(inputSchema, name), execute, parse, relay: false });
}

/**
 * A tool declared to the model whose calls are not run here: the run
 * suspends with one `tool_call` request per turn (`data.calls`), answered
 * with `{ id, ok: true, data: { results: [{ id, output, isError }] } }`.
 */
export function relayTool({ name, description = '', inputSchema }) {
  checkName(name);
  return Object.freeze({ name, description, inputSchema: jsonSchema(inputSchema, name), relay: true });
}

/** What a tool returns to suspend the run on a request: `{ kind, prompt, data?, url?, expiresAt? }`. */
export function pending({ kind, prompt, data, url, expiresAt }) {
  if (typeof kind !== 'string' || typeof prompt !== 'string') {
    throw new ConfigError('pending() needs a kind and a prompt', { kind: 'config' });
  }
  const request = { id: '', kind, prompt };
  if (url !== undefined) request.url = url;
  if (data !== undefined) request.data = data;
  if (expiresAt !== undefined) request.expiresAt = expiresAt;
  return { [PENDING]: request };
}

const OUTPUT_MODES = ['auto', 'native', 'tool', 'prompted'];

/**
 * A typed output: `{ spec, parse }`, the core's OutputSpec (SPEC §16) and
 * what makes the validated value the caller's (a zod schema's `parse`).
 */
function outputOf({ outputSchema, outputMode, outputRetries }, where) {
  if (outputSchema == null) {
    if (outputMode !== undefined || outputRetries !== undefined) {
      throw new ConfigError(`${where}: outputMode and outputRetries need an outputSchema`, { kind: 'config' });
    }
    return null;
  }
  const mode = outputMode ?? 'auto';
  if (!OUTPUT_MODES.includes(mode)) {
    throw new ConfigError(`${where}: outputMode ${JSON.stringify(mode)}: use one of ${OUTPUT_MODES.join(', ')}`, { kind: 'config' });
  }
  if (outputRetries !== undefined && !(Number.isInteger(outputRetries) && outputRetries >= 0)) {
    throw new ConfigError(`${where}: outputRetries must be a whole number from 0`, { kind: 'config' });
  }
  // The model writes what `parse` takes: the schema's input side (defaults optional, transforms left to parse).
  const schema = jsonSchema(outputSchema, where, { io: 'input' });
  if (schema.type !== 'object') throw new ConfigError(`${where}: the output must be a JSON object schema`, { kind: 'config' });
  const spec = { name: 'final_result', schema, mode };
  if (outputRetries !== undefined) spec.retries = outputRetries;
  const parse = typeof outputSchema.parse === 'function' ? (v) => outputSchema.parse(v) : (v) => v;
  return { spec, parse };
}

const AGENT = Symbol('nexus.agent');

/**
 * A sub-agent the model may delegate a task to: put it in `tools`. The
 * model sees a tool `name` taking `{ prompt }`; a call starts a child run on
 * the client's wire format (API root and key) with `model` (the client's
 * when omitted), `system`, `maxTurns`, its own `tools` (tools, relay tools,
 * agents) and optionally a typed output (`outputSchema`, `outputMode`,
 * `outputRetries`): its result is then the validated value as compact JSON.
 */
export function agent({ name, description = '', system, tools = [], model, maxTurns, outputSchema, outputMode, outputRetries }) {
  checkName(name);
  const output = outputOf({ outputSchema, outputMode, outputRetries }, `agent ${name}`);
  return Object.freeze({ [AGENT]: true, name, description, system, tools: [...tools], model, maxTurns, output });
}

/** The core's agent JSON; every JS tool it reaches is put in `byName`. */
function agentOptions(a, byName) {
  const out = { name: a.name, description: a.description, tools: [], agents: [] };
  for (const t of a.tools) {
    if (t?.[AGENT]) out.agents.push(agentOptions(t, byName));
    else out.tools.push(declaration(t, byName));
  }
  if (a.system !== undefined) out.system = a.system;
  if (a.model !== undefined) out.model = a.model;
  if (a.maxTurns !== undefined) out.maxTurns = a.maxTurns;
  if (a.output !== null) out.output = a.output.spec;
  return out;
}

/** A tool's declaration; a JS tool is put in `byName` (one tool per name across the run and its agents). */
function declaration(t, byName) {
  if (t == null || typeof t.name !== 'string') throw new ConfigError('tools must be made with tool() or relayTool()', { kind: 'config' });
  if (byName !== undefined && !t.relay) {
    const known = byName.get(t.name);
    if (known !== undefined && known !== t) {
      throw new ConfigError(`two different tools are named ${t.name} (in the run or its agents)`, { kind: 'config' });
    }
    byName.set(t.name, t);
  }
  return { name: t.name, description: t.description ?? '', inputSchema: t.inputSchema ?? { type: 'object' }, relay: !!t.relay };
}

/** Runs one call of a JS tool and settles it with the native side. */
async function runTool(t, message, signal) {
  let reply;
  try {
    if (t === undefined) throw new Error(`no tool named ${message.tool} was given to this call`);
    const out = await t.execute(t.parse(message.args), { ...message.ctx, signal });
    if (out !== null && typeof out === 'object' && PENDING in out) reply = { pending: out[PENDING] };
    else reply = { output: out === undefined ? null : out };
    reply = JSON.stringify(reply);
  } catch (e) {
    reply = JSON.stringify({ error: e instanceof Error ? e.message : String(e) });
  }
  native.reply(message.id, reply);
}

/** Answers one request with the host's `waitFor`. */
async function runWaitFor(waitFor, message) {
  let answer;
  try {
    const given = await waitFor(message.request);
    // `true`/`false` are the short answers: approved, or declined.
    const full = typeof given === 'boolean' ? (given ? { ok: true } : { ok: false, reason: 'declined' }) : given;
    answer = { id: message.request.id, ...full };
  } catch (e) {
    answer = { id: message.request.id, ok: false, reason: 'declined', data: { error: String(e?.message ?? e) } };
  }
  native.reply(message.id, JSON.stringify(answer));
}

function result(raw, output) {
  const out = { output: null, pending: [], ...raw };
  if (output != null && out.output != null) {
    try {
      out.output = output.parse(out.output);
    } catch (e) {
      const raw = JSON.stringify(out.output);
      const errors = [String(e?.message ?? e)];
      throw new OutputInvalidError(`the output did not parse: ${errors[0]}`, { kind: 'output_invalid', raw, attempts: 0, errors });
    }
  }
  return out;
}

// ---------------------------------------------------------------- client

/**
 * A client: a provider, a model and the options every call shares.
 * `new Client({ style, model, baseUrl?, apiKeyEnv?, system?, maxTurns?,
 * maxTokens?, fallbacks?, mcp?, store?, record?, stream?, params?, timeoutMs?,
 * builtins?, root?, skills?, agentsDir?, outputSchema?, outputMode?,
 * outputRetries? })`: `agentsDir` (a directory or a list of them) holds
 * Markdown agent definitions as `nexus run --agents DIR` reads them, and the
 * output options are the default typed output of every call.
 */
export class Client {
  #native;
  #output;

  constructor(options) {
    if (options == null || typeof options !== 'object') throw new ConfigError('new Client({ style, model, ... })', { kind: 'config' });
    const { outputSchema, outputMode, outputRetries, agentsDir, ...rest } = options;
    this.#output = outputOf({ outputSchema, outputMode, outputRetries }, 'Client');
    if (agentsDir !== undefined) rest.agentsDir = Array.isArray(agentsDir) ? agentsDir : [agentsDir];
    this.#native = refusedAs(ConfigError, 'config', () => new native.NativeClient(JSON.stringify(rest)));
  }

  /**
   * Runs the loop on `prompt` to the end: `done`, `pending` (with `state`
   * and `runId` to resume it) or `incomplete`. Rejects with a NexusError.
   */
  run(prompt, { tools = [], waitFor, signal, history, ...output } = {}) {
    return this.#call({ prompt, history }, { tools, waitFor, signal, ...output });
  }

  /**
   * The run as an async iterable of its events (`text_delta`,
   * `tool_call_finished`, `tool_result`, `pending`, …), provider streaming
   * on, ending with `{ type: 'done', result }`. Leaving the loop early cancels the run.
   */
  stream(prompt, options = {}) {
    return this.#iterate({ prompt, history: options.history }, options);
  }

  /**
   * Continues a suspended run, from its `state` text, a pending result, or
   * (with a `store`) its run id, with the host's answers. Give the tools again: JS functions do
   * not travel in a state.
   */
  resume(stateOrRunId, { answers = [], tools = [], waitFor, signal, outputSchema } = {}) {
    let spec;
    try {
      spec = resumeSpec(stateOrRunId, answers);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.#call(spec, { tools, waitFor, signal, outputSchema });
  }

  /** `resume` as an async iterable of events, like `stream`. */
  streamResume(stateOrRunId, options = {}) {
    return this.#iterate(resumeSpec(stateOrRunId, options.answers ?? []), options);
  }

  /** The client's counters over all its calls (model requests, tool calls, runs, tokens), as Prometheus text. */
  metrics() {
    return this.#native.metrics();
  }

  /** Stops the client's MCP servers. */
  close() {
    this.#native.close();
  }

  #iterate(spec, { tools = [], waitFor, signal, outputSchema, outputMode, outputRetries }) {
    const self = this;
    return {
      async *[Symbol.asyncIterator]() {
        const queue = [];
        let wake = null;
        let end = null;
        const stop = new AbortController();
        const onAbort = () => stop.abort(signal.reason);
        signal?.addEventListener('abort', onAbort, { once: true });
        if (signal?.aborted) stop.abort(signal.reason);
        const notify = () => {
          if (wake !== null) {
            wake();
            wake = null;
          }
        };
        self
          .#call(spec, {
            tools,
            waitFor,
            signal: stop.signal,
            onEvent: (e) => (queue.push(e), notify()),
            outputSchema,
            outputMode,
            outputRetries,
          })
          .then(
            (r) => (end = { result: r }),
            (e) => (end = { error: e }),
          )
          .finally(notify);
        try {
          for (;;) {
            if (queue.length > 0) {
              yield queue.shift();
            } else if (end !== null) {
              if (end.error !== undefined) throw end.error;
              yield { type: 'done', result: end.result };
              return;
            } else {
              await new Promise((r) => (wake = r));
            }
          }
        } finally {
          signal?.removeEventListener('abort', onAbort);
          if (end === null) stop.abort(new CancelledError('the stream was left before the run ended', { kind: 'cancelled' }));
        }
      },
    };
  }

  #call(spec, { tools, waitFor, signal, onEvent, outputSchema, outputMode, outputRetries }) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(new CancelledError('the run was aborted before it started', { kind: 'cancelled', cause: signal.reason }));
        return;
      }
      const byName = new Map();
      let declared;
      let agents;
      let output;
      try {
        declared = tools.filter((t) => !t?.[AGENT]).map((t) => declaration(t, byName));
        agents = tools.filter((t) => t?.[AGENT]).map((a) => agentOptions(a, byName));
        output = outputSchema === undefined && outputMode === undefined && outputRetries === undefined
          ? this.#output
          : outputOf({ outputSchema, outputMode, outputRetries }, 'run');
      } catch (e) {
        reject(e);
        return;
      }
      // Tools see the run's cancellation as their ctx.signal.
      const toolsAbort = new AbortController();
      let call = null;
      const onAbort = () => {
        toolsAbort.abort(signal.reason);
        call?.cancel();
      };
      const settle = () => signal?.removeEventListener('abort', onAbort);
      const host = (text) => {
        const message = JSON.parse(text);
        switch (message.type) {
          case 'tool':
            runTool(byName.get(message.tool), message, toolsAbort.signal);
            break;
          case 'wait_for':
            runWaitFor(waitFor, message);
            break;
          case 'event':
            onEvent?.(message.event);
            break;
          case 'done':
            settle();
            try {
              resolve(result(message.result, output));
            } catch (e) {
              reject(e);
            }
            break;
          case 'error':
            settle();
            toolsAbort.abort();
            reject(nexusError(message.error, message.error.kind === 'cancelled' ? signal?.reason : undefined));
            break;
        }
      };
      const options = { ...spec, tools: declared, agents, waitFor: typeof waitFor === 'function', events: typeof onEvent === 'function' };
      if (output !== null && spec.prompt !== undefined) options.output = output.spec;
      try {
        call = this.#native.start(JSON.stringify(options), host);
      } catch (e) {
        reject(new ConfigError(e?.message ?? String(e), { kind: 'config' }));
        return;
      }
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}

function resumeSpec(stateOrRunId, answers) {
  // A pending result resumes from its state.
  if (stateOrRunId !== null && typeof stateOrRunId === 'object' && typeof stateOrRunId.state === 'string') {
    return { state: stateOrRunId.state, answers };
  }
  if (typeof stateOrRunId !== 'string') {
    throw new ConfigError('resume() takes a state (text), a run id or a pending result', { kind: 'config' });
  }
  // A state is a JSON object; a run id never starts with `{`.
  const isState = stateOrRunId.trimStart().startsWith('{');
  return isState ? { state: stateOrRunId, answers } : { runId: stateOrRunId, answers };
}

// ---------------------------------------------------------------- machine

/**
 * The loop's state machine for hosts that do their own I/O: feed it inputs,
 * poll it for outputs (`send`, `run_tools`, `event`, `suspended`, `wait`,
 * `done`), snapshot it between processes. No I/O, no clock of its own.
 */
export class Run {
  #machine;

  /** `new Run({ config: { style, model, ... }, tools?, prompt | messages })`. */
  constructor(options, machine) {
    if (machine !== undefined) {
      this.#machine = machine;
      return;
    }
    const { config, tools = [], prompt, messages } = options ?? {};
    const start = { config, tools: tools.map((t) => declaration(t)), prompt, messages };
    this.#machine = refusedAs(ConfigError, 'config', () => new native.NativeMachine(JSON.stringify(start)));
  }

  /** A run from a snapshot (also a CLI state file's text, or a result's `state`). */
  static restore(state) {
    return new Run(undefined, refusedAs(StateError, 'state', () => native.NativeMachine.restore(String(state))));
  }

  /** The state: JSON text, no secrets. */
  snapshot() {
    return this.#machine.snapshot();
  }

  /** The API key the requests carry (memory only). */
  setApiKey(key) {
    this.#machine.setApiKey(String(key));
  }

  /**
   * Feeds one input: `{ type: 'response_head', exchange, status, headers }`,
   * `{ type: 'response_body', exchange, chunk }` (a Uint8Array),
   * `{ type: 'response_end', exchange }`, `{ type: 'transport_error',
   * exchange, kind, message }`, `{ type: 'tool_reply', callId, reply }`,
   * `{ type: 'answer', answer }`, `{ type: 'timeout' }`, `{ type: 'cancel' }`.
   * A refused input throws InputError and changes nothing.
   */
  handleInput(input, now = Date.now()) {
    const { chunk, ...rest } = input;
    const bytes = chunk === undefined ? undefined : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    refusedAs(InputError, 'input', () => this.#machine.handleInput(now, JSON.stringify(rest), bytes));
  }

  /** The next output. */
  pollOutput() {
    return JSON.parse(this.#machine.pollOutput());
  }

  /** `{ runId, status, text, turns, usage, toolCalls, pending, outcome }`. */
  summary() {
    return JSON.parse(this.#machine.summary());
  }
}
