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
    run = nexus.proto.Run({"style": "openai", "model": "m"}, [], "hi")
    print(run.poll_output()["type"])

if __name__ == "__main__":  # pragma: no cover
    asyncio.run(main(nexus.Client("openai", "m")))
