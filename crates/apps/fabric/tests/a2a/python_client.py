"""Drives agent-fabric's A2A server with the official Python A2A SDK (a2a-sdk), from outside
the project (issue #30).

usage: python_client.py BASE_URL TOKEN

Resolves the agent card, sends a task and waits for it (SendMessage), sends one streamed
(SendStreamingMessage) and one asking for the files the run wrote (acceptedOutputModes), reads it back (GetTask), lists tasks (ListTasks), cancels a running
one (CancelTask), follows another (SubscribeToTask), and provokes three errors; then does
the same over the HTTP+JSON binding. Prints one
JSON object with what it saw, for the Rust test to check.
"""
import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
)
from google.protobuf.json_format import MessageToDict


def message(text, specialist=None):
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if specialist:
        m.metadata.update({"specialist": specialist})
    return m


def send(text, specialist=None, accepted=None):
    configuration = SendMessageConfiguration(accepted_output_modes=accepted or [])
    return SendMessageRequest(message=message(text, specialist), configuration=configuration)


async def error_of(call):
    try:
        await call
    except Exception as e:  # the SDK's typed errors
        return f"{type(e).__name__}: {e}"
    return "no error"


async def main(base, token):
    seen = {}
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        seen["card"] = MessageToDict(card)
        blocking = await create_client(card, ClientConfig(streaming=False, httpx_client=http))
        streaming = await create_client(card, ClientConfig(streaming=True, httpx_client=http))
        polling = await create_client(
            card, ClientConfig(streaming=False, polling=True, httpx_client=http)
        )

        answers = [e async for e in blocking.send_message(send("Create hello.txt", "engineering"))]
        task = answers[-1].task
        seen["blocking"] = MessageToDict(task)
        seen["stream"] = [
            MessageToDict(e)
            async for e in streaming.send_message(send("Create hello.txt", accepted=["*/*"]))
        ]
        files = [e async for e in blocking.send_message(send("Create hello.txt", None, ["text/*"]))]
        seen["files"] = MessageToDict(files[-1].task)
        seen["get"] = MessageToDict(await blocking.get_task(GetTaskRequest(id=task.id)))
        seen["list"] = MessageToDict(await blocking.list_tasks(ListTasksRequest(page_size=10)))

        started = [e async for e in polling.send_message(send("Create slow.txt"))][-1].task
        seen["started"] = MessageToDict(started)
        seen["canceled"] = MessageToDict(
            await polling.cancel_task(CancelTaskRequest(id=started.id))
        )

        started = [e async for e in polling.send_message(send("Create later.txt"))][-1].task
        seen["subscribed"] = [
            MessageToDict(e)
            async for e in streaming.subscribe(SubscribeToTaskRequest(id=started.id))
        ]

        seen["errors"] = {
            "unknown_task": await error_of(
                blocking.get_task(GetTaskRequest(id="20260101-120000-000-0123abcd"))
            ),
            "no_text": await error_of(
                anext(aiter(blocking.send_message(send("   "))))
            ),
            "not_cancelable": await error_of(
                blocking.cancel_task(CancelTaskRequest(id=task.id))
            ),
        }
        seen["rest"] = await over_rest(card, http)
    print(json.dumps(seen))


async def over_rest(card, http):
    """The same methods over the HTTP+JSON binding (the card's second interface)."""
    seen = {}
    config = dict(httpx_client=http, supported_protocol_bindings=["HTTP+JSON"])
    blocking = await create_client(card, ClientConfig(streaming=False, **config))
    streaming = await create_client(card, ClientConfig(streaming=True, **config))
    polling = await create_client(card, ClientConfig(streaming=False, polling=True, **config))
    seen["transport"] = type(blocking._transport).__name__

    first = message("Create hello.txt", "engineering")
    first.context_id = "rest-conv"
    answers = [e async for e in blocking.send_message(SendMessageRequest(message=first))]
    task = answers[-1].task
    seen["blocking"] = MessageToDict(task)
    seen["stream"] = [
        MessageToDict(e)
        async for e in streaming.send_message(send("Create hello.txt", accepted=["text/plain"]))
    ]
    seen["get"] = MessageToDict(await blocking.get_task(GetTaskRequest(id=task.id)))
    seen["list"] = MessageToDict(
        await blocking.list_tasks(ListTasksRequest(context_id="rest-conv", page_size=10))
    )
    started = [e async for e in polling.send_message(send("Create slow.txt"))][-1].task
    seen["canceled"] = MessageToDict(await polling.cancel_task(CancelTaskRequest(id=started.id)))
    started = [e async for e in polling.send_message(send("Create later.txt"))][-1].task
    seen["subscribed"] = [
        MessageToDict(e) async for e in streaming.subscribe(SubscribeToTaskRequest(id=started.id))
    ]
    seen["errors"] = {
        "unknown_task": await error_of(
            blocking.get_task(GetTaskRequest(id="20260101-120000-000-0123abcd"))
        ),
        "no_text": await error_of(anext(aiter(blocking.send_message(send("   "))))),
        "not_cancelable": await error_of(blocking.cancel_task(CancelTaskRequest(id=task.id))),
    }
    return seen


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
