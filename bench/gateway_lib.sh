# Sourced by the gateway scripts (gateway_profile.sh, gateway_code_pages.sh,
# pgo_build.sh): the shared mock, and a `nexus serve` in front of it. Needs
# python3 and `$shared` (the shared tree) set by the caller.

# A free loopback port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_mock DIR: the shared mock on a free port, its port file and log in
# DIR; sets mock_url and stops the mock when the script exits.
start_mock() {
  # A port file left by an earlier run would name a mock that is gone.
  rm -f "$1/mock.port"
  python3 "$shared/bench/mock_llm.py" --port 0 --port-file "$1/mock.port" > "$1/mock.log" 2>&1 &
  mock=$!
  trap 'kill "$mock" 2> /dev/null || true' EXIT
  for _ in $(seq 50); do [ -s "$1/mock.port" ] && break; sleep 0.1; done
  mock_url="http://127.0.0.1:$(cat "$1/mock.port")"
}

# upstream STYLE: sets upstream_key (the upstream key's variable) and
# upstream_url (the mock's base URL for that style), as gateway_bench.py
# configures its rows.
upstream() {
  case $1 in
    openai | openai-responses) upstream_key=OPENAI_API_KEY upstream_url=$mock_url/v1 ;;
    anthropic) upstream_key=ANTHROPIC_API_KEY upstream_url=$mock_url ;;
    gemini) upstream_key=GEMINI_API_KEY upstream_url=$mock_url ;;
    *) echo "unknown upstream style $1" >&2; return 1 ;;
  esac
}

# wait_listening PORT: until something accepts on 127.0.0.1:PORT (a
# gateway under valgrind takes seconds); 40 s at most.
wait_listening() {
  for _ in $(seq 200); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 0.2)" 2> /dev/null && return 0
    sleep 0.2
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}
