// An AbortSignal cancels a run wherever it is: in a model call, in a tool, in a stream.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client, tool, CancelledError, NexusError } from 'nexus-loop';
import { fakeProvider, options, call } from './helpers.mjs';

let fake;
before(async () => {
  fake = await fakeProvider({
    stalled: { turns: [{ text: 'Too late.', faults: [{ kind: 'stall', ms: 30000 }] }] },
    waiting: { turns: [{ tool_calls: [call('wait', {})] }, { text: 'Never seen.' }] },
  });
});
after(() => fake.stop());

/** A tool that waits until the run is cancelled; `entered` resolves once it runs. */
function waitingTool() {
  let signal;
  let enter;
  const entered = new Promise((r) => (enter = r));
  const t = tool({
    name: 'wait',
    description: 'Waits until cancelled',
    inputSchema: { type: 'object' },
    execute: (_args, ctx) =>
      new Promise((_ok, fail) => {
        signal = ctx.signal;
        enter();
        signal.addEventListener('abort', () => fail(new Error('stopped')));
      }),
  });
  return { tool: t, entered, signal: () => signal };
}

test('aborting during a model call rejects with an AbortError at once', async () => {
  const client = new Client(options(fake, 'openai', 'stalled'));
  const controller = new AbortController();
  const running = client.run('Hello?', { signal: controller.signal });
  setTimeout(() => controller.abort(), 50);
  const error = await running.then(
    () => assert.fail('the run finished'),
    (e) => e,
  );
  assert.ok(error instanceof CancelledError);
  assert.ok(error instanceof NexusError);
  assert.equal(error.name, 'AbortError');
  assert.equal(error.kind, 'cancelled');
});

test('aborting while a tool runs aborts the tool too', async () => {
  const waiting = waitingTool();
  const controller = new AbortController();
  const running = new Client(options(fake, 'anthropic', 'waiting')).run('Wait.', { tools: [waiting.tool], signal: controller.signal });
  await waiting.entered;
  controller.abort(new Error('the user left'));
  await assert.rejects(running, (e) => e instanceof CancelledError && e.cause?.message === 'the user left');
  assert.equal(waiting.signal().aborted, true);
});

test('a signal aborted before the call rejects without a request', async () => {
  const client = new Client(options(fake, 'openai', 'stalled'));
  await assert.rejects(client.run('Hello?', { signal: AbortSignal.abort() }), CancelledError);
});

test('leaving a stream early cancels its run', async () => {
  const waiting = waitingTool();
  const client = new Client(options(fake, 'gemini', 'waiting'));
  for await (const event of client.stream('Wait.', { tools: [waiting.tool] })) {
    if (event.type === 'tool_call_finished') {
      await waiting.entered;
      break;
    }
  }
  assert.equal(waiting.signal().aborted, true);
});
