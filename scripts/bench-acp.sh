#!/usr/bin/env bash
# The ACP figures of docs/BENCHMARKS.md (issue #44): how long an editor waits from
# `initialize` to the first `agent_message_chunk` of its first prompt, against
# `fabric mock-llm` on loopback, and how much memory an idle `fabric acp` holds.
#
#   scripts/bench-acp.sh                      # the debug binary of this checkout's target dir
#   FABRIC_BIN=path/to/fabric ROUNDS=10 scripts/bench-acp.sh
#
# Each of ROUNDS rounds starts a new `fabric acp` in a new git repository, sends
# `initialize`, `session/new` and one `session/prompt` whose scripted model answers with text
# at once, and times `initialize` → the first `agent_message_chunk`; the model's own time is
# the `latency_ms` of the turn's `llm_response` in the runlog, subtracted for "beyond the
# model". The idle RSS (/proc, VmRSS) is read after `initialize` and a `session/new`, before
# any prompt, and again after the prompt's turn has ended. Needs python3 and git.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${FABRIC_BIN:-$TARGET/debug/fabric}
[[ -x $BIN ]] || { echo "no fabric binary at $BIN: cargo build -p fabric, or set FABRIC_BIN" >&2; exit 2; }

WORK=$(mktemp -d)
MOCK_PID=
cleanup() {
  [[ -n $MOCK_PID ]] && kill "$MOCK_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

cat >"$WORK/scenario.yaml" <<YAML
turn_by: conversation
turns:
  - content: "Hello from the scripted model."
    tool_calls: [{name: finish_task, arguments: {summary: "said hello"}}]
YAML
"$BIN" mock-llm --scenario "$WORK/scenario.yaml" --port 0 >"$WORK/mock.out" 2>/dev/null &
MOCK_PID=$!
for _ in $(seq 1 200); do grep -qs '^listening on ' "$WORK/mock.out" && break; sleep 0.05; done
MOCK=$(sed -n 's/^listening on //p' "$WORK/mock.out" | head -1)
cat >"$WORK/fabric.yaml" <<YAML
models:
  mock: {base_url: "$MOCK/v1", model: qwen2.5:7b, backend: openai}
default_model_key: mock
YAML

BIN="$BIN" WORK="$WORK" ROUNDS="$ROUNDS" python3 - <<'PY'
import json, os, subprocess, time, glob, statistics

bin_, work, rounds = os.environ["BIN"], os.environ["WORK"], int(os.environ["ROUNDS"])

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

firsts, beyond, idle, after, inits, news, prompts = [], [], [], [], [], [], []
for r in range(rounds):
    repo = os.path.join(work, f"repo{r}")
    os.makedirs(repo)
    env = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x",
               GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@x")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True, env=env)
    open(os.path.join(repo, "README.md"), "w").write("# bench\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "start"], cwd=repo, check=True, env=env)
    ws = os.path.join(work, f"ws{r}")
    p = subprocess.Popen([bin_, "--config", os.path.join(work, "fabric.yaml"), "--workspace", ws, "acp"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=repo, env=env)
    def send(msg):
        p.stdin.write((json.dumps(msg) + "\n").encode()); p.stdin.flush()
    def until(pred):
        while True:
            line = p.stdout.readline()
            if not line:
                raise SystemExit("fabric acp closed stdout")
            m = json.loads(line)
            if pred(m):
                return m
    t0 = time.perf_counter()
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {}}})
    until(lambda m: m.get("id") == 1)
    inits.append((time.perf_counter() - t0) * 1000)
    t1 = time.perf_counter()
    send({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": repo, "mcpServers": []}})
    sid = until(lambda m: m.get("id") == 2)["result"]["sessionId"]
    news.append((time.perf_counter() - t1) * 1000)
    time.sleep(1.0)
    t2 = time.perf_counter()
    idle.append(rss_kib(p.pid))
    send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
          "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "say hello"}]}})
    until(lambda m: m.get("method") == "session/update" and m["params"]["update"].get("sessionUpdate") == "agent_message_chunk")
    first = (time.perf_counter() - t0) * 1000
    prompts.append((time.perf_counter() - t2) * 1000)
    until(lambda m: m.get("id") == 3)
    time.sleep(0.5)
    after.append(rss_kib(p.pid))
    p.stdin.close(); p.wait(timeout=30)
    runlog = glob.glob(os.path.join(ws, "runs", "*", "runlog.jsonl"))[0]
    model_ms = sum(json.loads(l)["payload"].get("latency_ms", 0) for l in open(runlog)
                   if json.loads(l)["kind"] == "llm_response")
    # The idle second is not the fabric's: take it out of the figure.
    firsts.append(first - 1000.0)
    beyond.append(first - 1000.0 - model_ms)

def show(name, xs, unit):
    print(f"{name}: median {statistics.median(xs):.1f} {unit}, min {min(xs):.1f}, max {max(xs):.1f} ({len(xs)} rounds)")
show("initialize -> first agent_message_chunk", firsts, "ms")
show("  of which beyond the model's own time", beyond, "ms")
show("  initialize answered", inits, "ms")
show("  session/new answered", news, "ms")
show("  session/prompt -> first agent_message_chunk", prompts, "ms")
show("idle RSS after initialize + session/new", idle, "KiB")
show("RSS after one turn", after, "KiB")
PY
