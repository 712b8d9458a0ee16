#!/usr/bin/env bash
# The figures of docs/BENCHMARKS.md "#25: runs on a project, through the CLI": what working
# on the user's repository adds to a run, measured as a user meets it: the wall time of a
# cold `fabric run … --json` process against `fabric mock-llm` on loopback, with and without
# `--project`.
#
#   scripts/bench-project.sh                       # the release binary of the target dir
#   FILES=50000 RUNS=5 scripts/bench-project.sh    # a large repository
#   FABRIC_BIN=path/to/fabric STEPS=10 …
#
# Four cases, each run RUNS times after one warm-up, medians reported:
#   scratch-1 / project-1:  one answer (list_files and finish_task): the project run's
#                           extra is making the worktree (and its `workspace` event);
#   scratch-N / project-N:  STEPS answers each writing a small file (a new one, or one
#                           appended to), then finish_task: a checkpoint after each write.
# Per step, a checkpoint costs ((project-N - scratch-N) - (project-1 - scratch-1)) / STEPS.
# The repository: FILES files of about 300 bytes, 100 to a directory, committed and packed.
set -euo pipefail

RUNS=${RUNS:-10}
STEPS=${STEPS:-10}
FILES=${FILES:-100}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${FABRIC_BIN:-$TARGET/release/fabric}
[[ -x $BIN ]] || { echo "no fabric binary at $BIN: cargo build --release -p fabric, or set FABRIC_BIN" >&2; exit 2; }
command -v git >/dev/null || { echo "git is needed" >&2; exit 2; }

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
echo "== a repository of $FILES files" >&2
REPO=$WORK/repo
mkdir -p "$REPO"
python3 - "$REPO" "$FILES" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "src", f"d{i // 100:04d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}.rs"), "w") as f:
        f.write(f"// file {i}\n" + "pub fn f() -> u32 {\n    42\n}\n" * 6)
EOF
git -C "$REPO" init -q -b main
git -C "$REPO" add -A
git -C "$REPO" -c user.name=b -c user.email=b@b -c gc.auto=0 commit -qm start
git -C "$REPO" gc -q

one='turn_by: conversation
turns:
  - tool_calls: [{name: list_files, arguments: {}}, {name: finish_task, arguments: {summary: done}}]'
{
  printf 'turn_by: conversation\nturns:\n'
  for i in $(seq 1 "$STEPS"); do
    # A new file every third step, else src/d0000/f000000.rs rewritten with one more line.
    if ((i % 3 == 0)); then
      printf '  - tool_calls: [{name: write_file, arguments: {path: "notes/n%d.txt", content: "note %d"}}]\n' "$i" "$i"
    else
      printf '  - tool_calls: [{name: write_file, arguments: {path: src/d0000/f000000.rs, content: "// edited %d\\n"}}]\n' "$i"
    fi
  done
  printf '  - tool_calls: [{name: finish_task, arguments: {summary: done}}]\n'
} >"$WORK/long.yaml"
printf '%s\n' "$one" >"$WORK/one.yaml"

serve() {
  local out=$WORK/$1.out
  "$BIN" mock-llm --scenario "$WORK/$1.yaml" --port 0 >"$out" 2>/dev/null &
  PIDS+=($!)
  for _ in $(seq 1 100); do
    if grep -qs '^listening on ' "$out"; then
      sed -n 's/^listening on //p' "$out"
      return
    fi
    sleep 0.05
  done
  echo "mock-llm did not start" >&2
  exit 1
}
ONE_URL=$(serve one)
LONG_URL=$(serve long)

# run_case NAME SCENARIO_URL [--project REPO]: one cold run; prints its wall time in ms.
run_case() {
  local name=$1 url=$2
  shift 2
  mkdir -p "$WORK/$name"
  printf 'models:\n  mock: {base_url: "%s/v1", model: qwen2.5:7b, backend: openai}\ndefault_model_key: mock\n' "$url" >"$WORK/$name.yaml"
  local start=$EPOCHREALTIME
  if ! FABRIC_CONFIG_PATH="$WORK/$name.yaml" "$BIN" run "edit" --pack engineering --json \
    --max-steps $((STEPS + 2)) --workspace "$WORK/$name" "$@" >"$WORK/$name.last" 2>&1; then
    echo "fabric run ($name) failed:" >&2
    cat "$WORK/$name.last" >&2
    exit 1
  fi
  local end=$EPOCHREALTIME
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f\n", (e - s) * 1000 }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m }'; }

declare -A MED
for case in scratch-1 project-1 scratch-N project-N; do
  url=$ONE_URL
  [[ $case == *-N ]] && url=$LONG_URL
  args=()
  [[ $case == project-* ]] && args=(--project "$REPO")
  run_case "$case" "$url" "${args[@]}" >/dev/null # warm-up
  for _ in $(seq 1 "$RUNS"); do run_case "$case" "$url" "${args[@]}"; done >"$WORK/$case.ms"
  MED[$case]=$(median <"$WORK/$case.ms")
  # The worktrees of the runs so far go, so the next case's disk is the same.
  git -C "$REPO" worktree list --porcelain | sed -n 's/^worktree //p' | tail -n +2 |
    while read -r w; do git -C "$REPO" worktree remove --force "$w"; done
done

# Each checkpoint as the runlog has it: from the write's `tool_call` to its `checkpoint`, less
# the same write's `tool_call` to `tool_result` in the scratch runs (the write itself). The
# wall-time difference above also holds the worktree's creation, whose spread on a large
# repository is wider than the checkpoints themselves.
CKPT=$(python3 -c '
import glob, json, statistics, sys
def deltas(case, end):
    out = []
    for path in glob.glob(sys.argv[1] + "/" + case + "/runs/*/runlog.jsonl"):
        events = [json.loads(l) for l in open(path)]
        for i, e in enumerate(events):
            if e["kind"] == "tool_call" and e["payload"]["tool"] == "write_file":
                later = next((x for x in events[i + 1:] if x["kind"] == end), None)
                if later:
                    out.append((later["ts"] - e["ts"]) * 1000)
    return out
ckpt, write = deltas("project-N", "checkpoint"), deltas("scratch-N", "tool_result")
print("%.1f" % (statistics.median(ckpt) - statistics.median(write)))
' "$WORK")
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); $FILES files, $STEPS writing steps, $RUNS runs a case (medians, ms)"
for case in scratch-1 project-1 scratch-N project-N; do printf '%-10s %10s\n' "$case" "${MED[$case]}"; done
awk -v ckpt="$CKPT" -v s1="${MED[scratch-1]}" -v p1="${MED[project-1]}" -v sn="${MED[scratch-N]}" -v pn="${MED[project-N]}" -v n="$STEPS" 'BEGIN {
  create = p1 - s1; per = ((pn - sn) - create) / n; step = (sn - s1) / n
  printf "worktree:            %.1f ms\n", create
  printf "a checkpoint:        %.1f ms a writing step (wall times), %s ms (runlogs)\n", per, ckpt
  printf "a scratch step:      %.1f ms (the loop, a write_file, the mock model)\n", step
  printf "checkpoint / step:   %.0f %% (runlogs)\n", 100 * ckpt / step
}'
