// Compiled with `npm run typecheck` (tsc --noEmit): the declarations in
// index.d.ts describe the API as the tests use it.
import {
  Client,
  Run,
  tool,
  relayTool,
  pending,
  agent,
  NexusError,
  CancelledError,
  OutputInvalidError,
  type RunResult,
  type StreamEvent,
} from 'nexus-loop';
import { z } from 'zod';

const client = new Client({ style: 'anthropic', model: 'claude-haiku-4-5', maxTurns: 4, store: 'memory' });
const weather = tool({
  name: 'weather',
  description: 'The weather in a city',
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }: { city: string }, ctx) => (ctx.answer ? `${city}: sunny` : pending({ kind: 'approval', prompt: `Look up ${city}?` })),
});
const lookup = relayTool({ name: 'lookup', inputSchema: { type: 'object' } });

async function main(): Promise<string> {
  const controller = new AbortController();
  const result: RunResult = await client.run('Weather?', { tools: [weather, lookup], signal: controller.signal, waitFor: async () => ({ ok: true }) });
  if (result.status === 'pending' && result.state !== undefined) {
    await client.resume(result.state, { answers: [{ id: result.pending[0].id, ok: true }], tools: [weather] });
  }
  for await (const event of client.stream('Again?', { tools: [weather] })) {
    const e: StreamEvent = event;
    if (e.type === 'text_delta') process.stdout.write(String(e.text));
  }
  const researcher = agent({ name: 'researcher', description: 'Finds facts', system: 'Cite.', tools: [weather], maxTurns: 4 });
  const Weather = z.object({ city: z.string(), celsius: z.number() });
  try {
    const typed = await client.run('Weather?', { tools: [researcher], outputSchema: Weather, outputMode: 'tool', outputRetries: 1 });
    const celsius: number | undefined = typed.output?.celsius;
    for (const request of typed.pending) process.stdout.write(`${request.agent ?? ''} ${request.id} ${celsius}`);
  } catch (e) {
    if (e instanceof OutputInvalidError) process.stdout.write(`${e.raw} ${e.attempts} ${e.errors.join(',')}`);
  }
  const run = new Run({ config: { style: 'openai', model: 'gpt-4o-mini' }, prompt: 'hi' });
  const out = run.pollOutput();
  if (out.type === 'send') run.handleInput({ type: 'response_head', exchange: out.exchange, status: 200, headers: [] });
  try {
    Run.restore(run.snapshot());
  } catch (e) {
    if (e instanceof CancelledError || e instanceof NexusError) return e.kind;
  }
  return result.text;
}
void main;
