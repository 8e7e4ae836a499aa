// The shared overhead scenario's runner protocol for Node runners, as the
// harness's own runners/harness.py speaks it (shared/bench/README.md):
// `--serve` prints {"ready":true,"init_ms":…} and answers `warmup K`,
// `run K` and `quit` on stdin; without it, `--warmup` then `--runs`
// requests and the summary line. The tools count their calls, so a row is
// `final_ok` only when every request ran both tools with the scripted
// arguments and ended in the scripted text.
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';
import { readFileSync } from 'node:fs';

export const MOCK_URL = (process.env.MOCK_URL ?? 'http://127.0.0.1:8900').replace(/\/$/, '');
export const OPENAI_BASE = `${MOCK_URL}/v1`;
export const API_KEY = 'sk-mock-not-a-real-key';
export const QUESTION = "What's the weather in Paris and what is 2+2?";
export const SYSTEM = 'You are a helpful assistant.';
const FINAL_TEXT = 'The weather in Paris is Sunny, 22C. And 2 + 2 = 4.';
process.env.OPENAI_API_KEY ??= API_KEY;

/**
 * An installed package's version, read from its package.json beside the
 * runners (not through its exports map, which may not export the file).
 */
export function packageVersion(name) {
  return JSON.parse(readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url), 'utf8')).version;
}

const log = { weather: 0, add: 0, badArgs: 0 };

/** The two native tools' bodies, counting calls and checking arguments. */
export function getWeather({ city }) {
  log.weather += 1;
  if (city !== 'Paris') log.badArgs += 1;
  return `The weather in ${city} is Sunny, 22C.`;
}

export function add({ a, b }) {
  log.add += 1;
  if (Number(a) + Number(b) !== 4) log.badArgs += 1;
  return String(Number(a) + Number(b));
}

export const WEATHER_SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' } },
  required: ['city'],
  additionalProperties: false,
};
export const ADD_SCHEMA = {
  type: 'object',
  properties: { a: { type: 'integer' }, b: { type: 'integer' } },
  required: ['a', 'b'],
  additionalProperties: false,
};

// Nearest-rank percentile, as the harness computes it.
function pct(sorted, q) {
  if (!sorted.length) return null;
  const k = Math.max(0, Math.min(sorted.length - 1, Math.ceil((q / 100) * sorted.length) - 1));
  return sorted[k];
}

/**
 * Runs the protocol. `setup` builds the agent (timed as init) and returns
 * `runOnce`, one scenario request resolving to the final text.
 */
export async function main({ framework, version, setup }) {
  const t0 = performance.now();
  const runOnce = await setup();
  const initMs = performance.now() - t0;
  const lat = [];
  let requests = 0;
  let textOk = true;
  let lastText = null;
  let error = null;

  async function batch(k, record) {
    let ok = true;
    for (let i = 0; i < k; i++) {
      const start = performance.now();
      let text;
      try {
        text = await runOnce();
      } catch (e) {
        error = String(e?.stack ?? e?.message ?? e).slice(0, 500);
        textOk = false;
        return false;
      }
      const ms = performance.now() - start;
      requests += 1;
      lastText = text;
      if (typeof text !== 'string' || !text.includes(FINAL_TEXT)) {
        ok = false;
        textOk = false;
      }
      if (record) lat.push(ms);
    }
    return ok;
  }

  const round = (x) => (x == null ? null : Math.round(x * 10000) / 10000);
  function summary() {
    const s = [...lat].sort((x, y) => x - y);
    const n = s.length;
    const toolsOk = log.weather === requests && log.add === requests && log.badArgs === 0;
    return {
      n,
      mean_ms: n ? round(s.reduce((a, b) => a + b, 0) / n) : null,
      p50_ms: round(pct(s, 50)),
      p95_ms: round(pct(s, 95)),
      min_ms: n ? round(s[0]) : null,
      max_ms: n ? round(s[n - 1]) : null,
      framework,
      version,
      init_ms: round(initMs),
      final_ok: textOk && toolsOk && requests > 0 && error === null,
      requests_total: requests,
      tool_calls: { get_weather: log.weather, add: log.add, bad_args: log.badArgs },
      last_text: lastText,
      error,
      node: process.version,
    };
  }

  const emit = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);
  const args = process.argv.slice(2);
  const flag = (name, fallback) => {
    const i = args.indexOf(name);
    return i >= 0 ? Number(args[i + 1]) : fallback;
  };
  if (!args.includes('--serve')) {
    await batch(flag('--warmup', Number(process.env.BENCH_WARMUP ?? 20)), false);
    await batch(flag('--runs', Number(process.env.BENCH_RUNS ?? 200)), true);
    emit(summary());
    return;
  }
  emit({ ready: true, framework, init_ms: round(initMs) });
  const rl = createInterface({ input: process.stdin });
  for await (const line of rl) {
    const [cmd, k] = line.trim().split(/\s+/);
    if (cmd === 'warmup') {
      const ok = await batch(Number(k), false);
      emit({ warmup: Number(k), ok, error });
    } else if (cmd === 'run') {
      const before = lat.length;
      const ok = await batch(Number(k), true);
      emit({ lat: lat.slice(before).map(round), ok, error });
    } else if (cmd === 'quit') {
      break;
    }
  }
  emit(summary());
  rl.close();
}
