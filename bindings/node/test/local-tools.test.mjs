// The built-in tools (confined to `root`) and Agent Skills, set up by the client.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client, ConfigError } from 'nexus-loop';
import { fakeProvider, options, call, scratch, repo } from './helpers.mjs';

let fake;
before(async () => {
  fake = await fakeProvider({
    reader: {
      turns: [{ tool_calls: [call('read', { path: 'note.txt' }), call('read', { path: '../outside.txt' })] }, { text: 'It says hi.' }],
      expect_final: { tool_result_contains: ['the note says hi'] },
    },
    skilled: {
      turns: [{ tool_calls: [call('skill', { name: 'mcp-builder' })] }, { text: 'Loaded.' }],
      expect_final: { tool_result_contains: ['MCP'] },
    },
  });
});
after(() => fake.stop());

test('a built-in tool reads inside its root and nowhere else', async () => {
  const root = scratch();
  writeFileSync(join(root, 'note.txt'), 'the note says hi\n');
  const client = new Client(options(fake, 'anthropic', 'reader', { builtins: ['read'], root }));
  const result = await client.run('What does the note say?');
  assert.equal(result.text, 'It says hi.');
  const [inside, outside] = result.toolCalls;
  assert.equal(inside.isError, false);
  assert.match(inside.output, /the note says hi/);
  assert.equal(outside.isError, true);
});

test('skills are listed to the model and loaded by the skill tool', async () => {
  const client = new Client(options(fake, 'openai', 'skilled', { skills: [join(repo, 'nexus-drive', 'tests', 'fixtures', 'skills', 'anthropic')] }));
  const result = await client.run('Build an MCP server.');
  assert.equal(result.text, 'Loaded.');
  assert.equal(result.toolCalls[0].isError, false);
  assert.match(result.messages[0].content[0].text ?? '', /Build an MCP server/);
});

test('an unknown built-in is a ConfigError', async () => {
  const client = new Client(options(fake, 'openai', 'reader', { builtins: ['teleport'] }));
  await assert.rejects(client.run('Hi.'), ConfigError);
});
