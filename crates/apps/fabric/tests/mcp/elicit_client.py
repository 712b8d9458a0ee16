"""Calls agent-fabric's `run_task` over stdio with the official Python MCP SDK, answering the
run's question through the SDK's elicitation callback (issue #42).

usage: elicit_client.py FABRIC_BIN CONFIG WORKSPACE

Prints one JSON object: the form the fabric sent and the run's result, for the Rust test.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def main(fabric, config, workspace):
    params = StdioServerParameters(
        command=fabric, args=["mcp", "--config", config, "--workspace", workspace]
    )
    asked = []

    async def on_elicit(context, request):
        asked.append(request.model_dump(mode="json", exclude_none=True))
        return types.ElicitResult(action="accept", content={"answer": "PostgreSQL"})

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=on_elicit) as session:
            await session.initialize()
            run = await session.call_tool(
                "run_task", {"prompt": "pick a database", "specialist": "asker"}
            )
            result = run.structured_content or json.loads(run.content[0].text)
    print(json.dumps({"asked": asked, "result": result}))


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:4])))
