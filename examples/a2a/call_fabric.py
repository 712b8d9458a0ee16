"""Calls a fabric specialist over A2A with the official Python SDK (a2a-sdk 1.3.0): resolves
the card of a running `fabric serve`, sends it a task, and prints the task's updates as they
stream in: the task, a line per tool the run calls, the result, the final state.

usage: python call_fabric.py URL TOKEN PROMPT [SPECIALIST]

URL is the server's base (http://127.0.0.1:8080), TOKEN its bearer token (the value of the
variable `fabric serve --token-env` names), SPECIALIST one of the card's skills (without it
the fabric routes the task). Exits 0 when the task completed, 1 otherwise.
"""
import asyncio
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, TaskState


def text_of(parts):
    return " ".join(p.text for p in parts if p.text)


async def main(url, token, prompt, specialist=None):
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=600) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        print(f"{card.name} {card.version}: skills {', '.join(s.id for s in card.skills)}")
        client = await create_client(card, ClientConfig(streaming=True, httpx_client=http))
        message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=prompt)])
        if specialist:
            message.metadata.update({"specialist": specialist})
        state = TaskState.TASK_STATE_UNSPECIFIED
        async for event in client.send_message(SendMessageRequest(message=message)):
            if event.HasField("task"):
                state = event.task.status.state
                print(f"task {event.task.id}: {TaskState.Name(state)}")
            elif event.HasField("status_update"):
                state = event.status_update.status.state
                said = text_of(event.status_update.status.message.parts)
                print(f"{TaskState.Name(state)}: {said}")
            elif event.HasField("artifact_update"):
                artifact = event.artifact_update.artifact
                print(f"{artifact.name}: {text_of(artifact.parts)}")
    return 0 if state == TaskState.TASK_STATE_COMPLETED else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(*sys.argv[1:5])))
