#!/usr/bin/env bash
# The live tool output figure of docs/BENCHMARKS.md (issue #42): what streaming a `shell`
# command's lines to followers costs for a command printing many lines quickly, against
# `fabric mock-llm` on loopback.
#
#   scripts/bench-live-output.sh                  # the debug binary of this checkout's target dir
#   FABRIC_BIN=path/to/fabric scripts/bench-live-output.sh
#   COMPARE_BIN=path/to/fabric-before …           # a build without live output, run in turn
#   LINES=100000 RUNS=5 scripts/bench-live-output.sh
#
# The model asks for `seq 1 LINES` once, then finishes. Each case is timed by the runlog: from
# the shell call's `tool_call` to its `tool_result` (the command, the reading of its pipes,
# the live lines split, bounded and handed on, the result recorded). Cases:
#   run --json      `fabric run --json`: nobody follows (the lines are split and bounded, then
#                   dropped by the run's live window, which has no follower)
#   run (human)     `fabric run`: the terminal renderer follows and prints what gets through
#   serve           `fabric serve`, a run started with POST /runs and nobody following it
#   serve + SSE     the same with `curl` following GET /runs/{id}/events to its end
# Medians of RUNS runs each, in ms; with COMPARE_BIN each case is run with both binaries in turn.
set -euo pipefail

RUNS=${RUNS:-5}
LINES=${LINES:-100000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${FABRIC_BIN:-$TARGET/debug/fabric}
[[ -x $BIN ]] || { echo "no fabric binary at $BIN: cargo build -p fabric, or set FABRIC_BIN" >&2; exit 2; }

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# The first answer waits a moment, so an SSE follower is there before the command runs.
cat >"$WORK/scenario.yaml" <<YAML
turn_by: conversation
turns:
  - delay_ms: 300
    tool_calls: [{name: shell, arguments: {cmd: [seq, "1", "$LINES"]}}]
  - tool_calls: [{name: finish_task, arguments: {summary: done}}]
YAML

# Starts `$1 ARGS…` in the background, waits for its `listening on URL` line; sets URL.
start() {
  local out=$WORK/listen.$RANDOM.out
  "$@" >"$out" 2>/dev/null &
  PIDS+=($!)
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
cat >"$WORK/fabric.yaml" <<YAML
models:
  mock: {base_url: "$MOCK/v1", model: qwen2.5:7b, backend: openai}
default_model_key: mock
shell:
  allowed_commands: [seq]
YAML
export FABRIC_CONFIG_PATH=$WORK/fabric.yaml

# The shell call's duration in ms, from runlog $1.
call_ms() {
  jq -s '[.[] | select(.payload.tool == "shell" and (.kind == "tool_call" or .kind == "tool_result"))]
         | ((.[1].ts - .[0].ts) * 1000 * 10 | round) / 10' "$1"
}

# The newest run's runlog under workspace root $1.
newest_runlog() {
  echo "$(ls -d "$1"/runs/*/ | sort | tail -1)runlog.jsonl"
}

# Case $1 with binary $2 once, in workspace $3; prints the call's ms.
once() {
  local case=$1 bin=$2 ws=$3 id
  case $case in
    json) "$bin" run "count" --pack engineering --json --workspace "$ws" >/dev/null 2>&1 ;;
    human) NO_COLOR=1 "$bin" run "count" --pack engineering --workspace "$ws" >/dev/null 2>&1 ;;
    serve | sse)
      id=$(curl -sf -X POST -H 'content-type: application/json' \
        -d '{"prompt": "count", "pack": "engineering"}' "${SERVE[$bin]}/runs" | jq -r .run_id)
      if [[ $case == sse ]]; then
        curl -sfN -H 'accept: text/event-stream' "${SERVE[$bin]}/runs/$id/events" >"$WORK/sse.out"
        grep -c '^event: tool_output' "$WORK/sse.out" >"$WORK/frames-$(basename "$bin")" || true
      else
        until curl -sf "${SERVE[$bin]}/runs/$id/status" | jq -e '.status != "running"' >/dev/null; do
          sleep 0.05
        done
      fi
      ;;
  esac
  call_ms "$(newest_runlog "$ws")"
}

BINS=("$BIN")
if [[ -n ${COMPARE_BIN:-} ]]; then BINS+=("$COMPARE_BIN"); fi
declare -A SERVE
for bin in "${BINS[@]}"; do
  mkdir -p "$WORK/serve-$(basename "$bin")"
  start "$bin" serve --port 0 --workspace "$WORK/serve-$(basename "$bin")"
  SERVE[$bin]=$URL
done

median() { sort -n | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m }'; }

echo "load: $(cut -d' ' -f1-3 /proc/loadavg); $LINES lines; medians of $RUNS runs, ms from tool_call to tool_result"
printf '%-14s' "case"
for bin in "${BINS[@]}"; do printf '%14s' "$(basename "$bin")"; done
echo
for case in json human serve sse; do
  declare -A TIMES=()
  for ((i = 0; i < RUNS; i++)); do
    for bin in "${BINS[@]}"; do
      if [[ $case == serve || $case == sse ]]; then ws=$WORK/serve-$(basename "$bin"); else ws=$WORK/$case-$(basename "$bin"); fi
      TIMES[$bin]+="$(once "$case" "$bin" "$ws") "
    done
  done
  printf '%-14s' "$case"
  for bin in "${BINS[@]}"; do printf '%14s' "$(tr ' ' '\n' <<<"${TIMES[$bin]}" | grep . | median)"; done
  echo
done
for bin in "${BINS[@]}"; do
  echo "$(basename "$bin"): tool_output frames the SSE follower got in its last run: $(cat "$WORK/frames-$(basename "$bin")" 2>/dev/null || echo '?')"
done
