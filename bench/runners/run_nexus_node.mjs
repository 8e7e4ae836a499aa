#!/usr/bin/env node
// The shared overhead scenario through the Node package (`nexus-loop`): two
// native tools, `client.run` per request, the OpenAI style against the
// harness's mock. `nexus-loop` must resolve from this file's directory
// (bench/run.sh copies the runners next to an `npm install ./bindings/node`).
import { main, packageVersion, OPENAI_BASE, QUESTION, SYSTEM, getWeather, add, WEATHER_SCHEMA, ADD_SCHEMA } from './harness.mjs';

const version = packageVersion('nexus-loop');

await main({
  framework: 'nexus-node',
  version,
  setup: async () => {
    const { Client, tool } = await import('nexus-loop');
    const tools = [
      tool({ name: 'get_weather', description: 'Get the current weather for a city.', inputSchema: WEATHER_SCHEMA, execute: getWeather }),
      tool({ name: 'add', description: 'Add two integers.', inputSchema: ADD_SCHEMA, execute: add }),
    ];
    const client = new Client({ style: 'openai', model: 'mock-model', baseUrl: OPENAI_BASE, system: SYSTEM });
    return async () => (await client.run(QUESTION, { tools })).text;
  },
});
