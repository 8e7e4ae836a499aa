// The low-level Run driven with fetch: the host does every byte of I/O and
// runs the tools; the machine decides everything else (retries, turn
// limits, transcript balance, suspension). Useful where the native driver
// cannot do the I/O (a runtime with its own HTTP stack) or where the host
// wants every request in its hands.
//
//   OPENAI_API_KEY=... node examples/fetch-driver.mjs "What is 17 * 23?"
import { Run } from 'nexus-loop';

/**
 * Drives `run` to its end or its first suspension. `tools` maps a tool name
 * to an async function of the call's input returning text.
 */
export async function drive(run, { tools = {}, onEvent, fetch = globalThis.fetch } = {}) {
  for (;;) {
    const out = run.pollOutput();
    switch (out.type) {
      case 'send':
        await send(run, out, fetch);
        break;
      case 'run_tools':
        // Concurrently, as the machine allows; each reply is fed back by call id.
        await Promise.all(
          out.calls.map(async (c) => {
            let value;
            try {
              const f = tools[c.name];
              if (f === undefined) throw new Error(`no tool ${c.name}`);
              value = { output: String(await f(c.input)), isError: false };
            } catch (e) {
              value = { output: e.message, isError: true };
            }
            run.handleInput({ type: 'tool_reply', callId: c.callId, reply: { status: 'done', value } });
          }),
        );
        break;
      case 'event':
        onEvent?.(out.event);
        break;
      case 'wait':
        // A retry's backoff: sleep until then and tell the machine.
        if (out.until === null) throw new Error('the machine waits for an input this driver never gives');
        await new Promise((r) => setTimeout(r, Math.max(0, out.until - Date.now())));
        run.handleInput({ type: 'timeout' });
        break;
      case 'suspended':
        return { status: 'pending', requests: out.requests, state: run.snapshot() };
      case 'done':
        return run.summary();
    }
  }
}

async function send(run, out, fetch) {
  const exchange = out.exchange;
  let response;
  try {
    response = await fetch(out.url, { method: out.method, headers: out.headers, body: out.method === 'GET' ? undefined : out.body });
  } catch (e) {
    run.handleInput({ type: 'transport_error', exchange, kind: 'connect', message: String(e.cause?.message ?? e.message) });
    return;
  }
  run.handleInput({ type: 'response_head', exchange, status: response.status, headers: [...response.headers] });
  try {
    // Chunks as they arrive: a streamed answer's events come out as its bytes do.
    if (response.body !== null) {
      for await (const bytes of response.body) run.handleInput({ type: 'response_body', exchange, chunk: bytes });
    }
  } catch (e) {
    run.handleInput({ type: 'transport_error', exchange, kind: 'io', message: String(e.message) });
    return;
  }
  run.handleInput({ type: 'response_end', exchange });
}

// Run directly: one question against OpenAI with a calculator tool.
if (import.meta.url === `file://${process.argv[1]}`) {
  const run = new Run({
    config: { style: 'openai', model: 'gpt-4o-mini', stream: true },
    tools: [{ name: 'multiply', description: 'Multiplies a by b', inputSchema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] } }],
    prompt: process.argv[2] ?? 'What is 17 * 23?',
  });
  run.setApiKey(process.env.OPENAI_API_KEY ?? '');
  const result = await drive(run, {
    tools: { multiply: async ({ a, b }) => a * b },
    onEvent: (e) => e.type === 'text_delta' && process.stdout.write(e.text),
  });
  console.log(`\n(${result.status}, ${result.turns} turns)`);
}
