"""The scenario's two request bodies over OpenAI Responses, prebuilt once for
the Responses floor (`main.rs`), like the shared harness's floor_bodies.py does
for Chat Completions.

turn 1: model, instructions (the system prompt), input (the user message),
        the two tools as flat function tools, store:false and
        include:["reasoning.encrypted_content"] (a stateless loop's request)
turn 2: the same + the two function_call items echoed as the mock returns
        them + one function_call_output per call
The -stream variants add "stream": true.

Everything scenario-specific comes from the shared harness: the question, the
tool schemas and descriptions and the tools' own results from
runners/harness.py (and floor_bodies.py's system prompt and model), the
echoed items from the mock's own Responses script (mock_llm.responses_items).
The bodies hold the same content as what `overhead --style openai-responses`
sends, serialised the same way (compact, keys sorted, as serde_json writes a
Value), so the floor and our rows hand the mock the same bytes;
check_bodies.py verifies that against the runner.

    python3 bodies.py OUTDIR          (NEXUS_SHARED locates the shared tree)
"""
import json
import os
import sys

sys.dont_write_bytecode = True  # nothing written next to the shared tree or here

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("NEXUS_SHARED") or os.path.join(HERE, "..", "..", "..", "shared")
sys.path.insert(0, os.path.join(SHARED, "bench"))
sys.path.insert(0, os.path.join(SHARED, "bench", "runners"))
import floor_bodies as chat  # noqa: E402  (also brings harness onto the path)
import harness as h  # noqa: E402
import mock_llm  # noqa: E402

# The Chat floor's bodies carry these; the Responses floor sends the same.
SYSTEM = next(m["content"] for m in chat.MSG1 if m["role"] == "system")
MODEL = json.loads(chat.BODY1)["model"]

TOOLS = [{"type": "function", "name": t["function"]["name"], "description": t["function"]["description"],
          "parameters": t["function"]["parameters"], "strict": False} for t in chat.TOOLS]
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": h.QUESTION}]}
BASE = {"model": MODEL, "instructions": SYSTEM, "tools": TOOLS, "store": False,
        "include": ["reasoning.encrypted_content"]}

# Turn 1's answer as the mock gives it: the items are echoed unchanged.
CALLS = mock_llm.responses_items(True, tuple(t["name"] for t in TOOLS))
RESULTS = {"get_weather": lambda a: h.get_weather(**a), "add": lambda a: h.add(**a)}
OUTPUTS = [{"type": "function_call_output", "call_id": c["call_id"],
            "output": RESULTS[c["name"]](json.loads(c["arguments"]))} for c in CALLS]

TURN1 = dict(BASE, input=[USER])
TURN2 = dict(BASE, input=[USER] + CALLS + OUTPUTS)


def encode(body):
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


BODIES = {
    "body1.json": encode(TURN1),
    "body2.json": encode(TURN2),
    "body1-stream.json": encode(dict(TURN1, stream=True)),
    "body2-stream.json": encode(dict(TURN2, stream=True)),
}

if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, b in BODIES.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b)
