"""The project's fake provider (tests/src/bin/fake_provider.rs) as a fixture.

It speaks each provider's wire byte-exactly over loopback HTTP and picks a
model's turn from the request alone (the number of assistant messages), so
a run resumed in another process gets the right turn. Set
``NEXUS_FAKE_PROVIDER`` to its binary, or build it into the repository's
``target/`` (``cargo build -p nexus-tests --bin fake-provider``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

REPO = Path(__file__).resolve().parents[3]
KEY = "test-key"
STYLES = ["openai", "anthropic", "gemini", "openai-responses"]


def _binary(env: str, name: str) -> Path:
    given = os.environ.get(env)
    if given:
        return Path(given)
    for profile in ("debug", "release"):
        candidate = REPO / "target" / profile / name
        if candidate.exists():
            return candidate
    pytest.fail(f"{name} not found: set {env} or build it (cargo build -p nexus-tests --bin fake-provider)")


class Fake:
    """A running fake provider."""

    def __init__(self, proc: subprocess.Popen, addr: str, log: Optional[Path]) -> None:
        self.proc = proc
        self.addr = addr
        self.log = log

    def base_url(self, style: str) -> str:
        if style == "anthropic":
            return f"http://{self.addr}"
        if style == "gemini":
            return f"http://{self.addr}/v1beta"
        return f"http://{self.addr}/v1"

    def requests(self, count: int) -> List[Dict[str, Any]]:
        """The ``count`` requests received (with ``log=True``): method, target
        and body text. The server appends them to its log every few
        milliseconds, so this waits (up to 10 s) for them to be there."""
        assert self.log is not None, "start the fake with log=True"
        deadline = time.monotonic() + 10
        while True:
            text = self.log.read_text() if self.log.exists() else ""
            # Only whole lines: the server may be writing the next one.
            lines = text.split("\n")[:-1]
            if len(lines) >= count or time.monotonic() > deadline:
                got = [json.loads(line) for line in lines if line.strip()]
                assert len(got) == count, f"expected {count} requests, the server logged {len(got)}"
                return got
            time.sleep(0.01)


def turn(text: Optional[str] = None, calls: Optional[List[tuple]] = None) -> Dict[str, Any]:
    """One scripted model turn: text, then tool calls ``(name, arguments_json)``."""
    out: Dict[str, Any] = {}
    if text is not None:
        out["text"] = text
    if calls:
        out["tool_calls"] = [{"name": n, "arguments": a} for n, a in calls]
    return out


@pytest.fixture
def fake_provider(tmp_path: Path) -> Iterator[Callable[..., Fake]]:
    """``fake_provider({model: [turn, ...]}, log=False)`` starts a server."""
    started: List[subprocess.Popen] = []

    def start(models: Dict[str, List[Dict[str, Any]]], log: bool = False) -> Fake:
        scripts = tmp_path / f"scripts-{len(started)}.json"
        scripts.write_text(json.dumps({"api_key": KEY, "models": {m: {"turns": t} for m, t in models.items()}}))
        args = [str(_binary("NEXUS_FAKE_PROVIDER", "fake-provider")), "--scripts", str(scripts)]
        requests = None
        if log:
            requests = tmp_path / f"requests-{len(started)}.jsonl"
            args += ["--requests", str(requests)]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        started.append(proc)
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            pytest.fail("the fake provider did not start")
        return Fake(proc, json.loads(line)["addr"], requests)

    yield start
    for proc in started:
        proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


@pytest.fixture(autouse=True)
def _test_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEXUS_TEST_KEY", KEY)
