#!/usr/bin/env bash
# The "MCP pooling" figures of docs/BENCHMARKS.md (issue #45): what one stdio MCP server
# (server-everything) adds to a run through `fabric serve`, pooled (the default: a warm
# process started ahead of the run) and unpooled (`pool: false`), against a run without MCP
# servers, with `fabric mock-llm` on loopback.
#
#   scripts/bench-mcp-pool.sh                     # the debug binary of this checkout's target dir
#   FABRIC_BIN=path/to/fabric RUNS=50 scripts/bench-mcp-pool.sh
#
# For each specialist, RUNS runs one after another through the blocking POST /run; the model
# finishes at once. Measured per run: the first-step latency (run_start to the first
# llm_request in its runlog: the run waits for the server, whose tool it names) and the wall
# time of the POST; median and worst. Memory: the RSS of the fabric and of the server's
# processes (node) once the runs are over (the pool's warm processes are what is left).
#
# The same for a server of the 2026-07-28 revision (tests/mcp/shared_server.py on the
# Python SDK of the test dependencies), whose pooled processes are shared by the runs in
# flight (ADR-122); then IN_FLIGHT (20) runs of it started at once through POST /runs,
# against a model that answers after 1 s (a second mock) and calls the server's tool once: the
# most processes of the server seen while they are in flight, the distinct processes that
# answered, and the RSS of the fabric and the server then. Then the same burst on another
# definition of the server that no run named before (a cold pool: ADR-124).
set -euo pipefail

RUNS=${RUNS:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${FABRIC_BIN:-$TARGET/debug/fabric}
DEPS=${FABRIC_TEST_DEPS:-$HOME/.cache/agent-fabric/test-deps}
EVERYTHING=$DEPS/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js
[[ -x $BIN ]] || { echo "no fabric binary at $BIN: cargo build -p fabric, or set FABRIC_BIN" >&2; exit 2; }
[[ -f $EVERYTHING ]] || { echo "no server-everything at $EVERYTHING" >&2; exit 2; }
PYTHON=$DEPS/venv/bin/python
SHARED_SERVER=$ROOT/crates/apps/fabric/tests/mcp/shared_server.py
[[ -x $PYTHON ]] || { echo "no Python SDK venv at $PYTHON" >&2; exit 2; }
IN_FLIGHT=${IN_FLIGHT:-20}
MARKER=bench-mcp-pool-$$

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

cat >"$WORK/scenario.yaml" <<YAML
turn_by: conversation
turns:
  - tool_calls: [{name: finish_task, arguments: {summary: done}}]
YAML

# Starts `$1 ARGS…` in the background, waits for its `listening on URL` line; sets URL, PID.
start() {
  local out=$WORK/listen.$RANDOM.out
  "$@" >"$out" 2>/dev/null &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 200); do
    if grep -qs '^listening on ' "$out"; then
      URL=$(sed -n 's/^listening on //p' "$out" | head -1)
      return
    fi
    sleep 0.05
  done
  echo "$* did not start" >&2
  exit 1
}

start "$BIN" mock-llm --scenario "$WORK/scenario.yaml" --port 0
MOCK=$URL
cat >"$WORK/slow.yaml" <<YAML
turn_by: conversation
latency_ms: 1000
turns:
  - tool_calls: [{name: mcp__shared__whoami, arguments: {}}]
  - tool_calls: [{name: finish_task, arguments: {summary: done}}]
YAML
start "$BIN" mock-llm --scenario "$WORK/slow.yaml" --port 0
SLOW=$URL
server() { # $1: server name, $2: extra keys
  cat <<YAML
    tools: [mcp__$1__echo]
    mcp_servers:
      - name: $1
        command: node
        args: [$EVERYTHING, stdio, $MARKER-$1]
        required: true$2
YAML
}
shared_server() { # $1: the marker's suffix (another suffix: another definition)
  cat <<YAML
    tools: [mcp__shared__whoami]
    mcp_servers:
      - name: shared
        command: $PYTHON
        args: [$SHARED_SERVER, $MARKER-${1:-shared}]
        required: true
YAML
}
cat >"$WORK/fabric.yaml" <<YAML
models:
  mock: {base_url: "$MOCK/v1", model: qwen2.5:7b, backend: openai}
  slow: {base_url: "$SLOW/v1", model: qwen2.5:7b, backend: openai, max_concurrent_requests: 64}
default_model_key: mock
specialists:
  plain:
    description: No MCP server
    system_prompt: Finish.
    tools: [read_file]
  pooled:
    description: server-everything, pooled
    system_prompt: Finish.
$(server warm "")
  unpooled:
    description: server-everything, pool false
    system_prompt: Finish.
$(server cold $'\n        pool: false')
  shared:
    description: a 2026-07-28 server, its pooled processes shared
    system_prompt: Finish.
$(shared_server)
  shared_slow:
    description: the same server, a model that answers after 1 s
    system_prompt: Finish.
    model_key: slow
$(shared_server)
  fresh_slow:
    description: another definition of the server, never run before its burst (cold)
    system_prompt: Finish.
    model_key: slow
$(shared_server fresh)
YAML
export FABRIC_CONFIG_PATH=$WORK/fabric.yaml
start "$BIN" serve --port 0 --workspace "$WORK/ws"
SERVE=$URL
SERVE_PID=$PID

rss_kib() { # 0 for a process gone (or a zombie, which has no VmRSS) since it was listed
  local kib
  kib=$(awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || true)
  echo "${kib:-0}"
}
server_rss_kib() { # the RSS of the processes whose command line holds $1
  local total=0 pid
  for pid in $(pgrep -f "$1" || true); do total=$((total + $(rss_kib "$pid"))); done
  echo "$total"
}
median() { sort -n | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m }'; }
worst() { sort -n | tail -1 | xargs printf '%.1f'; }

measure() { # $1: specialist, $2: server marker
  local first=() wall=() i out id runlog
  # One run first, so the pool (and the fabric's caches) are warm, as in a long-lived fabric.
  curl -sf -X POST -H 'content-type: application/json' -d "{\"prompt\": \"go\", \"pack\": \"$1\"}" "$SERVE/run" >/dev/null
  sleep 1
  for ((i = 0; i < RUNS; i++)); do
    out=$(curl -sf -w '\n%{time_total}' -X POST -H 'content-type: application/json' \
      -d "{\"prompt\": \"go\", \"pack\": \"$1\"}" "$SERVE/run")
    wall+=("$(echo "$(tail -1 <<<"$out") * 1000" | bc -l)")
    id=$(head -1 <<<"$out" | jq -r ._meta.run_id)
    runlog=$WORK/ws/runs/$id/runlog.jsonl
    first+=("$(jq -s '(([.[] | select(.kind == "llm_request")][0].ts) - .[0].ts) * 1000' "$runlog")")
    [[ $1 == pooled ]] && WARM=$((WARM + $(jq -s '[.[] | select(.kind == "mcp_server" and .payload.warm == true)] | length' "$runlog")))
    # A breath between runs, as runs of a server arrive: the pool refills meanwhile.
    sleep 0.2
  done
  sleep 1
  printf '%-9s first step ms: median %s, worst %s; POST /run ms: median %s, worst %s; after the runs: fabric RSS %s KiB, server processes %s (%s KiB)\n' \
    "$1" "$(printf '%s\n' "${first[@]}" | median)" "$(printf '%s\n' "${first[@]}" | worst)" \
    "$(printf '%s\n' "${wall[@]}" | median)" "$(printf '%s\n' "${wall[@]}" | worst)" \
    "$(rss_kib "$SERVE_PID")" "$( (pgrep -f "${2:-none-$$}" || true) | wc -l)" "$(server_rss_kib "${2:-none-$$}")"
}

WARM=0
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); binary: $BIN; $RUNS runs each"
measure plain ""
measure pooled "$MARKER-warm"
measure unpooled "$MARKER-cold"
echo "pooled runs that got a warm process: $WARM of $RUNS"
measure shared "$MARKER-shared"

# IN_FLIGHT runs of $1 at once, each holding its model request 1 s, all naming the server
# whose processes hold $2 on their command line; $3 says which burst this is.
burst() {
  local ids=() id i
  for ((i = 0; i < IN_FLIGHT; i++)); do
    id=$(curl -s -X POST -H 'content-type: application/json' \
      -d "{\"prompt\": \"go\", \"pack\": \"$1\"}" "$SERVE/runs" | tee "$WORK/post.json" | jq -r .run_id)
    [[ $id != null ]] || { echo "POST /runs failed: $(cat "$WORK/post.json")" >&2; exit 1; }
    ids+=("$id")
  done
  local most=0 fabric_most=0 server_most=0 n r done_count started elapsed shares=0 answered s
  started=$(date +%s.%N)
  while :; do
    n=$( (pgrep -f "$2" || true) | wc -l)
    ((n > most)) && most=$n
    r=$(rss_kib "$SERVE_PID"); ((r > fabric_most)) && fabric_most=$r
    r=$(server_rss_kib "$2"); ((r > server_most)) && server_most=$r
    done_count=0
    for id in "${ids[@]}"; do
      case $(curl -sf "$SERVE/runs/$id/status" | jq -r .status) in
        completed) done_count=$((done_count + 1)) ;;
        queued | running | starting) ;;
        *) echo "run $id ended: $(grep -m3 "tool_error\|run_failed" "$WORK/ws/runs/$id/runlog.jsonl")" >&2; exit 1 ;;
      esac
    done
    ((done_count == IN_FLIGHT)) && break
    sleep 0.1
  done
  elapsed=$(echo "$(date +%s.%N) - $started" | bc -l)
  answered=$(for id in "${ids[@]}"; do
    jq -r 'select(.kind == "tool_result" and .payload.tool == "mcp__shared__whoami") | .payload.result | fromjson | .pid' "$WORK/ws/runs/$id/runlog.jsonl"
  done | sort -u | wc -l)
  for id in "${ids[@]}"; do
    s=$(jq -s '[.[] | select(.kind == "mcp_server" and .payload.status == "ready") | .payload.shared // 0] | max // 0' "$WORK/ws/runs/$id/runlog.jsonl")
    ((s > shares)) && shares=$s
  done
  printf '%s runs in flight at once (%s): %s processes of the shared server at most, %s answered (most runs on one: %s), all done in %.2f s; peak RSS: fabric %s KiB, server processes %s KiB\n' \
    "$IN_FLIGHT" "$3" "$most" "$answered" "$shares" "$elapsed" "$fabric_most" "$server_most"
}

burst shared_slow "$MARKER-shared" "warm pool"
# The same burst on a definition no run has named yet: the runs wait for the pool's first
# start instead of each starting a process (ADR-124).
burst fresh_slow "$MARKER-fresh" "cold: the definition's first runs"
