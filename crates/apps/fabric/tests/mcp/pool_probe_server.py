"""A hand-written MCP server (stdio, 2025-11-25) that tells who answered: its process id, the
session its `initialize` opened, the roots the client gave, and how many calls this process
has served. It sends a log message naming its session before each answer. Used by
crates/apps/fabric/tests/suite/mcp_pool.rs (issue #45): a warm process from the pool must
serve one session only, with the run's own roots and messages."""

import json
import os
import sys
import uuid

session = None
calls = 0


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def answer(request_id, result):
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def roots():
    send({"jsonrpc": "2.0", "id": "probe-roots", "method": "roots/list"})
    while True:
        reply = read()
        if reply.get("id") == "probe-roots" and "method" not in reply:
            return [r["uri"] for r in reply.get("result", {}).get("roots", [])]


TOOL = {
    "name": "whoami",
    "description": "Says which process and session answer.",
    "inputSchema": {"type": "object", "properties": {}},
    "annotations": {"readOnlyHint": True},
}

while True:
    message = read()
    method, request_id = message.get("method"), message.get("id")
    if method == "initialize":
        if session is not None:
            send({"jsonrpc": "2.0", "id": request_id,
                  "error": {"code": -32600, "message": "this process already has a session"}})
            continue
        session = uuid.uuid4().hex
        answer(request_id, {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}, "logging": {}},
            "serverInfo": {"name": "pool-probe", "version": "1"},
        })
    elif method == "tools/list":
        answer(request_id, {"tools": [TOOL]})
    elif method == "tools/call":
        calls += 1
        seen = roots()
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": f"session {session}"}})
        text = json.dumps({"pid": os.getpid(), "session": session, "roots": seen, "calls": calls})
        answer(request_id, {"content": [{"type": "text", "text": text}]})
    elif request_id is not None:
        send({"jsonrpc": "2.0", "id": request_id,
              "error": {"code": -32601, "message": f"method not found: {method}"}})
