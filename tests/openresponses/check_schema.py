"""Checks what `nexus serve` answers on POST /v1/responses against the
OpenResponses schema (PyPI `openresponses-types`: the specification's
response resource and streaming events as pydantic models, every field of
the response required).

Usage: check_schema.py BASE_URL KEY MODEL
Sends the two turns of a tool round trip (a request whose answer is a
function call, then the same with the call and its output), each whole and
streamed; prints a JSON summary and exits 1 on any violation.
"""
import json
import sys
import urllib.request

import openresponses_types as schema

base, key, model = sys.argv[1:4]

EVENTS = {}
for name in dir(schema):
    if name.endswith("StreamingEvent"):
        cls = getattr(schema, name)
        for member in cls.model_fields["type"].annotation:
            EVENTS[member.value] = cls

TOOLS = [{"type": "function", "name": "read_note", "description": "Reads a note.",
          "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}]
FIRST = {"model": model, "instructions": "Answer from the notes.",
         "input": [{"role": "user", "content": "What does note.txt say?"}], "tools": TOOLS}


def post(body):
    req = urllib.request.Request(base + "/v1/responses", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", "authorization": "Bearer " + key})
    with urllib.request.urlopen(req) as r:
        return r.read().decode()


def whole(body):
    out = json.loads(post(body))
    schema.ResponseResource.model_validate(out)
    return out


def streamed(body):
    text = post(dict(body, stream=True))
    final, kinds = None, []
    for block in text.split("\n\n"):
        data = [line[6:] for line in block.splitlines() if line.startswith("data: ")]
        if not data:
            continue
        event = json.loads("\n".join(data))
        cls = EVENTS.get(event.get("type"))
        if cls is None:
            raise ValueError(f"{event.get('type')!r} is not an OpenResponses streaming event")
        cls.model_validate(event)
        kinds.append(event["type"])
        if event["type"] == "response.completed":
            final = event["response"]
    if final is None:
        raise ValueError(f"no response.completed among {kinds}")
    return final


summary = {"checked": [], "violations": []}
for mode, send in (("whole", whole), ("streamed", streamed)):
    try:
        first = send(FIRST)
        calls = [item for item in first["output"] if item["type"] == "function_call"]
        assert calls, f"no function_call in {first['output']}"
        second_input = FIRST["input"] + [
            {"type": "function_call", "call_id": c["call_id"], "name": c["name"], "arguments": c["arguments"]}
            for c in calls
        ] + [{"type": "function_call_output", "call_id": c["call_id"], "output": "the note"} for c in calls]
        second = send(dict(FIRST, input=second_input))
        text = [part["text"] for item in second["output"] if item["type"] == "message"
                for part in item["content"] if part["type"] == "output_text"]
        assert text, f"no output_text in {second['output']}"
        summary["checked"].append(mode)
    except Exception as e:  # every violation is reported, not just the first
        summary["violations"].append(f"{mode}: {str(e)[:2000]}")
print(json.dumps(summary))
sys.exit(1 if summary["violations"] else 0)
