"""A small A2A v1.0 agent built with the official Python A2A SDK's own server components
(a2a-sdk: DefaultRequestHandler, the Starlette JSON-RPC and agent-card routes, served by
uvicorn), for a fabric run to delegate to as a remote sub-agent (issue #30).

usage: python haiku_agent.py PORT

Listens on 127.0.0.1:PORT (0: a free port) and prints its base URL on stdout as one line once
it is bound. Its card, at /.well-known/agent-card.json, offers one JSON-RPC interface
(protocol 1.0) at /a2a and one skill, `haiku`. Every task is completed with an artifact whose
parts are the text "haiku: <the task's text>" and a data part {"syllables": [5, 7, 5],
"topic": <the text>}; a task whose text contains "fail" fails, its status message
"no muse today", and one whose text contains "hang" works until it is cancelled.
"""
import asyncio
import socket
import sys

import uvicorn
from a2a.helpers import (
    get_message_text,
    new_data_part,
    new_task_from_user_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
)
from starlette.applications import Starlette


class HaikuExecutor(AgentExecutor):
    """Answers every task with a "haiku" of its text, or fails it when asked to."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = get_message_text(context.message) if context.message else ""
        task = context.current_task
        if task is None:
            # The first event of a new task is the task itself.
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.start_work()
        # A moment of work, so that a client that returns at once finds the task running.
        await asyncio.sleep(0.2)
        if "hang" in text.lower():
            # Works until cancelled (CancelTask cancels this coroutine, then calls cancel()).
            await asyncio.sleep(3600)
        if "fail" in text.lower():
            await updater.failed(updater.new_agent_message([new_text_part("no muse today")]))
            return
        await updater.add_artifact(
            [
                new_text_part(f"haiku: {text}"),
                new_data_part({"syllables": [5, 7, 5], "topic": text}),
            ],
            name="haiku",
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel(updater.new_agent_message([new_text_part("canceled")]))


def card(base: str) -> AgentCard:
    return AgentCard(
        name="haiku-agent",
        description="Writes a haiku about anything.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"{base}/a2a", protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        skills=[
            AgentSkill(
                id="haiku",
                name="Haiku",
                description="Writes a haiku about the task's text.",
                tags=["poetry"],
                examples=["a haiku about autumn"],
            )
        ],
    )


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    # Bound before the card is built, so that the card names the port really listened on.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    agent_card = card(base)
    handler = DefaultRequestHandler(
        agent_executor=HaikuExecutor(),
        task_store=InMemoryTaskStore(),
        agent_card=agent_card,
    )
    app = Starlette(
        routes=create_agent_card_routes(agent_card) + create_jsonrpc_routes(handler, "/a2a")
    )
    print(base, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
