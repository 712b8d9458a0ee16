#!/usr/bin/env bash
# The "Working with a run" figures of docs/BENCHMARKS.md (issue #42): what a run waiting for
# a person costs `fabric serve` once its question is recorded, and how long an answer takes
# to reach the model, against `fabric mock-llm` on loopback.
#
#   scripts/bench-waiting.sh                      # the debug binary of this checkout's target dir
#   FABRIC_BIN=path/to/fabric WAITING=500 ANSWERS=50 scripts/bench-waiting.sh
#
# WAITING runs are started with POST /runs; each model asks `ask_user` at once, so each run
# waits (`input_required`). Measured: the server's RSS before the runs and once all of them
# wait (from /proc), its runs in flight (`GET /health`), and the rows the store holds for
# them. Then ANSWERS of them are answered one after another with POST /runs/{id}/input; each
# latency is from just before the POST to the `llm_request` the continued run records for its
# next model call (both on this machine's clock), median and worst.
set -euo pipefail

WAITING=${WAITING:-200}
ANSWERS=${ANSWERS:-20}
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

cat >"$WORK/scenario.yaml" <<YAML
turn_by: conversation
turns:
  - tool_calls: [{name: ask_user, arguments: {question: "Which database?"}}]
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
cat >"$WORK/fabric.yaml" <<YAML
models:
  mock: {base_url: "$MOCK/v1", model: qwen2.5:7b, backend: openai}
default_model_key: mock
specialists:
  asker:
    description: Asks before it decides
    system_prompt: Ask the user when a decision is theirs.
    tools: [ask_user]
YAML
export FABRIC_CONFIG_PATH=$WORK/fabric.yaml
start "$BIN" serve --port 0 --workspace "$WORK/ws"
SERVE=$URL
SERVE_PID=$PID

rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$SERVE_PID/status"; }
post() { curl -sf -X POST -H 'content-type: application/json' -d "$2" "$SERVE$1"; }

# Warm up: one run asked and answered, so the baseline has the server's caches filled.
id=$(post /runs '{"prompt": "pick", "pack": "asker"}' | jq -r .run_id)
until [[ $(curl -sf "$SERVE/runs/$id/status" | jq -r .status) == input_required ]]; do sleep 0.05; done
post "/runs/$id/input" '{"answer": "SQLite"}' >/dev/null
until [[ $(curl -sf "$SERVE/runs/$id/status" | jq -r .status) == completed ]]; do sleep 0.05; done
sleep 1
BASE=$(rss_kib)

IDS=()
for ((i = 0; i < WAITING; i++)); do
  IDS+=("$(post /runs '{"prompt": "pick", "pack": "asker"}' | jq -r .run_id)")
done
for id in "${IDS[@]}"; do
  until [[ $(curl -sf "$SERVE/runs/$id/status" | jq -r .status) == input_required ]]; do sleep 0.02; done
done
sleep 1
WAIT_RSS=$(rss_kib)
IN_FLIGHT=$(curl -sf "$SERVE/health" | jq .runs_in_flight)
DB=$WORK/ws/fabric.db
ROWS=$(sqlite3 "$DB" "SELECT (SELECT COUNT(*) FROM runs WHERE status = 'input_required') || ' runs rows, ' || (SELECT COUNT(*) FROM run_inbox) || ' inbox rows'" 2>/dev/null || echo "? (no sqlite3)")

LAT=()
for ((i = 0; i < ANSWERS && i < WAITING; i++)); do
  id=${IDS[$i]}
  t0=$(date +%s.%N)
  post "/runs/$id/input" '{"answer": "PostgreSQL"}' >/dev/null
  until [[ $(curl -sf "$SERVE/runs/$id/status" | jq -r .status) == completed ]]; do sleep 0.02; done
  runlog=$WORK/ws/runs/$id/runlog.jsonl
  t1=$(jq -s '[.[] | select(.kind == "llm_request")] | .[1].ts' "$runlog")
  LAT+=("$(echo "($t1 - $t0) * 1000" | bc -l)")
done

median() { sort -n | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m }'; }
worst() { sort -n | tail -1 | xargs printf '%.1f'; }

echo "load: $(cut -d' ' -f1-3 /proc/loadavg); binary: $BIN"
echo "waiting runs:         $WAITING"
echo "server RSS:           ${BASE} KiB before, ${WAIT_RSS} KiB with all waiting ($(( (WAIT_RSS - BASE) * 1024 / WAITING )) bytes a waiting run)"
echo "runs in flight:       $IN_FLIGHT (GET /health, with every run waiting)"
echo "store:                $ROWS"
echo "answer -> next model request, ms over $ANSWERS answers: median $(printf '%s\n' "${LAT[@]}" | median), worst $(printf '%s\n' "${LAT[@]}" | worst)"
