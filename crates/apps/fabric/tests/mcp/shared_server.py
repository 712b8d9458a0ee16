"""An MCP server (stdio, official Python SDK, the stateless 2026-07-28 revision: it answers
`server/discover`) that tells which process answered and what the request carried: its
process id, the roots the client gave for this call, and a progress notification naming
them. `whoami` may hold its answer for `hold` seconds, to keep runs in flight. Used by
crates/apps/fabric/tests/suite/mcp_pool.rs (issue #45, ADR-122): one process of it serves
many runs at once, each with its own roots and its own notifications. Its first argument is a
marker the tests find its processes by."""

import asyncio
import json
import os
import warnings
from typing import Annotated

from mcp import types
from mcp.server.mcpserver import Context, ListRoots, MCPServer, Resolve

# Roots are deprecated for a future revision (SEP-2577); the fabric answers them.
warnings.simplefilter("ignore")

server = MCPServer("shared-probe")


def roots_request() -> ListRoots:
    return ListRoots()


@server.tool()
async def whoami(
    ctx: Context,
    listed: Annotated[types.ListRootsResult, Resolve(roots_request)],
    hold: float = 0.0,
) -> str:
    """Says which process answers and the roots this call was given, after `hold` seconds."""
    roots = [str(root.uri) for root in listed.roots]
    await ctx.report_progress(1, 2, f"pid {os.getpid()} roots {' '.join(roots)}")
    await asyncio.sleep(hold)
    return json.dumps({"pid": os.getpid(), "roots": roots})


if __name__ == "__main__":
    server.run()
