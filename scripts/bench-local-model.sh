#!/usr/bin/env bash
# The real-small-model figures of docs/BENCHMARKS.md and docs/LOCAL_MODELS.md (issue #24):
# `fabric eval` on the shipped suite against llama.cpp's llama-server and llama-cpp-python's
# server, both serving SmolLM2-135M-Instruct, with the loop's aids on (the defaults) and
# off; then one 20-step run on llama-server whose per-step prompt cache and time split are
# read from its runlog. Everything on 127.0.0.1; the servers are stopped at the end.
#
#   scripts/install-test-deps.sh            # the servers and the model, once
#   cargo build --release -p fabric
#   scripts/bench-local-model.sh [REPEAT]   # REPEAT runs of each task (default 5)
#   BENCH_ONLY_STEPS=1 scripts/bench-local-model.sh   # only the 20-step runs (plain, and on a
#                                           # repository with AGENTS.md files, issue #43)
#   BENCH_SERVER=llama-cpp-python BENCH_AIDS=off scripts/bench-local-model.sh 5
#                                           # one server (llama-server or llama-cpp-python),
#                                           # one setting of the aids (on or off)
#
# Reports land in target/bench-local-model/; a summary is printed.
set -euo pipefail
cd "$(dirname "$0")/.."

REPEAT="${1:-5}"
SERVER="${BENCH_SERVER:-all}"
AIDS="${BENCH_AIDS:-on off}"
DEPS="${FABRIC_TEST_DEPS:-$HOME/.cache/agent-fabric/test-deps}"
MODEL="$DEPS/models/SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET="${CARGO_TARGET_DIR:-target}"
FABRIC="${FABRIC_BIN:-$TARGET/release/fabric}"
OUT="$TARGET/bench-local-model"
[[ -f "$MODEL" && -x "$DEPS/bin/llama-server" ]] || {
    echo "the model or llama-server is missing: run scripts/install-test-deps.sh" >&2
    exit 1
}
[[ -x "$FABRIC" ]] || { echo "no $FABRIC: cargo build --release -p fabric" >&2; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT"

PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# `serve NAME PORT CMD...` starts a server and waits until PATH answers 200.
serve() {
    local name="$1" port="$2" path="$3"
    shift 3
    "$@" >"$OUT/$name.log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 1 600); do
        if curl -fs -o /dev/null "http://127.0.0.1:$port$path"; then return 0; fi
        sleep 0.2
    done
    echo "$name did not start; see $OUT/$name.log" >&2
    exit 1
}

# `config FILE PORT AIDS` writes a config for the server on PORT, aids `on` or `off`.
config() {
    local file="$1" port="$2" aids="$3"
    {
        echo "models:"
        echo "  small:"
        echo "    base_url: http://127.0.0.1:$port/v1"
        echo "    model: smollm2"
        echo "    backend: openai"
        echo "    timeout_s: 300"
        echo "    max_tokens: 256"
        echo "    temperature: 0"
        if [[ "$aids" == off ]]; then echo "    constrained_decoding: \"off\""; fi
        echo "default_model_key: small"
        echo "workspace: $OUT/runs-$(basename "$file" .yaml)"
        if [[ "$aids" == off ]]; then
            echo "specialists:"
            echo "  engineering: {repeat_limit: 0}"
        fi
    } >"$file"
}

# `evaluate NAME PORT` runs the suite with the aids on and off.
evaluate() {
    local name="$1" port="$2"
    for aids in $AIDS; do
        config "$OUT/$name-$aids.yaml" "$port" "$aids"
        echo "== $name, aids $aids: fabric eval --repeat $REPEAT"
        "$FABRIC" --config "$OUT/$name-$aids.yaml" eval --repeat "$REPEAT" --json >"$OUT/$name-$aids.json"
        python3 - "$OUT/$name-$aids.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["model_keys"][0]
hit = "-" if r["cache_hit_rate"] is None else f'{r["cache_hit_rate"]*100:.0f}%'
print(f'success {r["success_rate"]*100:.0f}% ({r["passed"]}/{r["runs"]}), steps {r["mean_steps"]:.1f}, '
      f'tokens {r["mean_tokens"]:.0f}, wall {r["mean_wall_s"]:.1f} s, cache {hit}, '
      f'outside the model {r["outside_model_share"]*100:.1f}%')
statuses = {}
for a in r["attempts"]:
    statuses[a["status"]] = statuses.get(a["status"], 0) + 1
print("statuses:", ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
PY
    done
}

if [[ "$SERVER" == all || "$SERVER" == llama-server ]]; then
PORT=$(free_port)
serve llama-server "$PORT" /health "$DEPS/bin/llama-server" -m "$MODEL" --alias smollm2 \
    --host 127.0.0.1 --port "$PORT" -c 4096 --parallel 1 -t 2 --no-webui
[[ -n "${BENCH_ONLY_STEPS:-}" ]] || evaluate llama-server "$PORT"

# One 20-step run: the prompt cache and the time split per step, from the runlog. The
# repetition breaker is off here, so the run lasts its 20 steps whatever the model repeats.
# `steps NAME [ARGS...]`: the run with extra `fabric run` arguments.
steps() {
local name="$1"
shift
echo "== llama-server: a 20-step run ($name)"
config "$OUT/steps.yaml" "$PORT" on
printf 'specialists:\n  engineering: {repeat_limit: 0}\n' >>"$OUT/steps.yaml"
"$FABRIC" --config "$OUT/steps.yaml" run \
    "Create the files one.txt, two.txt, three.txt, four.txt, five.txt, six.txt, seven.txt, eight.txt, nine.txt and ten.txt, each holding its own name; then read each back" \
    --pack engineering --max-steps 20 --json "$@" >"$OUT/steps-$name.json" || true
python3 - "$OUT/steps-$name.json" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
events = [json.loads(l) for l in open(result["_meta"]["runlog"])]
first, last = events[0]["ts"], events[-1]["ts"]
model_s = sum(e["payload"]["latency_ms"] for e in events if e["kind"] == "llm_response") / 1000
tool_s = 0.0
started = {}
for e in events:
    if e["kind"] == "tool_call":
        started[e["payload"]["call_id"]] = e["ts"]
    elif e["kind"] in ("tool_result", "tool_error") and e["payload"]["call_id"] in started:
        tool_s += e["ts"] - started.pop(e["payload"]["call_id"])
rates = []
for e in events:
    if e["kind"] == "llm_response" and e["step"] and e["payload"].get("prompt_cache"):
        c = e["payload"]["prompt_cache"]
        total = c["cached_tokens"] + c["evaluated_tokens"]
        rates.append(c["cached_tokens"] / total if total else 0)
wall = last - first
for f in events[0]["payload"].get("instructions", []):
    print(f'instructions: {f["path"]} ({f["bytes"]} bytes, included {f["included"]})')
print(f'status {result["_meta"]["status"]}, {result["_meta"]["steps"]} steps, wall {wall:.1f} s: '
      f'model {model_s:.1f} s, tools {tool_s:.2f} s, the fabric {max(wall - model_s - tool_s, 0)*1000:.0f} ms '
      f'({max(wall - model_s - tool_s, 0) / wall * 100:.2f}%)')
if rates:
    print(f'prompt cache after step 1: min {min(rates)*100:.1f}%, mean {sum(rates)/len(rates)*100:.1f}% '
          f'over {len(rates)} steps')
PY
}
steps plain
# The same on a repository with two AGENTS.md files (issue #43): the instructions are the end
# of the system prompt, made once, so the cache should hold as well.
REPO="$OUT/agents-md-repo"
mkdir -p "$REPO/src"
printf '# Rules\n\nWrite plain text files. Each file holds exactly its own name and a newline.\nRead every file back after writing it. Never delete files.\n' >"$REPO/AGENTS.md"
printf 'Files under src/ are source code: keep lines under 100 characters.\n' >"$REPO/src/AGENTS.md"
git -C "$REPO" init -q -b main
git -C "$REPO" -c user.name=bench -c user.email=bench@example.com add -A
git -C "$REPO" -c user.name=bench -c user.email=bench@example.com commit -qm start
steps agents-md --project "$REPO"
fi

if [[ -z "${BENCH_ONLY_STEPS:-}" && "$SERVER" != llama-server && -x "$DEPS/llama-venv/bin/python" ]]; then
    cleanup
    PIDS=()
    PORT=$(free_port)
    serve llama-cpp-python "$PORT" /v1/models "$DEPS/llama-venv/bin/python" -m llama_cpp.server \
        --model "$MODEL" --model_alias smollm2 --host 127.0.0.1 --port "$PORT" --n_ctx 4096 \
        --n_threads 2 --chat_format chatml-function-calling
    evaluate llama-cpp-python "$PORT"
fi
echo "reports: $OUT"
