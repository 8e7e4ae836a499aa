#!/usr/bin/env node
// The shared overhead scenario through the OpenAI Agents SDK for TypeScript
// (`@openai/agents`): `OpenAIChatCompletionsModel` over the `openai` client
// pointed at the mock, two function tools with zod parameters, `run(agent,
// question)` per request, tracing off.
import { main, packageVersion, OPENAI_BASE, API_KEY, QUESTION, SYSTEM, getWeather, add } from './harness.mjs';

const version = packageVersion('@openai/agents');

await main({
  framework: 'openai-agents-js',
  version,
  setup: async () => {
    const { Agent, run, tool, setTracingDisabled, OpenAIChatCompletionsModel } = await import('@openai/agents');
    const { default: OpenAI } = await import('openai');
    const { z } = await import('zod');
    setTracingDisabled(true);
    const model = new OpenAIChatCompletionsModel(new OpenAI({ baseURL: OPENAI_BASE, apiKey: API_KEY }), 'mock-model');
    const agent = new Agent({
      name: 'bench',
      instructions: SYSTEM,
      model,
      tools: [
        tool({ name: 'get_weather', description: 'Get the current weather for a city.', parameters: z.object({ city: z.string() }), execute: getWeather }),
        tool({ name: 'add', description: 'Add two integers.', parameters: z.object({ a: z.number().int(), b: z.number().int() }), execute: add }),
      ],
    });
    return async () => (await run(agent, QUESTION)).finalOutput;
  },
});
