"""Answers an agent-fabric task that asks a question, with the official Python A2A SDK
(a2a-sdk): the task comes back input-required with the question, and the next message
naming its task id answers it (issue #42).

usage: answer_task.py BASE_URL TOKEN

Prints one JSON object with the task as first returned and as answered, for the Rust test.
"""
import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
from google.protobuf.json_format import MessageToDict


def message(text, task=None, context=None):
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
    if task:
        m.task_id = task
    if context:
        m.context_id = context
    m.metadata.update({"specialist": "asker"})
    return SendMessageRequest(message=m)


async def main(base, token):
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        client = await create_client(card, ClientConfig(streaming=False, httpx_client=http))
        asked = [e async for e in client.send_message(message("pick a database"))][-1].task
        answered = [
            e async for e in client.send_message(
                message("PostgreSQL", task=asked.id, context=asked.context_id))
        ][-1].task
        print(json.dumps({"asked": MessageToDict(asked), "answered": MessageToDict(answered)}))


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
