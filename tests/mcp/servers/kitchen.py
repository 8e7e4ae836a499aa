"""A test MCP server written with the PyPI `mcp` package (2.3).

It speaks both protocol eras (the SDK answers `server/discover` and legacy
`initialize`) over stdio or Streamable HTTP:

    python kitchen.py stdio [--page-size N]
    python kitchen.py http [--page-size N] [--json-response] [--event-store]

Over HTTP it binds 127.0.0.1 on a free port and prints `PORT <n>` as its
first stdout line. Its tools cover what an MCP client must handle: every
content type, structured output, `isError`, progress, a slow tool, a crash
mid-call, stderr spam, a grandchild process, a tool list that changes, a
tiny page size and elicitation (a live request for legacy clients, an
`input_required` result for 2026 clients). With `--event-store` the HTTP
server gives its SSE events ids and replays them on `Last-Event-ID`, and the
`cut` tool closes its own response stream in the middle of the call.
"""

import argparse
import asyncio
import base64
import os
import socket
import subprocess
import sys
from typing import Annotated

from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.streamable_http import EventMessage, EventStore
from mcp.server.mcpserver import RequestStateSecurity, Context, ElicitationResult, Elicit, MCPServer, Resolve
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ListToolsResult,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel, Field

# A 1x1 PNG and a few bytes standing in for audio: the client passes them on
# as they are, so their content does not matter, only that they are base64.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d4944415478da6364f8cf00000301010018dd8db00000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(b"RIFF\x24\x00\x00\x00WAVEfmt ").decode()


class MemoryEventStore(EventStore):
    """Every event of every stream, in memory, replayable after any of them."""

    def __init__(self):
        self.events = []  # (event id, stream id, message)

    async def store_event(self, stream_id, message):
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):
        at = next((i for i, e in enumerate(self.events) if e[0] == last_event_id), None)
        if at is None:
            return None
        stream_id = self.events[at][1]
        for event_id, sid, message in self.events[at + 1 :]:
            if sid == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


class Kitchen(MCPServer):
    """MCPServer with a paginated tools/list (the stock one sends one page)."""

    def __init__(self, page_size: int, **kwargs):
        super().__init__(**kwargs)
        self.page_size = page_size

    async def _handle_list_tools(self, ctx, params):
        tools = await self.list_tools()
        if self.page_size <= 0:
            return ListToolsResult(tools=tools)
        start = int(params.cursor) if params is not None and params.cursor else 0
        page = tools[start : start + self.page_size]
        nxt = start + self.page_size
        return ListToolsResult(tools=page, next_cursor=str(nxt) if nxt < len(tools) else None)


class Booking(BaseModel):
    confirm: bool = Field(description="Book it?")
    seats: int = Field(default=2, description="How many seats")
    note: str = Field(default="none", description="Anything else")

def ask_booking(city: str) -> Elicit[Booking]:
    return Elicit(f"Book a table in {city}?", Booking)


def build(page_size: int) -> Kitchen:
    # A fixed key: a 2026 `requestState` minted by one server process must
    # unseal in the next one (a suspended call resumed after a restart).
    security = RequestStateSecurity(keys=[b"nexus-mcp-test-fixture-key-32by!"])
    mcp = Kitchen(page_size, name="kitchen", version="1.0.0", request_state_security=security)
    # Declare `tools.listChanged` (the stock options declare no notifications).
    low = mcp._lowlevel_server
    plain_options = low.create_initialization_options
    low.create_initialization_options = lambda *a, **k: plain_options(NotificationOptions(tools_changed=True))

    @mcp.tool(description="Echoes its text.")
    def echo(text: str) -> str:
        return text

    @mcp.tool(description="Adds two integers and returns a structured sum.")
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @mcp.tool(description="Returns one block of every content type.")
    def all_content() -> CallToolResult:
        return CallToolResult(
            content=[
                TextContent(type="text", text="plain text"),
                ImageContent(type="image", data=PNG, mime_type="image/png"),
                AudioContent(type="audio", data=WAV, mime_type="audio/wav"),
                ResourceLink(type="resource_link", uri="file:///tmp/report.txt", name="report", mime_type="text/plain"),
                EmbeddedResource(
                    type="resource",
                    resource=TextResourceContents(uri="mem://note", mime_type="text/plain", text="embedded note"),
                ),
                EmbeddedResource(
                    type="resource",
                    resource=BlobResourceContents(uri="mem://blob", mime_type="application/octet-stream", blob=PNG),
                ),
            ],
            structured_content={"kinds": 6},
        )

    @mcp.tool(description="Fails with an execution error the model should see.")
    def fail(reason: str) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=f"failed: {reason}")], is_error=True)

    @mcp.tool(description="Reports progress `steps` times, then returns.")
    async def progress(steps: int, ctx: Context) -> str:
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"step {i + 1}")
            await asyncio.sleep(0.05)
        return f"{steps} steps"

    @mcp.tool(description="Sleeps, then returns.")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    @mcp.tool(description="Closes its own response stream, waits, then returns.")
    async def cut(seconds: float, ctx: Context) -> str:
        await ctx.close_sse_stream()
        await asyncio.sleep(seconds)
        return "survived the cut"

    @mcp.tool(description="Sleeps; writes `cancelled` to `marker` if it is cancelled.")
    async def watch(seconds: float, marker: str) -> str:
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            with open(marker, "w") as f:
                f.write("cancelled")
            raise
        return "watched"

    @mcp.tool(description="Exits the server process in the middle of the call.")
    def crash(code: int = 7) -> str:
        sys.stderr.write("about to crash\n")
        sys.stderr.flush()
        os._exit(code)

    @mcp.tool(description="Writes many lines to stderr, then returns.")
    def spam(lines: int) -> str:
        for i in range(lines):
            sys.stderr.write(f"spam line {i} " + "x" * 100 + "\n")
        sys.stderr.flush()
        return f"{lines} lines"

    @mcp.tool(description="Starts a long-lived child process and returns its pid.")
    def spawn_child() -> str:
        child = subprocess.Popen(
            ["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return str(child.pid)

    @mcp.tool(description="Adds a tool named `name` and announces the changed list.")
    async def add_tool(name: str, ctx: Context) -> str:
        def extra(text: str) -> str:
            return text.upper()

        mcp.add_tool(extra, name=name, description="Upper-cases its text.")
        # Legacy clients: a session notification; 2026 clients: the subscription bus.
        try:
            await ctx.session.send_tool_list_changed()
        except Exception as e:  # a 2026 request has no session push
            sys.stderr.write(f"no session notification: {e}\n")
        await ctx.notify_tools_changed()
        return f"added {name}"

    # KITCHEN_BOOK_DESCRIPTION changes what the model is told `book` does (drift on resume).
    @mcp.tool(description=os.environ.get("KITCHEN_BOOK_DESCRIPTION", "Books a table after asking the user to confirm."))
    def book(city: str, answer: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]) -> str:
        if answer.action != "accept":
            return f"not booked ({answer.action})"
        data = answer.data
        if not data.confirm:
            return "not booked (no)"
        return f"booked {data.seats} in {city} ({data.note})"

    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("--page-size", type=int, default=0)
    parser.add_argument("--json-response", action="store_true")
    parser.add_argument("--event-store", action="store_true")
    args = parser.parse_args()
    mcp = build(args.page_size)
    if args.transport == "stdio":
        mcp.run("stdio")
        return
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    if args.event_store:
        app = mcp.streamable_http_app(
            json_response=args.json_response, event_store=MemoryEventStore(), retry_interval=200
        )
    else:
        app = mcp.streamable_http_app(json_response=args.json_response)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
