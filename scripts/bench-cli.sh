#!/usr/bin/env bash
# The CLI figures of docs/BENCHMARKS.md ("Through the CLI", issue #26): the wall time of a
# cold `fabric run … --json` process against `fabric mock-llm` on loopback.
#
#   scripts/bench-cli.sh                 # the release binary of this checkout's target dir
#   FABRIC_BIN=path/to/fabric scripts/bench-cli.sh
#   RUNS=30 WARMUPS=3 STEPS=100 LONG_RUNS=10 scripts/bench-cli.sh
#   MOCK_BIN=path/to/fabric …            # the mock model server from another build
#   COMPARE_MOCK_BIN=…                   # the second build's mock (default: that build)
#   EXTRA_CONFIG='sandbox: "off"' …      # lines added to the config file
#   COMPARE_BIN=path/to/other/fabric …   # a second build, run in turn with the first (one
#                                        # run of each, alternately: a loaded machine moves
#                                        # both alike), each against its own mock
#
# Two cases, each in its own fresh workspace:
#   1-step:  one model call, answered with `list_files` and `finish_task` (the store
#            opened, a run written, the sandbox decided, one tool run);
#   N-step:  STEPS-1 calls of `list_files` (of an empty workspace), then `finish_task`;
#            per step = (median N-step - median 1-step) / (STEPS - 1).
# Each time is one process, measured by bash around fork and exec (EPOCHREALTIME), so it
# includes about 1 ms of bash's own; compare figures taken with this script only.
set -euo pipefail

RUNS=${RUNS:-30}
WARMUPS=${WARMUPS:-3}
STEPS=${STEPS:-100}
LONG_RUNS=${LONG_RUNS:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${FABRIC_BIN:-$TARGET/release/fabric}
MOCK_BIN=${MOCK_BIN:-$BIN}
[[ -x $BIN ]] || { echo "no fabric binary at $BIN: cargo build --release -p fabric, or set FABRIC_BIN" >&2; exit 2; }

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

# One turn per step, keyed by the conversation so every run gets the same answers.
# The engineering specialist refuses a `finish_task` before any other tool, so the 1-step
# run lists the workspace and finishes in the same answer.
finish='  - tool_calls: [{name: finish_task, arguments: {summary: done}}]'
printf 'turn_by: conversation\nturns:\n  - tool_calls: [{name: list_files, arguments: {}}, {name: finish_task, arguments: {summary: done}}]\n' >"$WORK/one.yaml"
{
  printf 'turn_by: conversation\nturns:\n'
  # Arguments that differ at each step: the same call repeated is refused as a stall.
  for i in $(seq 1 $((STEPS - 1))); do
    printf '  - tool_calls: [{name: list_files, arguments: {max_entries: %d}}]\n' "$i"
  done
  printf '%s\n' "$finish"
} >"$WORK/long.yaml"

# Starts a mock model server on a free port for scenario $1; sets URL to its root URL.
# (Not through `$(…)`: the server's pid must reach PIDS in this shell, for the cleanup.)
serve() {
  local out
  out=$WORK/$(basename "$1").$RANDOM.out
  "$MOCK" mock-llm --scenario "$1" --port 0 >"$out" 2>/dev/null &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    if grep -qs '^listening on ' "$out"; then
      URL=$(sed -n 's/^listening on //p' "$out")
      return
    fi
    sleep 0.05
  done
  echo "mock-llm did not start" >&2
  exit 1
}

# Writes the config of case $1 (a model key at URL $2) and makes its workspace.
configure() {
  mkdir -p "$WORK/$1"
  cat >"$WORK/$1.yaml" <<YAML
models:
  mock: {base_url: "$2/v1", model: qwen2.5:7b, backend: openai}
default_model_key: mock
${EXTRA_CONFIG:-}
YAML
}

# Runs case $1 once with binary $2; a failure ends the script with the run's output.
run_once() {
  if ! FABRIC_CONFIG_PATH="$WORK/$1.yaml" "$2" run "say done" --pack engineering --json \
    --max-steps "$STEPS" --workspace "$WORK/$1" >"$WORK/$1.out" 2>"$WORK/$1.err"; then
    echo "fabric run ($1, $2) failed:" >&2
    cat "$WORK/$1.out" "$WORK/$1.err" >&2
    exit 1
  fi
}

# Runs case $1 $3 times after $2 warm-ups with each binary of BINS in turn; writes the sorted
# wall times in ms of binary i to $WORK/$1.i.ms.
measure() {
  local case=$1 warmups=$2 runs=$3 i b start end
  for ((b = 0; b < ${#BINS[@]}; b++)); do
    for ((i = 0; i < warmups; i++)); do run_once "$case$b" "${BINS[b]}"; done
    : >"$WORK/$case.$b.raw"
  done
  for ((i = 0; i < runs; i++)); do
    for ((b = 0; b < ${#BINS[@]}; b++)); do
      start=$EPOCHREALTIME
      run_once "$case$b" "${BINS[b]}"
      end=$EPOCHREALTIME
      echo "$start $end" >>"$WORK/$case.$b.raw"
    done
  done
  for ((b = 0; b < ${#BINS[@]}; b++)); do
    awk '{ printf "%.3f\n", ($2 - $1) * 1000 }' "$WORK/$case.$b.raw" | sort -n >"$WORK/$case.$b.ms"
  done
}

# Median and min of sorted numbers on stdin: "median min".
summary() {
  awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f %.1f\n", m, v[1] }'
}

BINS=("$BIN")
MOCKS=("$MOCK_BIN")
if [[ -n ${COMPARE_BIN:-} ]]; then
  BINS+=("$COMPARE_BIN")
  MOCKS+=("${COMPARE_MOCK_BIN:-$COMPARE_BIN}")
fi
for ((b = 0; b < ${#BINS[@]}; b++)); do
  MOCK=${MOCKS[b]}
  serve "$WORK/one.yaml"
  configure "one$b" "$URL"
  serve "$WORK/long.yaml"
  configure "long$b" "$URL"
done

measure one "$WARMUPS" "$RUNS"
measure long "$WARMUPS" "$LONG_RUNS"
# KEEP_TIMES=DIR keeps every time (one.N.ms, long.N.ms: sorted, in ms).
if [[ -n ${KEEP_TIMES:-} ]]; then cp "$WORK"/*.ms "$KEEP_TIMES/"; fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((b = 0; b < ${#BINS[@]}; b++)); do
  read -r one_med one_min < <(summary <"$WORK/one.$b.ms")
  read -r long_med long_min < <(summary <"$WORK/long.$b.ms")
  echo "binary: ${BINS[b]} (mock: ${MOCKS[b]})"
  printf '  1-step run, %d runs after %d warm-ups: median %s ms, min %s ms\n' "$RUNS" "$WARMUPS" "$one_med" "$one_min"
  printf '  %d-step run, %d runs after %d warm-ups: median %s ms, min %s ms\n' "$STEPS" "$LONG_RUNS" "$WARMUPS" "$long_med" "$long_min"
  awk -v l="$long_med" -v o="$one_med" -v n="$STEPS" 'BEGIN { printf "  per step: %.3f ms ((median %d-step - median 1-step) / %d)\n", (l - o) / (n - 1), n, n - 1 }'
done
