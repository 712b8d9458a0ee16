"""Continues an agent-fabric task with the official Python A2A SDK (a2a-sdk): a message in
the earlier task's context naming it in `reference_task_ids` (issue #42).

usage: continue_task.py BASE_URL TOKEN

Sends a task in a context of its own, then a follow-up in the same context that references
it; prints one JSON object with both tasks, for the Rust test to check.
"""
import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
from google.protobuf.json_format import MessageToDict


def send(text, context, reference=None):
    m = Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)],
        context_id=context,
    )
    if reference:
        m.reference_task_ids.append(reference)
    m.metadata.update({"specialist": "engineering"})
    return SendMessageRequest(message=m)


async def main(base, token):
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        client = await create_client(card, ClientConfig(streaming=False, httpx_client=http))
        first = [e async for e in client.send_message(send("write hello.txt", "sdk-conv"))][-1].task
        second = [
            e async for e in client.send_message(send("now read it back", "sdk-conv", first.id))
        ][-1].task
        print(json.dumps({"first": MessageToDict(first), "second": MessageToDict(second)}))


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
