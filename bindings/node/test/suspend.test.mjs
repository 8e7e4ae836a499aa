// Suspension: a tool's pending(...) answered in-process (waitFor), or kept
// (state text, or a store by run id) and resumed — in this process or another.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, tool, pending, relayTool, NotFoundError, InputError, ConfigError } from 'nexus-loop';
import { fakeProvider, options, call, scratch } from './helpers.mjs';

const here = dirname(fileURLToPath(import.meta.url));
let fake;
before(async () => {
  const approval = {
    turns: [{ tool_calls: [call('send_email', { to: 'sam@example.com' })] }, { text: 'Sent.' }],
    expect_final: { tool_result_contains: ['sent to sam@example.com'] },
  };
  fake = await fakeProvider({
    approval,
    declined: { turns: [{ tool_calls: [call('send_email', { to: 'sam@example.com' })] }, { text: 'Not sent.' }], expect_final: { tool_result_contains: ['declined'] } },
    relay: {
      turns: [{ tool_calls: [call('lookup', { q: 'nexus' })] }, { text: 'Found it.' }],
      expect_final: { tool_result_contains: ['nexus: a tool loop'] },
    },
  });
});
after(() => fake.stop());

const executed = [];
const sendEmail = tool({
  name: 'send_email',
  description: 'Sends an email once approved',
  inputSchema: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] },
  execute: ({ to }, ctx) => {
    if (!ctx.answer) return pending({ kind: 'approval', prompt: `Email ${to}?`, data: { to } });
    executed.push(ctx.answer);
    return `sent to ${ctx.request.data.to}`;
  },
});

test('waitFor answers the request in-process and the tool runs again with the answer', async () => {
  const asked = [];
  const client = new Client(options(fake, 'openai', 'approval'));
  const result = await client.run('Email Sam.', {
    tools: [sendEmail],
    waitFor: async (request) => {
      asked.push(request);
      return { ok: true, data: { by: 'ops' } };
    },
  });
  assert.equal(result.status, 'done');
  assert.equal(result.text, 'Sent.');
  assert.equal(asked.length, 1);
  assert.equal(asked[0].kind, 'approval');
  assert.equal(asked[0].prompt, 'Email sam@example.com?');
  assert.ok(asked[0].id.length > 0);
  assert.deepEqual(executed.at(-1), { id: asked[0].id, ok: true, data: { by: 'ops' } });
});

test('without waitFor the run ends pending with its state, and resumes from it', async () => {
  const client = new Client(options(fake, 'anthropic', 'approval'));
  const first = await client.run('Email Sam.', { tools: [sendEmail] });
  assert.equal(first.status, 'pending');
  assert.equal(first.pending.length, 1);
  assert.equal(first.pending[0].kind, 'approval');
  assert.equal(typeof first.state, 'string');
  assert.equal(JSON.parse(first.state).runId, first.runId);
  assert.ok(!first.state.includes('test-key'), 'the state holds no API key');

  // An answer to no outstanding request is refused and changes nothing.
  await assert.rejects(client.resume(first.state, { answers: [{ id: 'nope', ok: true }], tools: [sendEmail] }), InputError);

  const done = await client.resume(first.state, { answers: [{ id: first.pending[0].id, ok: true }], tools: [sendEmail] });
  assert.equal(done.status, 'done');
  assert.equal(done.text, 'Sent.');
  assert.equal(done.toolCalls.at(-1).output, 'sent to sam@example.com');
});

for (const store of ['dir', 'sqlite']) {
  test(`a run stored in a ${store} store is resumed by its id from a second Node process`, async () => {
    const where = store === 'dir' ? `dir:${scratch()}` : `sqlite:${join(scratch(), 'runs.db')}`;
    const client = new Client(options(fake, 'gemini', 'approval', { store: where }));
    const first = await client.run('Email Sam.', { tools: [sendEmail] });
    assert.equal(first.status, 'pending');

    const job = { options: options(fake, 'gemini', 'approval', { store: where }), runId: first.runId, answers: [{ id: first.pending[0].id, ok: true }] };
    const { stdout } = await promisify(execFile)(process.execPath, [join(here, 'resume-in-child.mjs'), JSON.stringify(job)]);
    const done = JSON.parse(stdout);
    assert.equal(done.status, 'done');
    assert.equal(done.text, 'Sent.');
    assert.equal(done.toolCalls.at(-1).output, 'sent to sam@example.com');

    // Finished: the store no longer holds it.
    await assert.rejects(client.resume(first.runId, { answers: job.answers, tools: [sendEmail] }), NotFoundError);
  });
}

test('waitFor may answer true or false; a pending result resumes as it is', async () => {
  const client = new Client(options(fake, 'gemini', 'approval'));
  const approved = await client.run('Email Sam.', { tools: [sendEmail], waitFor: () => true });
  assert.equal(approved.text, 'Sent.');
  assert.equal(executed.at(-1).ok, true);

  const first = await client.run('Email Sam.', { tools: [sendEmail] });
  const done = await client.resume(first, { answers: [{ id: first.pending[0].id, ok: true }], tools: [sendEmail] });
  assert.equal(done.text, 'Sent.');
  // A finished result has nothing to resume.
  await assert.rejects(client.resume(done), ConfigError);
});

test('a declined request gives the model an error result', async () => {
  const declined = await new Client(options(fake, 'openai', 'declined')).run('Email Sam.', { tools: [sendEmail], waitFor: async () => false });
  assert.equal(declined.status, 'done');
  assert.equal(declined.toolCalls[0].isError, true);
  assert.match(declined.toolCalls[0].output, /declined/);
});

test('a memory store resumes by run id in the same process', async () => {
  const client = new Client(options(fake, 'openai-responses', 'approval', { store: 'memory' }));
  const first = await client.run('Email Sam.', { tools: [sendEmail] });
  const done = await client.resume(first.runId, { answers: [{ id: first.pending[0].id, ok: true }], tools: [sendEmail] });
  assert.equal(done.text, 'Sent.');
});

test('a relay tool returns its calls to the caller, who answers with the results', async () => {
  const lookup = relayTool({ name: 'lookup', description: 'Looks a term up elsewhere', inputSchema: { type: 'object', properties: { q: { type: 'string' } } } });
  const client = new Client(options(fake, 'openai', 'relay'));
  const first = await client.run('What is nexus?', { tools: [lookup] });
  assert.equal(first.status, 'pending');
  const [request] = first.pending;
  assert.equal(request.kind, 'tool_call');
  const [relayed] = request.data.calls;
  assert.equal(relayed.name, 'lookup');
  assert.deepEqual(relayed.input, { q: 'nexus' });

  const results = [{ id: relayed.id, output: 'nexus: a tool loop', isError: false }];
  const done = await client.resume(first.state, { answers: [{ id: request.id, ok: true, data: { results } }], tools: [lookup] });
  assert.equal(done.status, 'done');
  assert.equal(done.text, 'Found it.');
});
