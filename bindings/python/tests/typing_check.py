"""Type-checked in CI (mypy --strict), never run: user code against the public API,
so the package keeps exporting its names to type checkers."""

import asyncio
import nexus

@nexus.tool
def add(a: int, b: int) -> int:
    """Adds."""
    return a + b

async def main(client: nexus.Client) -> None:
    result: nexus.RunResult = await client.arun("hi", tools=[add])
    print(result.text, result.usage.total_tokens)
    async for event in client.astream("hi"):
        if isinstance(event, nexus.TextDelta):
            print(event.text)
    try:
        client.resume(result, [nexus.Answer(result.pending[0].id)])
    except nexus.NexusError as e:
        print(e)
    researcher = nexus.Agent("researcher", "Finds facts.", system="Cite sources.", tools=[add], max_turns=4)
    typed = client.run("hi", tools=[researcher], output_type={"type": "object"}, output_mode="tool", output_retries=1)
    for request in typed.pending:
        print(request.agent, request.id)
    try:
        client.run("hi", output_type={"type": "object"})
    except nexus.OutputInvalidError as e:
        print(e.raw, e.attempts, e.errors)
    except nexus.OutputError as e:
        print(e.raw)
    for ev in client.stream("hi", tools=[researcher]):
        print(ev.agent_path, ev.inner)
    run = nexus.proto.Run({"style": "openai", "model": "m"}, [], "hi")
    print(run.poll_output()["type"])

if __name__ == "__main__":  # pragma: no cover
    asyncio.run(main(nexus.Client("openai", "m")))
