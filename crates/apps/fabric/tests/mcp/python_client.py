"""Drives agent-fabric's MCP server with the official Python MCP SDK, from outside the project.

usage: python_client.py stdio FABRIC_BIN CONFIG WORKSPACE
       python_client.py http URL TOKEN

`stdio-default` and `http-default` take the same arguments and connect the way the SDK does by
default (`Client(...)`: it probes `server/discover` and speaks the newest revision both sides
know, 2026-07-28); `stdio` and `http` use the legacy `initialize` handshake (issue #29).

Lists the tools, calls list_specialists, run_task (collecting progress notifications),
get_run, search_runs and run_stats; reads the run back as resources; runs a second task
subscribed to (`resources/subscribe`, or `subscriptions/listen` in the default mode) with log
messages asked for (`logging/setLevel`, or `_meta` logLevel); and prints one JSON object with
what it saw, for the Rust test to check.
"""
import asyncio
import contextlib
import json
import sys

from mcp import Client, ClientSession, StdioServerParameters, types
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


def error_code(e):
    return getattr(getattr(e, "error", None), "code", repr(e))


async def read(session, uri):
    """The contents of `uri` as (mimeType, text or blob), or the error's code and message."""
    try:
        result = await session.read_resource(uri)
    except Exception as e:
        return {"code": error_code(e), "message": getattr(getattr(e, "error", None), "message", str(e))}
    content = result.contents[0]
    return {"mime": content.mime_type, "text": getattr(content, "text", None), "blob": getattr(content, "blob", None)}


async def page_after(session, cursor):
    """The URIs of the `resources/list` page after `cursor`, or the error's code and message."""
    try:
        if isinstance(session, ClientSession):
            page = await session.list_resources(params=types.PaginatedRequestParams(cursor=cursor))
        else:
            page = await session.list_resources(cursor=cursor)
    except Exception as e:
        return {"code": error_code(e), "message": getattr(getattr(e, "error", None), "message", str(e))}
    return [r.uri for r in page.resources]


async def complete(session, ref, argument, context=None):
    """The completion values, or the error's code and message."""
    try:
        result = await session.complete(ref, argument, context)
    except Exception as e:
        return {"code": error_code(e), "message": getattr(getattr(e, "error", None), "message", str(e))}
    return {"values": result.completion.values, "total": result.completion.total, "has_more": result.completion.has_more}


async def completions(session, run_id):
    """Issue #29: run ids, workspace paths, and a specialist's free-text task."""
    run = types.ResourceTemplateReference(type="ref/resource", uri="fabric://runs/{run_id}")
    file = types.ResourceTemplateReference(type="ref/resource", uri="fabric://runs/{run_id}/files/{+path}")
    prompt = types.PromptReference(type="ref/prompt", name="engineering")
    return {
        "run_id": await complete(session, run, {"name": "run_id", "value": run_id[:8]}),
        "path": await complete(session, file, {"name": "path", "value": "he"}, {"run_id": run_id}),
        "path_without_run": await complete(session, file, {"name": "path", "value": "he"}),
        "task": await complete(session, prompt, {"name": "task", "value": "Fi"}),
        "unknown_prompt": await complete(session, types.PromptReference(type="ref/prompt", name="nobody"), {"name": "task", "value": ""}),
        "unknown_argument": await complete(session, run, {"name": "id", "value": ""}),
    }


async def resources(session, run_id):
    """Issue #29: runs as resources, read back through the SDK."""
    base = f"fabric://runs/{run_id}"
    listed = await session.list_resources()
    templates = await session.list_resource_templates()
    return {
        "listed": [{"uri": r.uri, "name": r.name, "mime": r.mime_type, "description": r.description} for r in listed.resources],
        "next_cursor": listed.next_cursor,
        "after_run": await page_after(session, run_id),
        "bad_cursor": await page_after(session, "not a cursor"),
        "templates": [t.uri_template for t in templates.resource_templates],
        "run": await read(session, base),
        "runlog": await read(session, f"{base}/runlog"),
        "files": await read(session, f"{base}/files"),
        "file": await read(session, f"{base}/files/hello.txt"),
        "escape": await read(session, f"{base}/files/%2E%2E/runlog.jsonl"),
        "escape_absolute": await read(session, f"{base}/files/%2Fetc%2Fpasswd"),
        "missing_file": await read(session, f"{base}/files/none.txt"),
        "missing_run": await read(session, "fabric://runs/20200101T000000Z-none"),
        "unknown": await read(session, f"{base}/other"),
    }


async def watched_run(session, subscribe):
    """Issue #29: a second run, subscribed to as soon as its id is known (from its first
    progress notification); `subscribe(uri)` is an async context manager that collects the
    updates. Returns the run's id and the updated URIs seen."""
    started = asyncio.Event()
    ids = []

    async def on_progress(value, total, message):
        event = json.loads(message)
        if event["kind"] == "run_start":
            ids.append(event["payload"]["run_id"])
            started.set()

    call = asyncio.create_task(
        session.call_tool("run_task", {"prompt": "Write more", "specialist": "engineering"}, progress_callback=on_progress)
    )
    await asyncio.wait_for(started.wait(), 30)
    uri = f"fabric://runs/{ids[0]}"
    async with subscribe(uri) as updates:
        await call
        # The run's last events may still be on their way as notifications.
        for _ in range(50):
            if updates:
                break
            await asyncio.sleep(0.1)
    return ids[0], list(updates)


async def legacy(transport):
    logs, updates = [], []

    async def on_log(params):
        logs.append({"level": params.level, "data": params.data, "logger": params.logger})

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))

    @contextlib.asynccontextmanager
    async def subscribe(uri):
        await session.subscribe_resource(uri)
        yield updates
        await session.unsubscribe_resource(uri)

    async with transport as streams:
        read_stream, write_stream = streams[0], streams[1]
        async with ClientSession(read_stream, write_stream, logging_callback=on_log, message_handler=on_message) as session:
            result = await session.initialize()
            seen = await exercise(session, result.protocol_version)
            seen["resources"] = await resources(session, seen["run"]["_meta"]["run_id"])
            seen["completions"] = await completions(session, seen["run"]["_meta"]["run_id"])
            # No level set yet: the first run sent no log messages.
            seen["logs_before_level"] = list(logs)
            await session.set_logging_level("info")
            seen["watched_run"], seen["updates"] = await watched_run(session, subscribe)
            seen["logs"] = logs
            seen["capabilities"] = result.capabilities.model_dump(exclude_none=True)
            return seen


async def default(server):
    logs = []

    async def on_log(params):
        logs.append({"level": params.level, "data": params.data, "logger": params.logger})

    async with Client(server, logging_callback=on_log, log_level="info") as client:

        @contextlib.asynccontextmanager
        async def subscribe(uri):
            updates = []
            async with client.listen(resource_subscriptions=[uri]) as subscription:

                async def collect():
                    async for event in subscription:
                        updates.append(str(event.uri))

                task = asyncio.create_task(collect())
                yield updates
                task.cancel()

        seen = await exercise(client, client.protocol_version)
        seen["resources"] = await resources(client, seen["run"]["_meta"]["run_id"])
        seen["completions"] = await completions(client, seen["run"]["_meta"]["run_id"])
        seen["logs_before_level"] = []
        seen["watched_run"], seen["updates"] = await watched_run(client, subscribe)
        seen["logs"] = logs
        seen["capabilities"] = client.server_capabilities.model_dump(exclude_none=True)
        return seen


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
