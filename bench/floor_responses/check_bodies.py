"""Checks that the Responses floor sends what our runner sends: runs
`overhead --style openai-responses` (whole, then streamed) for one request
against the shared mock, records the two request bodies of each, and compares
them with bodies.py's. Content must be equal (as JSON); the line also says
whether the bytes are identical.

    python3 check_bodies.py PATH/TO/overhead      (NEXUS_SHARED locates the shared tree)

Exit status 1, with the first difference, when the content differs.
"""
import json
import os
import subprocess
import sys
import threading

sys.dont_write_bytecode = True  # nothing written next to the shared tree or here

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bodies  # noqa: E402  (puts the shared bench on sys.path)
import mock_llm  # noqa: E402


def first_difference(a, b, path="$"):
    if type(a) is not type(b):
        return f"{path}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'the floor' if k in a else 'the runner'}"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def main():
    runner = sys.argv[1]
    seen = []
    route = mock_llm.route

    def recording(method, target, body):
        if method == "POST" and target.endswith("/responses"):
            seen.append(body)
        return route(method, target, body)

    mock_llm.route = recording
    srv = mock_llm.Server(("127.0.0.1", 0), mock_llm.Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    env = dict(os.environ, MOCK_URL=f"http://127.0.0.1:{srv.server_address[1]}")
    bad = 0
    try:
        for stream in (False, True):
            seen.clear()
            argv = [runner, "--style", "openai-responses", "--warmup", "0", "--runs", "1"]
            out = subprocess.run(argv + (["--stream"] if stream else []), env=env, capture_output=True,
                                 text=True, timeout=60)
            summary = json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}
            if not summary.get("final_ok") or len(seen) != 2:
                print(f"runner did not finish one request ({len(seen)} bodies): {out.stdout}{out.stderr}")
                return 1
            sfx = "-stream" if stream else ""
            for turn, sent in enumerate(seen, 1):
                ours = bodies.BODIES[f"body{turn}{sfx}.json"]
                d = first_difference(json.loads(ours), json.loads(sent))
                same = "identical bytes" if ours == sent else "same content, different bytes"
                print(f"body{turn}{sfx}.json: {'DIFFERS at ' + d if d else same}")
                bad += d is not None
    finally:
        srv.shutdown()
        srv.server_close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
