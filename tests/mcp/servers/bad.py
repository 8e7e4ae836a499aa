"""A misbehaving stdio MCP server, by hand (no SDK would send these).

    python bad.py MODE

Modes:
  garbage      answers `initialize`, then writes a non-JSON line before
               every answer
  silent       reads everything and answers nothing
  oversized    answers `tools/list` with a line of 2 MiB
  wrong-version  answers with "jsonrpc": "1.0"
  unknown-id   answers every request with an id nobody sent, then properly
  echo-tools   a minimal correct legacy server with one tool `ping_tool`
  version-picky  a legacy server that speaks only 2025-06-18: any other
               version offered to `initialize` gets -32022 with the list
  slow-modern [SECONDS]  answers the modern probe only after SECONDS
               (default 1.5), then speaks 2026
               on this connection: `initialize` is refused, and a request
               without the 2026 `_meta` too
"""

import json
import sys
import time

MODE = sys.argv[1]
DELAY = float(sys.argv[2]) if len(sys.argv) > 2 else 1.5

TOOL = {"name": "ping_tool", "description": "Answers pong.", "inputSchema": {"type": "object"}}


def out(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def error(req, code, message, data=None) -> dict:
    err = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": req["id"], "error": err}


def answer(req) -> dict:
    method = req.get("method")
    params = req.get("params") or {}
    if MODE == "version-picky" and method == "initialize" and params.get("protocolVersion") != "2025-06-18":
        return error(req, -32022, "Unsupported protocol version",
                     {"supported": ["2025-06-18"], "requested": params.get("protocolVersion")})
    if MODE == "slow-modern":
        if method == "server/discover":
            time.sleep(DELAY)
            return {"jsonrpc": "2.0", "id": req["id"], "result": {
                "resultType": "complete", "supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}}
        meta = params.get("_meta") or {}
        if meta.get("io.modelcontextprotocol/protocolVersion") != "2026-07-28":
            return error(req, -32600, "this connection speaks 2026-07-28")
    if method == "initialize":
        result = {
            "protocolVersion": req["params"].get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bad-" + MODE, "version": "0"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "pong"}]}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": "Method not found"}}
    return {"jsonrpc": "2.0", "id": req["id"], "result": result}


for line in sys.stdin:
    try:
        req = json.loads(line)
    except ValueError:
        continue
    if "id" not in req or "method" not in req:
        continue  # notifications and responses
    if MODE == "silent":
        continue
    reply = answer(req)
    if MODE == "garbage" and req["method"] != "initialize":
        sys.stdout.write("this is not JSON\n")
    elif MODE == "oversized" and req["method"] == "tools/list":
        reply = {"jsonrpc": "2.0", "id": req["id"], "result": {"pad": "x" * (2 * 1024 * 1024)}}
    elif MODE == "wrong-version":
        reply["jsonrpc"] = "1.0"
    elif MODE == "unknown-id":
        out({"jsonrpc": "2.0", "id": 987654, "result": {}})
    out(reply)
