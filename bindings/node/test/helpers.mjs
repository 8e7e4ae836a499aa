// Shared by the tests: the project's fake provider (tests/src/bin/fake_provider.rs),
// started as a child process on a script of turns, and where things are.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';

const here = dirname(fileURLToPath(import.meta.url));

/** The repository root: NEXUS_REPO (CI runs these tests from a scratch project), else this file's checkout. */
export const repo = process.env.NEXUS_REPO ?? resolve(here, '..', '..', '..');

/** A binary of the main workspace's build (NEXUS_TARGET_DIR, else ./target). */
export function binary(name) {
  const dir = process.env.NEXUS_TARGET_DIR ?? join(repo, 'target');
  const path = join(dir, 'debug', name);
  if (!existsSync(path)) throw new Error(`${path} is missing: cargo build -p nexus-tests --bin fake-provider -p nexus-drive --features cli --bin nexus`);
  return path;
}

export const API_KEY = 'test-key';
export const KEY_ENV = 'NEXUS_NODE_TEST_KEY';
process.env[KEY_ENV] = API_KEY;

/** The directories `scratch` made, removed when the test file's process exits. */
const scratches = [];
process.on('exit', () => {
  for (const dir of scratches) rmSync(dir, { recursive: true, force: true });
});

/** A fresh temporary directory, gone when the tests of this file are done. */
export function scratch() {
  const dir = mkdtempSync(join(tmpdir(), 'nexus-node-'));
  scratches.push(dir);
  return dir;
}

/**
 * The turns of one fake model: `{ turns: [...], expect_final? }` keyed by
 * model name. With `{ log: true }` the server logs every request it
 * receives, read back with `requests(count)`.
 */
export async function fakeProvider(models, { log = false } = {}) {
  const dir = scratch();
  const file = join(dir, 'scripts.json');
  writeFileSync(file, JSON.stringify({ api_key: API_KEY, models }));
  const logFile = join(dir, 'requests.jsonl');
  const args = ['--scripts', file, ...(log ? ['--requests', logFile] : [])];
  const child = spawn(binary('fake-provider'), args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise((ok, fail) => {
    const lines = createInterface({ input: child.stdout });
    lines.once('line', ok);
    child.once('exit', (code) => fail(new Error(`fake-provider exited with ${code}`)));
  });
  const { addr } = JSON.parse(line);
  return {
    addr,
    baseUrl(style) {
      switch (style) {
        case 'anthropic':
          return `http://${addr}`;
        case 'gemini':
          return `http://${addr}/v1beta`;
        default:
          return `http://${addr}/v1`;
      }
    },
    /**
     * The `count` requests received (method, target, body, connection).
     * The server appends them every few milliseconds: this waits up to 10 s.
     */
    async requests(count) {
      if (!log) throw new Error('start the fake with { log: true }');
      const deadline = Date.now() + 10_000;
      for (;;) {
        const text = existsSync(logFile) ? readFileSync(logFile, 'utf8') : '';
        // Only whole lines: the server may be writing the next one.
        const lines = text.split('\n').slice(0, -1).filter((l) => l.trim());
        if (lines.length >= count || Date.now() > deadline) {
          if (lines.length !== count) throw new Error(`expected ${count} requests, the server logged ${lines.length}`);
          return lines.map((l) => JSON.parse(l));
        }
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    stop() {
      child.kill();
    },
  };
}

/** A client option set for `style` against `fake`. */
export function options(fake, style, model, extra = {}) {
  return { style, model, baseUrl: fake.baseUrl(style), apiKeyEnv: KEY_ENV, ...extra };
}

export const STYLES = ['openai', 'anthropic', 'gemini', 'openai-responses'];

/** A turn calling `name` with `args`. */
export function call(name, args) {
  return { name, arguments: JSON.stringify(args) };
}
