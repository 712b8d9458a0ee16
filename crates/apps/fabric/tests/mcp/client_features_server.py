"""An MCP server (stdio, official Python SDK) that asks its client for what MCP lets a server
ask: a completion of the client's model (sampling), an answer to a form (elicitation), the
roots, and that sends log messages and progress while a tool runs. The questions are asked
through the SDK's resolvers, which follow the negotiated revision: input requests answered
between rounds of the call on 2026-07-28 (SEP-2322), requests during the call before it. Used by
crates/apps/fabric/tests/suite/mcp_client_features.rs (issue #29) to check the fabric as
the client: every answer comes back as the tool's result, so the test reads it there."""

import json
import warnings

from pydantic import BaseModel, Field

from mcp import types
from typing import Annotated

from mcp.server.mcpserver import Context, Elicit, ElicitationResult, ListRoots, MCPServer, Resolve, Sample

# Roots, logging and sampling are deprecated for a future revision (SEP-2577); the fabric
# answers them, and this server is here to check that it does.
warnings.simplefilter("ignore")

server = MCPServer("client-features")


def summary_request(text: str) -> Sample:
    return Sample(
        [
            types.SamplingMessage(
                role="user",
                content=types.TextContent(type="text", text=f"Summarise: {text}"),
            )
        ],
        max_tokens=64,
        system_prompt="You summarise in five words.",
    )


@server.tool()
async def summarize(
    text: str, result: Annotated[types.CreateMessageResult, Resolve(summary_request)]
) -> str:
    """Asks the client's model to summarise `text`, and returns its answer."""
    content = result.content
    text_out = content.text if isinstance(content, types.TextContent) else str(content)
    return json.dumps({"model": result.model, "text": text_out, "stop": result.stop_reason})


class Profile(BaseModel):
    name: str = Field(default="John Doe", description="Your name")
    age: int = Field(default=30, description="Your age")


def profile_request() -> Elicit[Profile]:
    return Elicit("Who are you?", Profile)


@server.tool()
async def ask_profile(
    answer: Annotated[ElicitationResult[Profile], Resolve(profile_request)],
) -> str:
    """Asks the user for a profile (a form with defaults), and returns the answer."""
    data = answer.data.model_dump() if answer.action == "accept" else None
    return json.dumps({"action": answer.action, "data": data})


def roots_request() -> ListRoots:
    return ListRoots()


@server.tool()
async def roots(listed: Annotated[types.ListRootsResult, Resolve(roots_request)]) -> str:
    """Returns the client's roots."""
    return json.dumps([str(root.uri) for root in listed.roots])


@server.tool()
async def index(ctx: Context) -> str:
    """Reports progress and logs while it works."""
    await ctx.info("indexing started")
    for done in range(1, 4):
        await ctx.report_progress(done, 3, f"file {done} of 3")
    await ctx.warning("one file was empty")
    return "indexed 3 files"


if __name__ == "__main__":
    server.run()
