// Parity with the `nexus` CLI: the same scenario sends byte-identical request
// bodies from both, and a state written by one resumes in the other.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client, relayTool } from 'nexus-loop';
import { fakeProvider, options, call, scratch, binary, KEY_ENV, STYLES } from './helpers.mjs';

let fake;
before(async () => {
  fake = await fakeProvider({
    parity: {
      turns: [{ text: 'Looking.', tool_calls: [call('lookup', { q: 'nexus' }), call('lookup', { q: 'loop' })] }, { text: 'Both found.' }],
      expect_final: { tool_result_contains: ['nexus: found', 'loop: found'] },
    },
  });
});
after(() => fake.stop());

const schema = { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] };
const lookup = relayTool({ name: 'lookup', description: 'Looks a term up elsewhere', inputSchema: schema });
const SYSTEM = 'You look things up.';
const PROMPT = 'Look up nexus and loop.';

/** Runs `nexus` with `args`; resolves with its exit code and JSON output. */
async function cli(args) {
  try {
    const { stdout } = await promisify(execFile)(binary('nexus'), args);
    return { code: 0, json: JSON.parse(stdout) };
  } catch (e) {
    if (typeof e.code !== 'number') throw e;
    return { code: e.code, json: e.stdout ? JSON.parse(e.stdout) : null, stderr: e.stderr };
  }
}

/** The request bodies a cassette recorded, in order. */
function bodies(cassette) {
  return readFileSync(cassette, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l))
    .filter((e) => e.type === 'request')
    .map((e) => e.text);
}

/** The answer a relay request gets here: every call found. */
function answer(request) {
  const results = request.data.calls.map((c) => ({ id: c.id, output: `${c.input.q}: found`, isError: false }));
  return { id: request.id, ok: true, data: { results } };
}

for (const style of STYLES) {
  test(`${style}: the CLI and the package send the same bytes and resume each other's states`, async () => {
    const dir = scratch();
    const tools = join(dir, 'relay.json');
    writeFileSync(tools, JSON.stringify([{ name: 'lookup', description: 'Looks a term up elsewhere', input_schema: schema }]));

    // The CLI starts a run; it suspends on the relay calls.
    const cliState = join(dir, 'cli-state.json');
    const cliTape = join(dir, 'cli.cassette');
    const started = await cli(['run', '--style', style, '--base-url', fake.baseUrl(style), '--model', 'parity', '--api-key-env', KEY_ENV, '--system', SYSTEM, '--relay', tools, '--state', cliState, '--record', cliTape, '--json', PROMPT]);
    assert.equal(started.code, 3, started.stderr);
    assert.equal(started.json.status, 'pending');

    // The package starts the same run.
    const nodeTape = join(dir, 'node.cassette');
    const client = new Client(options(fake, style, 'parity', { system: SYSTEM, record: nodeTape }));
    const first = await client.run(PROMPT, { tools: [lookup] });
    assert.equal(first.status, 'pending');
    assert.deepEqual(first.pending[0].data.calls.map((c) => c.input), started.json.pending[0].data.calls.map((c) => c.input));

    const [cliFirst] = bodies(cliTape);
    const [nodeFirst] = bodies(nodeTape);
    assert.equal(nodeFirst, cliFirst, 'the first request bodies are byte-identical');

    // The package resumes the CLI's state file…
    const cliSaved = readFileSync(cliState, 'utf8');
    const cliRequest = started.json.pending[0];
    const fromCli = await client.resume(cliSaved, { answers: [answer(cliRequest)], tools: [lookup] });
    assert.equal(fromCli.status, 'done');
    assert.equal(fromCli.text, 'Both found.');

    // …and the CLI resumes the package's state.
    const nodeState = join(dir, 'node-state.json');
    writeFileSync(nodeState, first.state);
    const answers = join(dir, 'answers.json');
    writeFileSync(answers, JSON.stringify([answer(first.pending[0])]));
    const fromNode = await cli(['resume', '--state', nodeState, '--answer', answers, '--api-key-env', KEY_ENV, '--record', cliTape, '--json']);
    assert.equal(fromNode.code, 0, fromNode.stderr);
    assert.equal(fromNode.json.text, 'Both found.');

    // The second request of each resumed run is byte-identical too.
    const cliSecond = bodies(cliTape)[1];
    const nodeSecond = bodies(nodeTape)[1];
    assert.ok(cliSecond.includes('nexus: found'));
    assert.equal(nodeSecond, cliSecond, 'the resumed request bodies are byte-identical');
  });
}
