#!/usr/bin/env python3
"""The training load of bench/pgo_build.sh: one running `nexus serve`, sent
the shared scenario's two turns (the model asks for two tools; the model
answers with their results) on each of its client surfaces, whole and
streamed: Chat Completions (the shared bodies as they are), Anthropic
Messages, OpenAI Responses and Gemini (the same turns written in those
dialects). First on one keep-alive connection, then on 16 at once, so the
accept and multi-connection paths are counted too. Every answer must be a
200, so a training run that went wrong stops the build instead of profiling
error paths.

    python3 bench/pgo_train.py PORT REQUESTS BODIES_DIR TOKEN
"""
import http.client
import json
import sys
import threading

port, requests, bodies_dir, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]


def chat(name):
    return json.load(open(f"{bodies_dir}/{name}.json"))


def anthropic(body):
    """A Chat Completions body in Anthropic Messages form."""
    system, messages = None, []
    for m in body["messages"]:
        if m["role"] == "system":
            system = m["content"]
        elif m["role"] == "assistant":
            messages.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                 "input": json.loads(c["function"]["arguments"])} for c in m["tool_calls"]]})
        elif m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if messages[-1]["role"] == "user":
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block]})
        else:
            messages.append({"role": "user", "content": m["content"]})
    out = {"model": body["model"], "max_tokens": 1024, "system": system, "messages": messages,
           "tools": [{"name": t["function"]["name"], "description": t["function"]["description"],
                      "input_schema": t["function"]["parameters"]} for t in body["tools"]]}
    if body.get("stream"):
        out["stream"] = True
    return out


def responses(body):
    """A Chat Completions body in OpenAI Responses form."""
    items = []
    for m in body["messages"][1:]:
        if m["role"] == "assistant":
            items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
        elif m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        else:
            items.append({"role": "user", "content": m["content"]})
    out = {"model": body["model"], "instructions": body["messages"][0]["content"], "input": items,
           "tools": [{"type": "function", "name": t["function"]["name"],
                      "description": t["function"]["description"],
                      "parameters": t["function"]["parameters"]} for t in body["tools"]]}
    if body.get("stream"):
        out["stream"] = True
    return out


def gemini(body):
    """A Chat Completions body in Gemini form (its model and streaming go in the path)."""
    contents, names = [], {}
    for m in body["messages"][1:]:
        if m["role"] == "assistant":
            parts = []
            for c in m["tool_calls"]:
                names[c["id"]] = c["function"]["name"]
                parts.append({"functionCall": {"name": c["function"]["name"],
                                               "args": json.loads(c["function"]["arguments"])}})
            contents.append({"role": "model", "parts": parts})
        elif m["role"] == "tool":
            part = {"functionResponse": {"name": names[m["tool_call_id"]], "response": {"result": m["content"]}}}
            if contents[-1]["role"] == "user" and "functionResponse" in contents[-1]["parts"][0]:
                contents[-1]["parts"].append(part)
            else:
                contents.append({"role": "user", "parts": [part]})
        else:
            contents.append({"role": "user", "parts": [{"text": m["content"]}]})
    return {"systemInstruction": {"parts": [{"text": body["messages"][0]["content"]}]}, "contents": contents,
            "tools": [{"functionDeclarations": [
                {"name": t["function"]["name"], "description": t["function"]["description"],
                 "parameters": t["function"]["parameters"]} for t in body["tools"]]}]}


cases = []  # (path, body bytes)
for name in ("body1", "body2", "body1-stream", "body2-stream"):
    body = chat(name)
    stream = name.endswith("-stream")
    model = body["model"]
    cases.append(("/v1/chat/completions", json.dumps(body).encode()))
    cases.append(("/v1/messages", json.dumps(anthropic(body)).encode()))
    cases.append(("/v1/responses", json.dumps(responses(body)).encode()))
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    cases.append((f"/v1beta/models/{model}:{method}", json.dumps(gemini(body)).encode()))

headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}


def client(rounds):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for path, body in cases:
        for _ in range(rounds):
            c.request("POST", path, body, headers)
            r = c.getresponse()
            data = r.read()
            assert r.status == 200, (path, r.status, data[:300])


failures = []


def guarded(rounds):
    try:
        client(rounds)
    except Exception as e:  # noqa: BLE001 - any failure stops the build
        failures.append(e)


client(requests)
threads = [threading.Thread(target=guarded, args=(max(1, requests // 16),)) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if failures:
    sys.exit(f"pgo_train.py: {len(failures)} of 16 connections failed; the first: {failures[0]!r}")
