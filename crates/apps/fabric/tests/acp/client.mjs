// An editor's side of ACP for the tests of `fabric acp` (issue #44): the official TypeScript
// SDK's client (`@agentclientprotocol/sdk`, installed by scripts/install-test-deps.sh into
// $FABRIC_TEST_DEPS/acp) drives the fabric through one scenario and prints what it saw as
// one JSON object on stdout. Every line the fabric writes is also checked against the
// protocol's published JSON schema (the package's schema/v1/schema.json), by method: its
// problems are listed in `schemaErrors`.
//
//   node client.mjs SCENARIO CWD -- FABRIC_COMMAND...
//
// SCENARIO: `turns` (two prompts that go on with one conversation, then bad input),
// `cancel` (a prompt cancelled while its run works), `permission` (a prompt whose call
// waits for approval; the answers come from $ACP_ANSWERS, comma-separated option kinds),
// `mcp` (a prompt whose model calls a tool of the editor's MCP server, server-everything at
// $EVERYTHING_SCRIPT), `one` (one prompt), `load` (session/list, then session/load of
// $ACP_SESSION after a restart, and a prompt that goes on with it), `apply` (a prompt, then
// `/apply` twice, the editor holding the unsaved buffers of $ACP_BUFFERS).

import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Readable, Writable, PassThrough } from "node:stream";
import { pathToFileURL } from "node:url";

const deps = process.env.FABRIC_ACP_DEPS;
const sdkDir = join(deps, "node_modules/@agentclientprotocol/sdk");
const acp = await import(pathToFileURL(join(sdkDir, "dist/v1/stable/acp.js")).href);
const schema = JSON.parse(readFileSync(join(sdkDir, "schema/v1/schema.json"), "utf8"));

const [scenario, cwd, dashdash, ...command] = process.argv.slice(2);
if (dashdash !== "--" || command.length === 0) {
  console.error("usage: node client.mjs SCENARIO CWD -- FABRIC_COMMAND...");
  process.exit(2);
}

// ---- a JSON Schema check of the keywords the ACP schema uses ----
const defs = schema.$defs;
function check(value, node, path, errors) {
  if (node === true || node === undefined) return;
  if (node.$ref) check(value, defs[node.$ref.replace("#/$defs/", "")], path, errors);
  if (node.type) {
    const types = Array.isArray(node.type) ? node.type : [node.type];
    if (!types.some((t) => is(value, t))) {
      errors.push(`${path}: ${JSON.stringify(value)?.slice(0, 80)} is not ${types.join("|")}`);
      return;
    }
  }
  if ("const" in node && value !== node.const) errors.push(`${path}: not ${JSON.stringify(node.const)}`);
  if (node.enum && !node.enum.includes(value)) errors.push(`${path}: not one of ${node.enum}`);
  if (node.minimum !== undefined && typeof value === "number" && value < node.minimum) errors.push(`${path}: below ${node.minimum}`);
  for (const sub of node.allOf ?? []) check(value, sub, path, errors);
  if (node.anyOf && !node.anyOf.some((sub) => fits(value, sub))) errors.push(`${path}: fits none of anyOf ${titles(node.anyOf)}`);
  if (node.oneOf) {
    const n = node.oneOf.filter((sub) => fits(value, sub)).length;
    if (n !== 1) errors.push(`${path}: fits ${n} of oneOf ${titles(node.oneOf)} (${JSON.stringify(value).slice(0, 120)})`);
  }
  if (is(value, "object")) {
    for (const key of node.required ?? []) if (!(key in value)) errors.push(`${path}: lacks ${key}`);
    for (const [key, v] of Object.entries(value)) {
      if (node.properties && key in node.properties) check(v, node.properties[key], `${path}.${key}`, errors);
      else if (node.additionalProperties === false) errors.push(`${path}: unknown field ${key}`);
      else if (typeof node.additionalProperties === "object") check(v, node.additionalProperties, `${path}.${key}`, errors);
    }
  }
  if (Array.isArray(value) && node.items) value.forEach((v, i) => check(v, node.items, `${path}[${i}]`, errors));
}
function fits(value, node) {
  const errors = [];
  check(value, node, "", errors);
  return errors.length === 0;
}
function titles(list) {
  return list.map((s) => s.title ?? s.$ref ?? s.type ?? "?").join(",");
}
function is(value, type) {
  switch (type) {
    case "object": return value !== null && typeof value === "object" && !Array.isArray(value);
    case "array": return Array.isArray(value);
    case "string": return typeof value === "string";
    case "integer": return Number.isInteger(value);
    case "number": return typeof value === "number";
    case "boolean": return typeof value === "boolean";
    case "null": return value === null;
    default: return true;
  }
}
// The schema's definition of `method`'s params ("Request"/"Notification") or result
// ("Response") on the side that receives it.
function defFor(method, side, suffix) {
  const name = Object.keys(defs).find((k) => defs[k]["x-method"] === method && defs[k]["x-side"] === side && k.endsWith(suffix));
  return name && { name, node: defs[name] };
}

// ---- the fabric, its lines tapped ----
const schemaErrors = [];
const sent = new Map(); // the client's request ids → methods
const child = spawn(command[0], command.slice(1), { cwd, stdio: ["pipe", "pipe", "pipe"] });
let stderr = "";
child.stderr.on("data", (d) => (stderr += d));
const fromFabric = new PassThrough();
let pending = "";
child.stdout.on("data", (chunk) => {
  pending += chunk.toString("utf8");
  let nl;
  while ((nl = pending.indexOf("\n")) >= 0) {
    tapAgentLine(pending.slice(0, nl));
    pending = pending.slice(nl + 1);
  }
  fromFabric.write(chunk);
});
child.stdout.on("end", () => fromFabric.end());
const toFabric = new PassThrough();
toFabric.on("data", (chunk) => {
  for (const line of chunk.toString("utf8").split("\n")) {
    try {
      const m = JSON.parse(line);
      if (m.method && m.id !== undefined) sent.set(JSON.stringify(m.id), m.method);
    } catch {}
  }
  child.stdin.write(chunk);
});

function tapAgentLine(line) {
  if (!line.trim()) return;
  let m;
  try { m = JSON.parse(line); } catch (e) { schemaErrors.push(`not JSON: ${line.slice(0, 100)}`); return; }
  if (m.jsonrpc !== "2.0") schemaErrors.push(`no jsonrpc 2.0: ${line.slice(0, 100)}`);
  const errors = [];
  let what;
  if (m.method) {
    const def = defFor(m.method, "client", m.id === undefined ? "Notification" : "Request");
    what = def?.name ?? `unknown method ${m.method}`;
    if (!def) errors.push(`the fabric sent ${m.method}, which the schema does not have`);
    else check(m.params, def.node, "params", errors);
  } else if ("error" in m) {
    what = "error";
    check(m.error, defs.Error ?? { type: "object", required: ["code", "message"] }, "error", errors);
  } else {
    const method = sent.get(JSON.stringify(m.id));
    const def = method && defFor(method, "agent", "Response");
    what = def?.name ?? `a response to ${method}`;
    if (!def) errors.push(`a response to ${method ?? "an unknown request"}`);
    else check(m.result, def.node, "result", errors);
  }
  for (const e of errors) schemaErrors.push(`${what}: ${e}`);
}

const stream = acp.ndJsonStream(Writable.toWeb(toFabric), Readable.toWeb(fromFabric));

// ---- what the client saw ----
const updates = [];
const permissions = [];
const answers = (process.env.ACP_ANSWERS ?? "").split(",").filter(Boolean);
// The editor's unsaved buffers, by absolute path (`apply`).
const buffers = JSON.parse(process.env.ACP_BUFFERS ?? "{}");
const reads = [];
const app = acp
  .client({ name: "fabric-tests" })
  .onNotification("session/update", ({ params }) => {
    updates.push(params.update);
  })
  .onRequest("fs/read_text_file", ({ params }) => {
    reads.push(params.path);
    if (params.path in buffers) return { content: buffers[params.path] };
    if (existsSync(params.path)) return { content: readFileSync(params.path, "utf8") };
    throw new Error(`no such file: ${params.path}`);
  })
  .onRequest("session/request_permission", ({ params }) => {
    permissions.push(params);
    const kind = answers.shift() ?? "reject_once";
    const option = params.options.find((o) => o.kind === kind);
    return option
      ? { outcome: { outcome: "selected", optionId: option.optionId } }
      : { outcome: { outcome: "cancelled" } };
  });

function take() {
  return updates.splice(0, updates.length);
}
async function outcome(promise) {
  try { return { ok: await promise }; } catch (e) { return { error: { code: e.code, message: e.message } }; }
}
function text(blocks) {
  return [{ type: "text", text: blocks }];
}

const report = { scenario };
try {
  await app.connectWith(stream, async (ctx) => {
    const clientCapabilities = scenario === "apply" ? { fs: { readTextFile: true } } : {};
    report.initialize = await ctx.request("initialize", { protocolVersion: 1, clientCapabilities });
    const mcpServers = process.env.EVERYTHING_SCRIPT
      ? [{ name: "Everything", command: "node", args: [process.env.EVERYTHING_SCRIPT, "stdio"], env: [] }]
      : [];
    if (scenario === "load") {
      const sessionId = process.env.ACP_SESSION;
      report.list = await outcome(ctx.request("session/list", {}));
      report.unknown = await outcome(ctx.request("session/load", { sessionId: "sess_none", cwd, mcpServers: [] }));
      report.load = { ...(await outcome(ctx.request("session/load", { sessionId, cwd, mcpServers: [] }))), updates: take() };
      report.next = { ...(await outcome(ctx.request("session/prompt", { sessionId, prompt: text("and once more") }))), updates: take() };
      return;
    }
    const created = await ctx.request("session/new", { cwd, mcpServers });
    const sessionId = created.sessionId;
    report.sessionId = sessionId;
    if (scenario === "one") {
      report.first = { ...(await outcome(ctx.request("session/prompt", { sessionId, prompt: text("write hello.txt") }))), updates: take() };
    } else if (scenario === "turns") {
      const first = await outcome(ctx.request("session/prompt", { sessionId, prompt: text("write hello.txt") }));
      report.first = { ...first, updates: take() };
      const running = ctx.request("session/prompt", { sessionId, prompt: text("now read it back") });
      await new Promise((r) => setTimeout(r, 150));
      report.whileRunning = await outcome(ctx.request("session/prompt", { sessionId, prompt: text("again") }));
      const second = await outcome(running);
      report.second = { ...second, updates: take() };
      report.unknownSession = await outcome(ctx.request("session/prompt", { sessionId: "sess_nope", prompt: text("hi") }));
      report.noPrompt = await outcome(ctx.request("session/prompt", { sessionId }));
      report.badCwd = await outcome(ctx.request("session/new", { cwd: "relative/dir", mcpServers: [] }));
      report.unknownMethod = await outcome(ctx.request("fabric/nothing", {}));
      report.diff = { ...(await outcome(ctx.request("session/prompt", { sessionId, prompt: text("/diff") }))), updates: take() };
    } else if (scenario === "cancel") {
      const running = ctx.request("session/prompt", { sessionId, prompt: text("take your time") });
      await waitFor(() => updates.some((u) => u.sessionUpdate === "tool_call"), 20000);
      await ctx.notify("session/cancel", { sessionId });
      report.cancelled = { ...(await outcome(running)), updates: take() };
    } else if (scenario === "mcp") {
      report.first = { ...(await outcome(ctx.request("session/prompt", { sessionId, prompt: text("echo something") }))), updates: take() };
    } else if (scenario === "apply") {
      report.first = { ...(await outcome(ctx.request("session/prompt", { sessionId, prompt: text("change lib.txt") }))), updates: take() };
      report.refused = { ...(await outcome(ctx.request("session/prompt", { sessionId, prompt: text("/apply") }))), updates: take() };
      report.applied = { ...(await outcome(ctx.request("session/prompt", { sessionId, prompt: text("/apply") }))), updates: take() };
      report.reads = reads;
      report.discarded = { ...(await outcome(ctx.request("session/prompt", { sessionId, prompt: text("/discard") }))), updates: take() };
    } else if (scenario === "permission") {
      report.modes = created.modes;
      report.setMode = await outcome(ctx.request("session/set_mode", { sessionId, modeId: "untrusted" }));
      report.badMode = await outcome(ctx.request("session/set_mode", { sessionId, modeId: "yolo" }));
      report.first = { ...(await outcome(ctx.request("session/prompt", { sessionId, prompt: text("write a.txt") }))), updates: take() };
      report.second = { ...(await outcome(ctx.request("session/prompt", { sessionId, prompt: text("write b.txt") }))), updates: take() };
    }
  });
} catch (e) {
  report.failure = String(e?.stack ?? e);
}
async function waitFor(cond, ms) {
  const until = Date.now() + ms;
  while (!cond() && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
}
report.permissions = permissions;
report.leftover = take();
child.stdin.end();
const code = await new Promise((r) => child.on("exit", (c) => r(c)));
report.exitCode = code;
report.stderr = stderr.slice(-4000);
report.schemaErrors = schemaErrors;
process.stdout.write(JSON.stringify(report) + "\n");
