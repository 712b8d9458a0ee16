"""Drives agent-fabric's MCP server with the official Python MCP SDK, from outside the project.

usage: python_client.py stdio FABRIC_BIN CONFIG WORKSPACE
       python_client.py http URL TOKEN

`stdio-default` and `http-default` take the same arguments and connect the way the SDK does by
default (`Client(...)`: it probes `server/discover` and speaks the newest revision both sides
know, 2026-07-28); `stdio` and `http` use the legacy `initialize` handshake (issue #29).

Lists the tools, calls list_specialists, run_task (collecting progress notifications),
get_run, search_runs and run_stats, and prints one JSON object with what it saw, for the Rust
test to check.
"""
import asyncio
import json
import sys

from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def exercise(session, version):
    tools = await session.list_tools()
    specialists = await session.call_tool("list_specialists", {})
    progress = []

    async def on_progress(value, total, message):
        progress.append(json.loads(message))

    run = await session.call_tool(
        "run_task",
        {"prompt": "Create hello.txt", "specialist": "engineering"},
        progress_callback=on_progress,
    )
    result = run.structured_content or json.loads(run.content[0].text)
    fetched = await session.call_tool("get_run", {"run_id": result["_meta"]["run_id"]})
    found = await session.call_tool("search_runs", {"query": "hello"})
    stats = await session.call_tool("run_stats", {"by": "tool"})
    bad_search = await session.call_tool("search_runs", {"query": "x", "limit": 99})
    bad = await session.call_tool("run_task", {"prompt": 7})
    # Issue #28: the answers and error texts the typed front end must keep exactly.
    pruned = await session.call_tool("prune_runs", {"older_than": "1000d"})
    errors = {}
    for name, arguments in [
        ("get_run", {"run_id": "no such run"}),
        ("get_run", {"run_id": "20200101T000000Z-none"}),
        ("run_stats", {"by": "day"}),
        ("run_stats", {"since": "yesterday"}),
        ("prune_runs", {"older_than": "soon"}),
    ]:
        answer = await session.call_tool(name, arguments)
        text = answer.content[0].text if answer.content else ""
        errors[f"{name} {json.dumps(arguments)}"] = [answer.is_error, text]
    # Capabilities the server does not declare are "method not found", not empty lists.
    undeclared = {}
    for name in ["list_resources", "list_resource_templates"]:
        try:
            await getattr(session, name)()
            undeclared[name] = "answered"
        except Exception as e:  # the SDK's MCPError carries the JSON-RPC error
            undeclared[name] = getattr(getattr(e, "error", None), "code", repr(e))
    # Issue #29: each specialist as a prompt.
    prompts = await session.list_prompts()
    prompt = await session.get_prompt("engineering", {"task": "Fix the failing test"})
    try:
        await session.get_prompt("engineering", {})
        missing_task = "answered"
    except Exception as e:
        missing_task = str(getattr(getattr(e, "error", None), "message", e))
    return {
        "prompts": [
            {"name": p.name, "arguments": [(a.name, a.required) for a in p.arguments or []]}
            for p in prompts.prompts
        ],
        "prompt_text": prompt.messages[0].content.text,
        "prompt_role": prompt.messages[0].role,
        "prompt_missing_task": missing_task,
        "undeclared": undeclared,
        "protocol_version": version,
        "tools": [
            {
                "name": t.name,
                "inputSchema": t.input_schema,
                "outputSchema": t.output_schema,
                "description": t.description,
            }
            for t in tools.tools
        ],
        "specialists": specialists.structured_content,
        "run": result,
        "progress_kinds": [p["kind"] for p in progress],
        "get_run": fetched.structured_content,
        "search": found.structured_content,
        "stats": stats.structured_content,
        "bad_search_is_error": bad_search.is_error,
        "bad_search_text": bad_search.content[0].text if bad_search.content else "",
        "bad_is_error": bad.is_error,
        "bad_text": bad.content[0].text if bad.content else "",
        "pruned": pruned.structured_content,
        "errors": errors,
    }


async def legacy(transport):
    async with transport as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            result = await session.initialize()
            return await exercise(session, result.protocol_version)


async def default(server):
    async with Client(server) as client:
        return await exercise(client, client.protocol_version)


async def main():
    mode = sys.argv[1]
    if mode.startswith("stdio"):
        fabric, config, workspace = sys.argv[2:5]
        params = StdioServerParameters(
            command=fabric, args=["mcp", "--config", config, "--workspace", workspace]
        )
        out = await (default(params) if mode == "stdio-default" else legacy(stdio_client(params)))
    else:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        url, token = sys.argv[2:4]
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        transport = streamable_http_client(url, http_client=client)
        out = await (default(transport) if mode == "http-default" else legacy(transport))
    print(json.dumps(out))


asyncio.run(main())
