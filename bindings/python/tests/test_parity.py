"""Parity: the `nexus` CLI, the Rust library and the Python package run one
scenario (two relay calls in one turn, suspended, answered, resumed) and
send byte-identical request bodies; a state written by any of them resumes
in any other.

The CLI is ``target/debug/nexus`` (or ``NEXUS_CLI``); the Rust library host
is the ``parity_host`` example of the ``nexus-tests`` crate
(``target/debug/examples/parity_host``, or ``NEXUS_PARITY_HOST``). Both are
built by ``cargo test --workspace``.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import nexus
from conftest import REPO, STYLES, turn

PROMPT = "Define sun and moon."
RELAY = [
    {
        "name": "lookup",
        "description": "Looks a word up in the caller's dictionary.",
        "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    }
]
SCRIPT = [turn("Looking both up.", calls=[("lookup", '{"word": "sun"}'), ("lookup", '{"word":"moon"}')]), turn("Both found.")]
HOSTS = ["cli", "rust", "python"]


def binary(env: str, *relative: str) -> str:
    given = os.environ.get(env)
    path = Path(given) if given else REPO.joinpath("target", "debug", *relative)
    if not path.exists():
        pytest.fail(f"{path} not found: set {env} or run `cargo build -p nexus-drive --bin nexus` and "
                    "`cargo build -p nexus-tests --example parity_host`")
    return str(path)


def answers_for(pending: List[Dict]) -> List[Dict]:
    [request] = pending
    calls = request["data"]["calls"]
    results = [{"id": c["id"], "output": f"{c['input']['word']}: a word", "isError": False} for c in calls]
    return [{"id": request["id"], "ok": True, "data": {"results": results}}]


class Hosts:
    def __init__(self, fake, style: str, tmp: Path) -> None:
        self.fake = fake
        self.style = style
        self.tmp = tmp
        self.relay = tmp / "relay.json"
        self.relay.write_text(json.dumps(RELAY))
        self.cli = binary("NEXUS_CLI", "nexus")
        self.rust = binary("NEXUS_PARITY_HOST", "examples", "parity_host")

    def _exec(self, args: List[str], ok: Tuple[int, ...] = (0,)) -> Dict:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60, env=dict(os.environ))
        assert out.returncode in ok, f"{args[0]} exited {out.returncode}: {out.stderr}"
        return json.loads(out.stdout.strip().splitlines()[-1])

    def run(self, host: str, state: Path) -> Dict:
        """Starts the scenario; returns the (pending) result, with its state in ``state``."""
        url = self.fake.base_url(self.style)
        if host == "cli":
            return self._exec(
                [self.cli, "run", "--style", self.style, "--base-url", url, "--model", "m", "--api-key-env",
                 "NEXUS_TEST_KEY", "--relay", str(self.relay), "--state", str(state), "--json", PROMPT],
                ok=(3,),
            )
        if host == "rust":
            return self._exec([self.rust, "run", self.style, url, "m", str(self.relay), str(state), PROMPT])
        c = nexus.Client(self.style, "m", base_url=url, api_key_env="NEXUS_TEST_KEY")
        result = c.run(PROMPT, tools=[nexus.relay_tool(**RELAY[0])])
        state.write_text(result.state or "")
        return {"status": result.status, "pending": [r._to_json() for r in result.pending], "text": result.text}

    def resume(self, host: str, state: Path, answers: List[Dict]) -> Dict:
        path = self.tmp / "answers.json"
        path.write_text(json.dumps(answers))
        if host == "cli":
            return self._exec([self.cli, "resume", "--state", str(state), "--answer", str(path),
                               "--api-key-env", "NEXUS_TEST_KEY", "--json"])
        if host == "rust":
            return self._exec([self.rust, "resume", str(state), str(path)])
        c = nexus.Client(self.style, "m", api_key_env="NEXUS_TEST_KEY")
        result = c.resume(state.read_text(), [nexus.Answer._from_json(a) for a in answers])
        return {"status": result.status, "text": result.text}


@pytest.mark.parametrize("style", STYLES)
def test_every_host_sends_the_same_bytes_and_resumes_every_others_state(fake_provider, tmp_path, style):
    fake = fake_provider({"m": SCRIPT}, log=True)
    hosts = Hosts(fake, style, tmp_path)
    bodies: Dict[Tuple[str, str], List[str]] = {}
    seen = 0
    for starter in HOSTS:
        for resumer in HOSTS:
            state = tmp_path / f"{starter}-{resumer}.json"
            first = hosts.run(starter, state)
            assert first["status"] == "pending", first
            saved = json.loads(state.read_text())
            assert saved["format_version"] == nexus.FORMAT_VERSION and "test-key" not in state.read_text()
            done = hosts.resume(resumer, state, answers_for(first["pending"]))
            assert done["status"] == "done" and done["text"] == "Both found.", (starter, resumer, done)
            logged = fake.requests(seen + 2)[seen:]
            seen += 2
            bodies[(starter, resumer)] = [r["body"] for r in logged]
    reference = bodies[("rust", "rust")]
    assert json.loads(reference[1])  # the second request carries both results
    for pair, sent in bodies.items():
        assert sent == reference, f"{pair} sent other bytes than the Rust library"
