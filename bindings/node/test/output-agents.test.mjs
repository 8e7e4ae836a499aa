// Typed output (SPEC §16) and sub-agents (SPEC §17) through the package:
// outputSchema as JSON Schema and zod, a retried invalid answer, the output
// errors; agent({...}) in tools, a child's suspension answered by waitFor
// and by a resume in a second process, and agentsDir.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, tool, pending, agent, OutputError, OutputInvalidError, ConfigError } from 'nexus-loop';
import { fakeProvider, options, call, scratch } from './helpers.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const VALID = { city: 'Paris', celsius: 18 };
const SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' }, celsius: { type: 'number' } },
  required: ['city', 'celsius'],
};
const mailerTurns = [{ tool_calls: [call('mailer', { prompt: 'Email Sam.' })] }, { text: 'Done: Sam has his email.' }];
const childTurns = [{ tool_calls: [call('send_email', { to: 'sam@example.com' })] }, { text: 'Sent to Sam.' }];

let fake;
before(async () => {
  fake = await fakeProvider({
    tooled: { turns: [{ tool_calls: [call('final_result', VALID)] }] },
    native: { turns: [{ text: JSON.stringify(VALID) }] },
    retried: { turns: [{ text: '{"city": "Paris", "celsius": "warm"}' }, { text: JSON.stringify(VALID) }] },
    invalid: { turns: [{ text: '{"city": "Paris", "celsius": "warm"}' }] },
    parent: { turns: mailerTurns },
    child: { turns: childTurns, expect_final: { tool_result_contains: ['sent to sam@example.com'] } },
  });
});
after(() => fake.stop());

const sendEmail = tool({
  name: 'send_email',
  description: 'Sends an email once approved',
  inputSchema: { type: 'object', properties: { to: { type: 'string' } }, required: ['to'] },
  execute: ({ to }, ctx) => (ctx.answer ? `sent to ${to}` : pending({ kind: 'approval', prompt: `Email ${to}?` })),
});
const mailer = agent({ name: 'mailer', description: 'Sends emails.', system: 'You send emails.', tools: [sendEmail], model: 'child' });

test('a JSON Schema output in tool mode is the validated value, on every style', async () => {
  for (const style of ['openai', 'anthropic', 'gemini', 'openai-responses']) {
    const client = new Client(options(fake, style, 'tooled'));
    const result = await client.run('Weather in Paris?', { outputSchema: SCHEMA, outputMode: 'tool' });
    assert.equal(result.status, 'done', style);
    assert.deepEqual(result.output, VALID, style);
    assert.equal(result.outputMode, 'tool', style);
  }
});

test('a zod output schema goes out as the native field and parses the result', async () => {
  const { z } = await import('zod');
  const Weather = z
    .object({ city: z.string(), celsius: z.number(), note: z.string().default('none') })
    .transform((w) => ({ ...w, fahrenheit: w.celsius * 1.8 + 32 }));
  const client = new Client(options(fake, 'openai', 'native', { outputSchema: Weather, outputMode: 'native' }));
  const result = await client.run('Weather in Paris?');
  assert.equal(result.outputMode, 'native');
  assert.deepEqual(result.output, { city: 'Paris', celsius: 18, note: 'none', fahrenheit: 64.4 }, "zod's parse made the value");
});

test('an invalid answer is retried, then spent retries reject with OutputInvalidError', async () => {
  const client = new Client(options(fake, 'anthropic', 'retried'));
  const result = await client.run('Weather?', { outputSchema: SCHEMA, outputMode: 'prompted' });
  assert.deepEqual(result.output, VALID);
  assert.equal(result.turns, 2);
  const strict = new Client(options(fake, 'openai', 'invalid'));
  await assert.rejects(strict.run('Weather?', { outputSchema: SCHEMA, outputMode: 'prompted', outputRetries: 0 }), (e) => {
    assert.ok(e instanceof OutputInvalidError && e instanceof OutputError, e.name);
    assert.equal(e.kind, 'output_invalid');
    assert.equal(e.attempts, 1);
    assert.match(e.raw, /warm/);
    assert.ok(e.errors.length > 0);
    return true;
  });
  assert.throws(() => new Client(options(fake, 'openai', 'x', { outputMode: 'json', outputSchema: SCHEMA })), ConfigError);
});

test("a child agent's tool suspends and waitFor answers it by its qualified id", async () => {
  const asked = [];
  const client = new Client(options(fake, 'openai', 'parent'));
  const result = await client.run('Email Sam.', { tools: [mailer], waitFor: (r) => (asked.push(r), true) });
  assert.equal(result.status, 'done');
  assert.equal(result.text, 'Done: Sam has his email.');
  assert.deepEqual(result.toolCalls.map((c) => [c.name, c.output]), [['mailer', 'Sent to Sam.']]);
  assert.equal(asked.length, 1);
  assert.equal(asked[0].agent, result.toolCalls[0].id, "the agent path is the delegating call's id");
  assert.ok(asked[0].id.startsWith(`${asked[0].agent}/`));
  assert.deepEqual(result.agents.map((a) => [a.name, a.status]), [['mailer', 'done']]);
});

test("a child's pending request resumes in a second process, and stream events carry the agent path", async () => {
  const store = `sqlite:${join(scratch(), 'runs.db')}`;
  const client = new Client(options(fake, 'anthropic', 'parent', { store }));
  const events = [];
  for await (const e of client.stream('Email Sam.', { tools: [mailer] })) events.push(e);
  const first = events.at(-1).result;
  assert.equal(first.status, 'pending');
  const [request] = first.pending;
  assert.ok(request.agent && request.id.startsWith(`${request.agent}/`), JSON.stringify(request));
  const nested = events.filter((e) => e.type === 'agent');
  assert.ok(nested.length > 0 && nested.every((e) => e.agent === request.agent));
  assert.deepEqual(nested.filter((e) => e.event.type === 'pending').map((e) => e.event.request.id), [request.id]);
  const job = { options: options(fake, 'anthropic', 'parent', { store }), runId: first.runId, answers: [{ id: request.id, ok: true }], agent: true };
  const { stdout } = await promisify(execFile)(process.execPath, [join(here, 'resume-in-child.mjs'), JSON.stringify(job)]);
  const other = JSON.parse(stdout);
  assert.equal(other.status, 'done');
  assert.equal(other.text, 'Done: Sam has his email.');
  assert.equal(other.toolCalls[0].output, 'Sent to Sam.');
});

test('agentsDir reads Markdown agents whose tools are the run’s', async () => {
  const dir = join(scratch(), 'agents');
  mkdirSync(dir);
  writeFileSync(join(dir, 'mailer.md'), '---\nname: mailer\ndescription: Sends emails.\ntools: send_email\nmodel: child\n---\nYou send emails.\n');
  const client = new Client(options(fake, 'gemini', 'parent', { agentsDir: dir }));
  const result = await client.run('Email Sam.', { tools: [sendEmail], waitFor: () => true });
  assert.equal(result.status, 'done');
  assert.equal(result.toolCalls[0].output, 'Sent to Sam.');
  writeFileSync(join(dir, 'broken.md'), '---\nname: broken\n---\n');
  await assert.rejects(new Client(options(fake, 'gemini', 'parent', { agentsDir: dir })).run('x'), (e) => {
    assert.ok(e instanceof ConfigError);
    assert.match(e.message, /broken\.md:1/);
    return true;
  });
});
