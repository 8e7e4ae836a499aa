// Builds the native module from source with cargo and puts it beside
// index.js as nexus.node. Run by `npm install` (the package's `install`
// script), so installing the package needs Rust (1.89 or later) and nothing
// else: no prebuilt binary is downloaded.
//
//   node build.mjs             release build
//   node build.mjs --debug     debug build (quicker, for working on the binding)
//   node build.mjs --copy-only copy an existing release build
//
// CARGO_TARGET_DIR is honoured (CI points it at a shared target directory).
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = new Set(process.argv.slice(2));
const debug = args.has('--debug') || process.env.NEXUS_NODE_PROFILE === 'debug';
const targetDir = process.env.CARGO_TARGET_DIR ?? join(here, 'target');

if (!args.has('--copy-only')) {
  const cargo = process.env.CARGO ?? 'cargo';
  const cargoArgs = ['build', '--manifest-path', join(here, 'Cargo.toml'), '--locked'];
  if (!debug) cargoArgs.push('--release');
  const built = spawnSync(cargo, cargoArgs, { stdio: 'inherit', env: { ...process.env, CARGO_TARGET_DIR: targetDir } });
  if (built.error) {
    console.error(`nexus-loop: cannot run ${cargo} (${built.error.message}); building this package needs Rust: https://rustup.rs`);
    process.exit(1);
  }
  if (built.status !== 0) process.exit(built.status ?? 1);
}

const library = {
  linux: 'libnexus_node.so',
  darwin: 'libnexus_node.dylib',
  win32: 'nexus_node.dll',
}[process.platform] ?? 'libnexus_node.so';
const from = join(targetDir, debug ? 'debug' : 'release', library);
if (!existsSync(from)) {
  console.error(`nexus-loop: the build left no ${from}`);
  process.exit(1);
}
copyFileSync(from, join(here, 'nexus.node'));
