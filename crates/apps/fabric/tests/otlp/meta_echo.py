"""A minimal MCP server over stdio for the trace tests (issue #13): its one tool, `meta`,
answers with the `_meta` object of the `tools/call` request it got, so a test can see the
trace context (`traceparent`, SEP-414) the fabric sent. Standard library only."""

import json
import sys

for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        continue  # a notification
    if method == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "meta-echo", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [{
            "name": "meta",
            "description": "Answers with the request's _meta.",
            "inputSchema": {"type": "object", "properties": {}},
        }]}
    elif method == "tools/call":
        meta = message["params"].get("_meta", {})
        result = {"content": [{"type": "text", "text": json.dumps(meta)}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}), flush=True)
