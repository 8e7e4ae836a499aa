// The low-level Run: the machine itself, driven by JavaScript's fetch
// (examples/fetch-driver.mjs), snapshotted and restored mid-run.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Run, InputError, StateError, ConfigError } from 'nexus-loop';
import { fakeProvider, call, repo, API_KEY, STYLES } from './helpers.mjs';

const { drive } = await import(join(repo, 'bindings', 'node', 'examples', 'fetch-driver.mjs'));

let fake;
before(async () => {
  fake = await fakeProvider({
    calc: {
      turns: [{ tool_calls: [call('multiply', { a: 17, b: 23 })] }, { text: '17 × 23 = 391.' }],
      expect_final: { tool_result_contains: ['391'] },
    },
  });
});
after(() => fake.stop());

const multiply = { name: 'multiply', description: 'Multiplies', inputSchema: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } } } };

for (const style of STYLES) {
  for (const stream of [false, true]) {
    test(`${style}${stream ? ', streamed' : ''}: fetch drives the machine to the answer`, async () => {
      const run = new Run({ config: { style, model: 'calc', baseUrl: fake.baseUrl(style), stream }, tools: [multiply], prompt: '17 * 23?' });
      run.setApiKey(API_KEY);
      const deltas = [];
      const result = await drive(run, { tools: { multiply: async ({ a, b }) => a * b }, onEvent: (e) => e.type === 'text_delta' && deltas.push(e.text) });
      assert.equal(result.status, 'done');
      assert.equal(result.text, '17 × 23 = 391.');
      assert.equal(deltas.join(''), '17 × 23 = 391.');
      assert.deepEqual(result.toolCalls.map((c) => c.output), ['391']);
    });
  }
}

test('a snapshot taken while tools run restores into a run that finishes', async () => {
  const run = new Run({ config: { style: 'openai', model: 'calc', baseUrl: fake.baseUrl('openai') }, tools: [multiply], prompt: '17 * 23?' });
  run.setApiKey(API_KEY);
  // Drive by hand up to the tool batch.
  let out = run.pollOutput();
  assert.equal(out.type, 'send');
  assert.equal(JSON.parse(out.body).model, 'calc');
  const response = await fetch(out.url, { method: out.method, headers: out.headers, body: out.body });
  run.handleInput({ type: 'response_head', exchange: out.exchange, status: response.status, headers: [...response.headers] });
  run.handleInput({ type: 'response_body', exchange: out.exchange, chunk: new Uint8Array(await response.arrayBuffer()) });
  run.handleInput({ type: 'response_end', exchange: out.exchange });
  do out = run.pollOutput();
  while (out.type === 'event');
  assert.equal(out.type, 'run_tools');
  const [c] = out.calls;

  const state = run.snapshot();
  assert.ok(!state.includes(API_KEY), 'no key in a snapshot');
  const again = Run.restore(state);
  again.setApiKey(API_KEY);
  assert.equal(again.summary().runId, run.summary().runId);
  // The call was handed out when the snapshot was taken: restored, it is in
  // doubt (never silently re-run), and the host supplies its result.
  do out = again.pollOutput();
  while (out.type === 'event');
  assert.equal(out.type, 'suspended');
  const [doubt] = out.requests;
  assert.equal(doubt.kind, 'in_doubt');
  assert.equal(doubt.data.callId, c.callId);
  again.handleInput({ type: 'answer', answer: { id: doubt.id, ok: true, data: { output: '391' } } });
  const result = await drive(again);
  assert.equal(result.text, '17 × 23 = 391.');
});

test('a refused input throws InputError and leaves the machine as it was', () => {
  const run = new Run({ config: { style: 'anthropic', model: 'calc' }, prompt: 'hi' });
  const before = run.snapshot();
  assert.throws(() => run.handleInput({ type: 'response_end', exchange: 99 }), InputError);
  assert.throws(() => run.handleInput({ type: 'no_such_input' }), InputError);
  assert.equal(run.snapshot(), before);
  assert.equal(run.pollOutput().type, 'send');
});

test('bad options and states are refused with their own errors', () => {
  assert.throws(() => new Run({ config: { style: 'telepathy', model: 'x' }, prompt: 'hi' }), ConfigError);
  assert.throws(() => Run.restore('{"format_version": 999}'), StateError);
  assert.throws(() => Run.restore('not json'), StateError);
});
