#!/usr/bin/env bash
# Installs the real MCP servers and clients the MCP tests run against, at pinned versions,
# into $FABRIC_TEST_DEPS (default $HOME/.cache/agent-fabric/test-deps); nothing is installed
# globally. Idempotent: a second run with the same versions does nothing.
#
#   npm:  @modelcontextprotocol/server-everything, @modelcontextprotocol/server-filesystem
#   PyPI: mcp (the official Python SDK), in a venv, to drive `fabric mcp` from outside
#   PyPI: selenium, in the same venv, to drive the web run viewer in a real browser (4.51.0:
#         4.52.0 asks for a certifi release PyPI's index here did not have yet)
#   PyPI: opentelemetry-proto, in the same venv: the OTLP receiver of the trace tests
#   PyPI: schemathesis, in the same venv: checks `fabric serve` against its OpenAPI document
#   apt:  postgresql (Debian's server package), for the database store's contract tests,
#         which start a throwaway cluster from /usr/lib/postgresql/*/bin (needs root)
#   apt:  chromium and chromium-driver (Debian's packages), the headless browser and its
#         WebDriver that the web run viewer's tests drive (needs root)
#
# The tests find the install through the same variable and skip with a message naming this
# script when it is missing; .ci/run runs this script first, so in CI nothing is skipped.
set -euo pipefail

DEPS="${FABRIC_TEST_DEPS:-$HOME/.cache/agent-fabric/test-deps}"
EVERYTHING_VERSION=2026.8.31
FILESYSTEM_VERSION=2026.8.31
PY_MCP_VERSION=2.3.0
SELENIUM_VERSION=4.51.0
OTEL_PROTO_VERSION=1.38.0
SCHEMATHESIS_VERSION=4.32.5
STAMP="everything=$EVERYTHING_VERSION filesystem=$FILESYSTEM_VERSION mcp=$PY_MCP_VERSION selenium=$SELENIUM_VERSION opentelemetry-proto=$OTEL_PROTO_VERSION schemathesis=$SCHEMATHESIS_VERSION"

# `apt_install WHAT PACKAGE...` installs Debian's PACKAGEs, called WHAT in its messages;
# system packages, not versioned with the stamp below.
apt_install() {
    local what="$1"
    shift
    echo "== apt: $*"
    if [[ "$(id -u)" != 0 ]]; then
        echo "$what is missing and installing it needs root: apt-get install -y $*" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "$@" \
        || { apt-get update && apt-get install -y --no-install-recommends "$@"; }
    # The build scripts that mark tests ignored when these are missing watch this file.
    touch "$(dirname "$0")/../crates/testing/test-deps.stamp"
}

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt_install PostgreSQL postgresql
fi
if [[ ! -x /usr/bin/chromium || ! -x /usr/bin/chromedriver ]]; then
    apt_install "Chromium or its WebDriver" chromium chromium-driver
fi

mkdir -p "$DEPS"
if [[ -f "$DEPS/.installed" && "$(cat "$DEPS/.installed")" == "$STAMP" ]]; then
    echo "test deps up to date in $DEPS"
    exit 0
fi

command -v node >/dev/null || { echo "node is needed (v20 or later)" >&2; exit 1; }
command -v npm >/dev/null || { echo "npm is needed" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 1; }

echo "== npm packages into $DEPS/node"
mkdir -p "$DEPS/node"
( cd "$DEPS/node"
  [[ -f package.json ]] || echo '{"name": "fabric-test-deps", "private": true}' > package.json
  npm install --no-audit --no-fund --loglevel=error \
      "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
      "@modelcontextprotocol/server-filesystem@$FILESYSTEM_VERSION" )
# The official conformance suite (@modelcontextprotocol/conformance 0.1.16) needs Node 22
# (`fs.globSync`); with Node 20 it does not start, so it is not installed here (docs/MCP.md).

echo "== python mcp, selenium, opentelemetry-proto and schemathesis into $DEPS/venv"
python3 -m venv "$DEPS/venv"
"$DEPS/venv/bin/pip" install --quiet --disable-pip-version-check \
    "mcp==$PY_MCP_VERSION" "selenium==$SELENIUM_VERSION" \
    "opentelemetry-proto==$OTEL_PROTO_VERSION" "schemathesis==$SCHEMATHESIS_VERSION"

echo "$STAMP" > "$DEPS/.installed"
# The build scripts that mark tests ignored when these are missing watch this file.
touch "$(dirname "$0")/../crates/testing/test-deps.stamp"
echo "test deps installed in $DEPS"
