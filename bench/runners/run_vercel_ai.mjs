#!/usr/bin/env node
// The shared overhead scenario through the Vercel AI SDK (`ai` with
// `@ai-sdk/openai`'s Chat Completions model pointed at the mock): two tools
// with zod input schemas, `generateText` with up to five steps per request.
import { main, packageVersion, OPENAI_BASE, API_KEY, QUESTION, SYSTEM, getWeather, add } from './harness.mjs';

const version = packageVersion('ai');

await main({
  framework: 'vercel-ai',
  version,
  setup: async () => {
    const { generateText, tool, stepCountIs } = await import('ai');
    const { createOpenAI } = await import('@ai-sdk/openai');
    const { z } = await import('zod');
    const model = createOpenAI({ baseURL: OPENAI_BASE, apiKey: API_KEY }).chat('mock-model');
    const tools = {
      get_weather: tool({ description: 'Get the current weather for a city.', inputSchema: z.object({ city: z.string() }), execute: async (a) => getWeather(a) }),
      add: tool({ description: 'Add two integers.', inputSchema: z.object({ a: z.number().int(), b: z.number().int() }), execute: async (a) => add(a) }),
    };
    return async () =>
      (await generateText({ model, system: SYSTEM, prompt: QUESTION, tools, stopWhen: stepCountIs(5) })).text;
  },
});
