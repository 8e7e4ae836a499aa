// An MCP server's tools come through as tools of the loop ({server}__{tool}).
// The server is the project's own test server (tests/mcp/servers/kitchen.py),
// run with the Python that .ci/mcp-deps.sh installs (NEXUS_MCP_PYTHON).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Client, tool, ConfigError } from 'nexus-loop';
import { fakeProvider, options, call, repo } from './helpers.mjs';

const python = process.env.NEXUS_MCP_PYTHON;
const skip = python && existsSync(python) ? false : 'NEXUS_MCP_PYTHON is not set: run eval "$(.ci/mcp-deps.sh)" first';

let fake;
before(async () => {
  fake = await fakeProvider({
    mcp: {
      turns: [{ tool_calls: [call('kitchen__add', { a: 2, b: 40 }), call('local', {})] }, { text: 'The sum is 42.' }],
      expect_final: { tool_result_contains: ['42', 'local ok'] },
    },
  });
});
after(() => fake.stop());

const mcp = () => ({ mcpServers: { kitchen: { command: python, args: [join(repo, 'tests', 'mcp', 'servers', 'kitchen.py'), 'stdio'] } } });

test('an MCP server tool runs beside a JS tool in one turn', { skip }, async () => {
  const client = new Client(options(fake, 'openai', 'mcp', { mcp: mcp() }));
  try {
    const local = tool({ name: 'local', description: 'A JS tool', inputSchema: { type: 'object' }, execute: () => 'local ok' });
    const result = await client.run('Add 2 and 40.', { tools: [local] });
    assert.equal(result.status, 'done');
    assert.equal(result.text, 'The sum is 42.');
    const sum = result.toolCalls.find((c) => c.name === 'kitchen__add');
    assert.equal(sum.isError, false);
    assert.match(sum.output, /42/);
  } finally {
    client.close();
  }
});

test('an MCP server that cannot start is a ConfigError', async () => {
  const broken = { mcpServers: { gone: { command: '/nonexistent/mcp-server', args: [] } } };
  const client = new Client(options(fake, 'openai', 'mcp', { mcp: broken }));
  await assert.rejects(client.run('Hi.'), ConfigError);
});
