// The tool loop on every wire format, streamed and not, with JS tools.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client, tool } from 'nexus-loop';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fakeProvider, options, STYLES, call, scratch } from './helpers.mjs';

// zod is an optional peer dependency: the zod test runs where it is installed.
const zod = await import('zod').catch(() => null);

let fake;
before(async () => {
  fake = await fakeProvider({
    weather: {
      turns: [{ text: 'Let me look.', tool_calls: [call('get_weather', { city: 'Paris' })], usage: { input: 20, output: 9 } }, { text: 'Sunny, 21 °C in Paris.' }],
      expect_final: { tool_result_contains: ['Paris: sunny, 21'] },
    },
    parallel: {
      turns: [{ tool_calls: [call('meet', { who: 'a' }), call('meet', { who: 'b' })] }, { text: 'Both met.' }],
      expect_final: { tool_result_contains: ['a met b', 'b met a'] },
    },
    throwing: {
      turns: [{ tool_calls: [call('explode', {})] }, { text: 'The tool failed; sorry.' }],
      expect_final: { tool_result_contains: ['the fuse was lit'] },
    },
    zodded: {
      turns: [{ tool_calls: [call('weather', { city: 42 }), call('weather', { city: 'Oslo' })] }, { text: 'Oslo is sunny.' }],
      expect_final: { tool_result_contains: ['Oslo: sunny'] },
    },
    structured: {
      turns: [{ tool_calls: [call('add', { a: 2, b: 3 })] }, { text: '5.' }],
      expect_final: { tool_result_contains: ['sum', '5'] },
    },
  });
});
after(() => fake.stop());

// An async tool: it yields to the event loop before answering.
const getWeather = tool({
  name: 'get_weather',
  description: 'The weather in a city',
  inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  execute: async ({ city }) => {
    await new Promise((r) => setImmediate(r));
    return `${city}: sunny, 21 °C`;
  },
});

for (const style of STYLES) {
  test(`${style}: run drives a tool loop to the answer`, async () => {
    const client = new Client(options(fake, style, 'weather'));
    const result = await client.run('Weather in Paris?', { tools: [getWeather] });
    assert.equal(result.status, 'done');
    assert.equal(result.text, 'Sunny, 21 °C in Paris.');
    assert.equal(result.turns, 2);
    assert.deepEqual(
      result.toolCalls.map((c) => [c.name, c.input, c.output, c.isError]),
      [['get_weather', { city: 'Paris' }, 'Paris: sunny, 21 °C', false]],
    );
    // 20 + 9 on the first turn, the fake's 10 + 5 on the second.
    assert.deepEqual([result.usage.promptTokens, result.usage.completionTokens], [30, 14]);
    assert.deepEqual(result.pending, []);
    assert.equal(result.state, undefined);
  });

  test(`${style}: stream yields the events, then the result`, async () => {
    const client = new Client(options(fake, style, 'weather'));
    const events = [];
    for await (const event of client.stream('Weather in Paris?', { tools: [getWeather] })) events.push(event);
    const types = events.map((e) => e.type);
    const text = events.filter((e) => e.type === 'text_delta').map((e) => e.text).join('');
    assert.equal(text, 'Let me look.Sunny, 21 °C in Paris.');
    const finished = events.find((e) => e.type === 'tool_call_finished');
    assert.equal(finished.call.name, 'get_weather');
    const toolResult = events.find((e) => e.type === 'tool_result');
    assert.equal(toolResult.result.output, 'Paris: sunny, 21 °C');
    assert.ok(types.indexOf('tool_call_finished') < types.indexOf('tool_result'));
    assert.equal(types.at(-1), 'done');
    assert.equal(events.at(-1).result.text, 'Sunny, 21 °C in Paris.');
    assert.equal(types.filter((t) => t === 'turn_started').length, 2);
  });
}

test('parallel calls run concurrently: each waits until the other has started', async () => {
  const started = new Set();
  const waiters = [];
  const meet = tool({
    name: 'meet',
    description: 'Waits for the other call',
    inputSchema: { type: 'object', properties: { who: { type: 'string' } } },
    execute: async ({ who }) => {
      started.add(who);
      waiters.forEach((w) => w());
      // Resolves only once both calls are in flight: sequential calls would never get here.
      while (started.size < 2) await new Promise((r) => waiters.push(r));
      return `${who} met ${who === 'a' ? 'b' : 'a'}`;
    },
  });
  const result = await new Client(options(fake, 'openai', 'parallel')).run('Meet.', { tools: [meet] });
  assert.equal(result.text, 'Both met.');
  assert.deepEqual(result.toolCalls.map((c) => c.output), ['a met b', 'b met a']);
});

test('the runs of one client share its keep-alive connections, whatever their tools', async () => {
  const logged = await fakeProvider(
    {
      weather: {
        turns: [{ tool_calls: [call('get_weather', { city: 'Paris' })] }, { text: 'Sunny, 21 °C in Paris.' }],
        expect_final: { tool_result_contains: ['Paris: sunny, 21'] },
      },
    },
    { log: true },
  );
  try {
    const client = new Client(options(logged, 'openai', 'weather'));
    assert.equal((await client.run('Weather in Paris?', { tools: [getWeather] })).text, 'Sunny, 21 °C in Paris.');
    // Another call's tools: a client of its own on the same pool.
    const again = tool({ ...getWeather, name: 'get_weather', execute: async ({ city }) => `${city}: sunny, 21 °C` });
    assert.equal((await client.run('Weather in Paris?', { tools: [again] })).text, 'Sunny, 21 °C in Paris.');
    const conns = (await logged.requests(4)).map((r) => r.connection);
    assert.deepEqual(conns, [conns[0], conns[0], conns[0], conns[0]]);
  } finally {
    logged.stop();
  }
});

test('metrics count the model requests and tool calls in Prometheus text', async () => {
  const client = new Client(options(fake, 'openai', 'weather'));
  await client.run('Weather in Paris?', { tools: [getWeather] });
  await client.run('Weather in Paris?', { tools: [getWeather] });
  const text = client.metrics();
  assert.match(text, /^nexus_llm_requests_total\{[^}]*\} 4$/m);
  assert.match(text, /^nexus_tool_calls_total\{[^}]*tool="get_weather"[^}]*\} 2$/m);
});

test('a tool that throws gives the model an error result and the run goes on', async () => {
  const explode = tool({
    name: 'explode',
    description: 'Always fails',
    inputSchema: { type: 'object' },
    execute: () => {
      throw new Error('the fuse was lit');
    },
  });
  const result = await new Client(options(fake, 'anthropic', 'throwing')).run('Go.', { tools: [explode] });
  assert.equal(result.status, 'done');
  assert.equal(result.toolCalls[0].isError, true);
  assert.equal(result.toolCalls[0].output, 'the fuse was lit');
  assert.equal(result.text, 'The tool failed; sorry.');
});

test('a structured return value reaches the model as JSON text', async () => {
  const add = tool({
    name: 'add',
    description: 'Adds',
    inputSchema: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } } },
    execute: ({ a, b }) => ({ sum: a + b }),
  });
  const result = await new Client(options(fake, 'gemini', 'structured')).run('2+3?', { tools: [add] });
  assert.equal(result.toolCalls[0].output, '{"sum":5}');
  assert.equal(result.text, '5.');
});

test('a zod schema is declared through its own JSON-Schema export and parses the arguments', { skip: zod === null && 'zod is not installed' }, async () => {
  const { z } = zod;
  const weather = tool({
    name: 'weather',
    description: 'The weather in a city',
    inputSchema: z.object({ city: z.string() }),
    execute: ({ city }) => `${city}: sunny`,
  });
  const tape = join(scratch(), 'zod.cassette');
  const client = new Client(options(fake, 'openai', 'zodded', { record: tape }));
  const result = await client.run('Weather?', { tools: [weather] });
  assert.equal(result.text, 'Oslo is sunny.');
  // The call whose arguments do not fit the schema got zod's complaint as an error result.
  assert.equal(result.toolCalls[0].isError, true);
  assert.match(result.toolCalls[0].output, /expected string/i);
  assert.deepEqual(result.toolCalls[1], { id: result.toolCalls[1].id, name: 'weather', input: { city: 'Oslo' }, output: 'Oslo: sunny', isError: false });
  // What the provider was sent is zod's own export of the schema.
  const first = readFileSync(tape, 'utf8').split('\n').map((l) => l && JSON.parse(l)).find((e) => e?.type === 'request');
  const declared = JSON.parse(first.text).tools[0].function.parameters;
  assert.deepEqual(declared, z.toJSONSchema(z.object({ city: z.string() })));
});
