#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the store tests.
#
#   eval "$(.ci/postgres.sh start)"   # exports NEXUS_PG_URL and NEXUS_PG_DIR
#   cargo test -p nexus-drive --features postgres --test store_postgres
#   .ci/postgres.sh stop              # stops it and removes its files
#
# `start` installs PostgreSQL from the distribution's packages when no
# `initdb` can be found, creates a cluster in a fresh temp dir, and starts it
# listening only on a unix socket in that dir (no TCP port to collide with).
# The server refuses to run as root, so as root it runs as the `postgres`
# user (created by the package; created here when missing). Authentication is
# `trust` on the socket: the dir is private to that user and root.
#
# Only the export lines go to stdout; everything else goes to stderr.
set -euo pipefail

say() { echo "postgres.sh: $*" >&2; }

find_bin() {
  local d
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v initdb)")"
    return 0
  fi
  # Debian keeps the server binaries off PATH, one dir per major version.
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

install_postgres() {
  if [ "$(id -u)" -ne 0 ]; then
    say "initdb not found and not root: install PostgreSQL (apt-get install postgresql) first"
    exit 1
  fi
  say "installing PostgreSQL from the distribution packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # The package's own cluster is not used: keep it from being created and started.
  mkdir -p /etc/postgresql-common
  if ! grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf; then
    echo 'create_main_cluster = false' >>/etc/postgresql-common/createcluster.conf
  fi
  # confold: keep the createcluster.conf written above (no conffile prompt).
  apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold postgresql >&2
}

# As root: the user the server runs as (created when the package did not).
server_user() {
  if id postgres >/dev/null 2>&1; then
    echo postgres
    return
  fi
  if ! id nexus-pg >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin nexus-pg
  fi
  echo nexus-pg
}

as_server() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$SERVER_USER" -- "$@"
  else
    "$@"
  fi
}

start() {
  local bin dir port=5432
  bin=$(find_bin) || { install_postgres; bin=$(find_bin) || { say "no initdb after install"; exit 1; }; }
  dir=$(mktemp -d "${TMPDIR:-/tmp}/nexus-pg.XXXXXX")
  if [ "$(id -u)" -eq 0 ]; then
    SERVER_USER=$(server_user)
    chown "$SERVER_USER" "$dir"
  fi
  chmod 700 "$dir"
  say "cluster in $dir ($bin)"
  as_server "$bin/initdb" -D "$dir/data" -U nexus --auth=trust -E UTF8 --no-locale --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  # Durability settings off: the cluster is thrown away after the tests.
  as_server "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-k $dir -p $port -c listen_addresses= -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
    start >&2 || { cat "$dir/server.log" >&2; exit 1; }
  as_server "$bin/createdb" -h "$dir" -p "$port" -U nexus nexus >&2
  echo "$dir" >"${TMPDIR:-/tmp}/nexus-pg.current"
  echo "export NEXUS_PG_DIR='$dir'"
  echo "export NEXUS_PG_URL='host=$dir port=$port user=nexus dbname=nexus'"
}

stop() {
  local dir="${1:-${NEXUS_PG_DIR:-}}" bin
  if [ -z "$dir" ] && [ -f "${TMPDIR:-/tmp}/nexus-pg.current" ]; then
    dir=$(cat "${TMPDIR:-/tmp}/nexus-pg.current")
  fi
  if [ -z "$dir" ] || [ ! -d "$dir" ]; then
    say "no cluster to stop"
    return 0
  fi
  case "$dir" in
    */nexus-pg.*) ;;
    *) say "refusing to remove $dir: not a dir this script made"; exit 1 ;;
  esac
  if [ "$(id -u)" -eq 0 ]; then
    SERVER_USER=$(stat -c %U "$dir")
  fi
  if bin=$(find_bin) && [ -f "$dir/data/postmaster.pid" ]; then
    as_server "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
  fi
  rm -rf "$dir"
  rm -f "${TMPDIR:-/tmp}/nexus-pg.current"
  say "stopped and removed $dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  *) echo "usage: $0 start|stop [DIR]" >&2; exit 2 ;;
esac
