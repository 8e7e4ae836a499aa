#!/usr/bin/env bash
# The crates a library user's build compiles: a throwaway crate depending on
# nexus-drive with its default features, against one with blocking + sqlite,
# both resolved from this workspace's lock file. Prints both counts and fails
# when the defaults pull more than blocking + sqlite does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
mkdir -p "$probe/src"
echo 'fn main() {}' > "$probe/src/main.rs"

count() { # $1: the dependency's features, as a TOML table's tail
  cat > "$probe/Cargo.toml" <<TOML
[package]
name = "nexus-user"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]

[dependencies]
nexus-drive = { path = "$root/nexus-drive"$1 }
TOML
  cp "$root/Cargo.lock" "$probe/Cargo.lock"
  # Every crate compiled for it (build scripts' dependencies too), the user's own crate left out.
  (cd "$probe" && cargo tree -e no-dev --prefix none) | sed 's/ (\*)//; s/ (proc-macro)//' | sort -u |
    grep -vc '^nexus-user '
}

defaults=$(count "")
baseline=$(count ', default-features = false, features = ["blocking", "sqlite"]')
echo "crates compiled for a library user: default features $defaults, blocking + sqlite $baseline"
if [ "$defaults" -ge "$baseline" ]; then
  echo "nexus-drive's default features pull more crates than blocking + sqlite" >&2
  exit 1
fi
