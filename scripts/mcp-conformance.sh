#!/usr/bin/env bash
# Runs the official MCP conformance suite (server side) against `fabric serve`'s /mcp.
# Not part of .ci/run: most scenarios call fixture tools, resources and prompts that only a
# dedicated conformance server has (docs/MCP.md explains the counts). Needs Node 22, which
# is installed from npm (`node@22`) next to the suite, not globally.
#
#   scripts/mcp-conformance.sh [path/to/fabric]
set -euo pipefail
cd "$(dirname "$0")/.."

DEPS="${FABRIC_TEST_DEPS:-$HOME/.cache/agent-fabric/test-deps}/conformance"
FABRIC="${1:-${CARGO_TARGET_DIR:-target}/debug/fabric}"
PORT="${PORT:-18911}"

mkdir -p "$DEPS"
( cd "$DEPS"
  [[ -f package.json ]] || echo '{"private": true}' > package.json
  npm install --no-audit --no-fund --loglevel=error node@22 @modelcontextprotocol/conformance@0.1.16 )

workspace=$(mktemp -d)
"$FABRIC" serve --port "$PORT" --workspace "$workspace" --token-env FABRIC_CONFORMANCE_NO_TOKEN \
    >"$workspace/serve.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$workspace"' EXIT
for _ in $(seq 1 50); do
    grep -q "listening on" "$workspace/serve.log" 2>/dev/null && break
    sleep 0.2
done

PATH="$DEPS/node_modules/.bin:$PATH" node "$DEPS/node_modules/@modelcontextprotocol/conformance/dist/index.js" \
    server --url "http://127.0.0.1:$PORT/mcp" -o "$workspace/results" | sed -n '/=== SUMMARY ===/,$p'
