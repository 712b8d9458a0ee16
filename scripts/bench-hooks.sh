#!/usr/bin/env bash
# The hooks figure of docs/BENCHMARKS.md (issue #43): what a PreToolUse hook adds to a step,
# one process per call, measured through `fabric run` against `fabric mock-llm` on loopback.
#
#   scripts/bench-hooks.sh                       # the debug binary of this checkout's target dir
#   FABRIC_BIN=path/to/fabric scripts/bench-hooks.sh
#   CALLS=20 RUNS=5 scripts/bench-hooks.sh
#
# The model writes CALLS files (one `write_file` a step), then finishes. Each call is timed by
# the runlog: from its `tool_call` to its `tool_result` (the hooks, the call, its result
# recorded). Cases, each a config file:
#   none        no hooks
#   cat         PreToolUse `cat > /dev/null` on every tool: one `sh -c` and one process
#   jq          PreToolUse `jq -r .tool_input.path > /dev/null`: a typical guard reading its input
#   jq x3       three such hooks on the same event (run in parallel)
# Prints, per case, the median of the calls' ms over RUNS runs, and the median run's wall ms.
set -euo pipefail

RUNS=${RUNS:-5}
CALLS=${CALLS:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${FABRIC_BIN:-$TARGET/debug/fabric}
[[ -x $BIN ]] || { echo "no fabric binary at $BIN: cargo build -p fabric, or set FABRIC_BIN" >&2; exit 2; }
command -v jq >/dev/null || { echo "jq is needed" >&2; exit 2; }

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

{
  echo "turn_by: conversation"
  echo "turns:"
  for ((i = 0; i < CALLS; i++)); do
    echo "  - tool_calls: [{name: write_file, arguments: {path: f$i.txt, content: \"file $i\"}}]"
  done
  echo "  - tool_calls: [{name: finish_task, arguments: {summary: done}}]"
} >"$WORK/scenario.yaml"

out=$WORK/mock.out
"$BIN" mock-llm --scenario "$WORK/scenario.yaml" --port 0 >"$out" 2>/dev/null &
PIDS+=($!)
for _ in $(seq 1 200); do grep -qs '^listening on ' "$out" && break; sleep 0.05; done
MOCK=$(sed -n 's/^listening on //p' "$out" | head -1)
[[ -n $MOCK ]] || { echo "mock-llm did not start" >&2; exit 1; }

config() {
  local name=$1 hooks=$2
  cat >"$WORK/$name.yaml" <<YAML
models:
  mock: {base_url: "$MOCK/v1", model: qwen2.5:7b, backend: openai}
default_model_key: mock
max_steps: $((CALLS + 5))
$hooks
YAML
}
hook() { echo "{type: command, command: \"$1\"}"; }
config none ""
config cat "hooks: {PreToolUse: [{hooks: [$(hook 'cat > /dev/null')]}]}"
config jq "hooks: {PreToolUse: [{matcher: write_file, hooks: [$(hook 'jq -r .tool_input.path > /dev/null')]}]}"
config jq3 "hooks: {PreToolUse: [{matcher: write_file, hooks: [$(hook 'jq -r .tool_input.path > /dev/null'), $(hook 'jq -r .tool_name > /dev/null'), $(hook 'jq -r .cwd > /dev/null')]}]}"

median() { sort -n | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f", m }'; }

echo "load: $(cut -d' ' -f1-3 /proc/loadavg); $CALLS write_file calls a run, $RUNS runs a case; $(basename "$BIN") $(file -b "$BIN" | grep -q 'not stripped' && echo '(debug or unstripped)')"
printf '%-8s %16s %14s %10s\n' case "call ms (median)" "run ms (med.)" hook_runs
for case in none cat jq jq3; do
  calls=$WORK/$case.calls
  walls=$WORK/$case.walls
  : >"$calls"
  : >"$walls"
  runs=0
  for ((i = 0; i < RUNS; i++)); do
    ws=$WORK/ws-$case-$i
    start=$(date +%s%N)
    FABRIC_CONFIG_PATH=$WORK/$case.yaml "$BIN" run "write the files" --pack engineering --json --workspace "$ws" >/dev/null 2>&1
    end=$(date +%s%N)
    echo $(((end - start) / 1000000)) >>"$walls"
    log=$(ls -d "$ws"/runs/*/ | tail -1)runlog.jsonl
    jq -s '[.[] | select(.payload.tool == "write_file" and (.kind == "tool_call" or .kind == "tool_result"))]
           | [range(0; length; 2) as $i | (.[$i + 1].ts - .[$i].ts) * 1000] | .[]' "$log" >>"$calls"
    runs=$(jq -s '[.[] | select(.kind == "hook_run")] | length' "$log")
  done
  printf '%-8s %16s %14s %10s\n' "$case" "$(median <"$calls")" "$(median <"$walls")" "$runs"
done
