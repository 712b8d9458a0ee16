// A tiny ACP agent on the official TypeScript SDK's agent side (`@agentclientprotocol/sdk`
// in $FABRIC_ACP_DEPS), for the tests of ACP agents as specialists (issue #44). Its one
// prompt: it reports a tool call, asks permission to write `notes.txt` in the session's
// `cwd`, writes the task there when allowed, and answers with what it did.

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const sdk = join(process.env.FABRIC_ACP_DEPS, "node_modules/@agentclientprotocol/sdk/dist/v1/stable/acp.js");
const acp = await import(pathToFileURL(sdk).href);

const sessions = new Map();
const app = acp
  .agent({ name: "notes-agent" })
  .onRequest("initialize", ({ params }) => ({
    protocolVersion: params.protocolVersion,
    agentCapabilities: {},
    authMethods: [],
  }))
  .onRequest("session/new", ({ params }) => {
    const sessionId = `notes-${sessions.size + 1}`;
    sessions.set(sessionId, params.cwd);
    return { sessionId };
  })
  .onRequest("session/prompt", async ({ params, client }) => {
    const cwd = sessions.get(params.sessionId);
    const task = params.prompt.map((b) => b.text ?? "").join("\n");
    const update = (u) => client.notify("session/update", { sessionId: params.sessionId, update: u });
    await update({ sessionUpdate: "tool_call", toolCallId: "t1", title: "write notes.txt", kind: "edit", status: "pending" });
    const answer = await client.request("session/request_permission", {
      sessionId: params.sessionId,
      toolCall: { toolCallId: "t1", title: "write notes.txt" },
      options: [
        { optionId: "yes", name: "Allow", kind: "allow_once" },
        { optionId: "no", name: "Reject", kind: "reject_once" },
      ],
    });
    const allowed = answer.outcome.outcome === "selected" && answer.outcome.optionId === "yes";
    if (allowed) writeFileSync(join(cwd, "notes.txt"), task + "\n");
    await update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: allowed ? "completed" : "failed" });
    await update({
      sessionUpdate: "agent_message_chunk",
      content: { type: "text", text: allowed ? `I wrote notes.txt in ${cwd}.` : "I was not allowed to write notes.txt." },
    });
    return { stopReason: "end_turn" };
  });

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await new Promise((resolve) => connection.signal.addEventListener("abort", resolve));
