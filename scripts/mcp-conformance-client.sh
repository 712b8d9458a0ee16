#!/usr/bin/env bash
# The fabric as the client of the official MCP conformance suite's client scenarios: the suite
# runs `scripts/mcp-conformance-client.sh SERVER_URL` with the scenario's name in
# MCP_CONFORMANCE_SCENARIO (and, for some auth scenarios, MCP_CONFORMANCE_CONTEXT: JSON with a
# pre-registered client's id and secret). Every step is a plain `fabric mcp` command, the
# same client code a run uses; nothing here speaks MCP or OAuth itself.
#
# Auth scenarios log in with `--login --no-browser`: when the server asks for authorization,
# the fabric logs in (discovery, registration, PKCE), fetching the authorization URL itself,
# which the suite's authorization server approves at once, and tries again (at most 3 times).
#
#   FABRIC=path/to/fabric scripts/mcp-conformance-client.sh http://localhost:PORT/mcp
set -euo pipefail

url="${1:?usage: mcp-conformance-client.sh SERVER_URL}"
scenario="${MCP_CONFORMANCE_SCENARIO:-}"
fabric="${FABRIC:-fabric}"

# A scenario's tokens stay in its own state directory (`fabric mcp login` keeps them under
# $XDG_STATE_HOME/agent-fabric/mcp-oauth).
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
export XDG_STATE_HOME="$state"

# The suite's auth scenarios expect this URL as the client id where the authorization server
# supports client ID metadata documents (`auth/basic-cimd`).
cimd="https://conformance-test.local/client-metadata.json"
login=(--login --no-browser --client-metadata-url "$cimd")

# A pre-registered client from the scenario's context (`auth/pre-registration`).
credentials=()
if [[ -n "${MCP_CONFORMANCE_CONTEXT:-}" ]]; then
    field() { python3 -c 'import json,os,sys; print(json.loads(os.environ["MCP_CONFORMANCE_CONTEXT"]).get(sys.argv[1]) or "")' "$1"; }
    client_id=$(field client_id)
    client_secret=$(field client_secret)
    if [[ -n "$client_id" ]]; then
        login+=(--client-id "$client_id")
        if [[ -n "$client_secret" ]]; then
            export FABRIC_CONFORMANCE_CLIENT_SECRET="$client_secret"
            login+=(--client-secret-env FABRIC_CONFORMANCE_CLIENT_SECRET)
            credentials=(--client-id "$client_id" --client-secret-env FABRIC_CONFORMANCE_CLIENT_SECRET)
        fi
    fi
fi

case "$scenario" in
    initialize)
        "$fabric" mcp tools --url "$url"
        ;;
    tools_call)
        "$fabric" mcp call --url "$url" add_numbers '{"a": 5, "b": 3}'
        ;;
    sse-retry)
        "$fabric" mcp call --url "$url" test_reconnection
        ;;
    elicitation-sep1034-client-defaults)
        "$fabric" mcp call --url "$url" --elicitation defaults test_client_elicitation_defaults
        ;;
    request-metadata | http-standard-headers | json-schema-ref-no-deref)
        # 2026-07-28 envelopes and headers, a schema with a network `$ref` left alone: listing
        # the tools is the whole exchange.
        "$fabric" mcp tools --url "$url"
        ;;
    http-custom-headers)
        # The calls the scenario names in its context, each mirrored into `Mcp-Param-*`.
        python3 -c 'import json,os; [print(c["name"], json.dumps(c.get("arguments", {}))) for c in json.loads(os.environ["MCP_CONFORMANCE_CONTEXT"])["toolCalls"]]' |
            while read -r tool arguments; do
                "$fabric" mcp call --url "$url" "$tool" "$arguments"
            done
        ;;
    http-invalid-tool-headers)
        # The tools with invalid `x-mcp-header` annotations are left out; the valid one works.
        "$fabric" mcp call --url "$url" valid_tool '{"value": "us-west1"}'
        ;;
    json-schema-2020-12-preservation)
        # The echo tool gets the 2020-12 tool's schema as the fabric holds it.
        schema=$("$fabric" mcp tools --url "$url" --json |
            python3 -c 'import json,sys; t=[t for t in json.load(sys.stdin)["tools"] if t["name"].endswith("json_schema_2020_12_tool")][0]; print(json.dumps({"schema": t["input_schema"]}))')
        "$fabric" mcp call --url "$url" json_schema_echo "$schema"
        ;;
    sep-2322-client-request-state)
        # Each tool answers with input requests (SEP-2322); the fabric answers and calls again.
        for tool in test_mrtr_echo_state test_mrtr_no_state test_mrtr_unrelated test_mrtr_no_result_type; do
            "$fabric" mcp call --url "$url" --elicitation defaults "$tool"
        done
        ;;
    auth/client-credentials-basic)
        # Machine to machine: the context's client id and secret for a token, no login.
        "$fabric" mcp call --url "$url" --grant client_credentials "${credentials[@]}" test-tool
        ;;
    auth/*)
        # Every auth scenario's server offers `test-tool`; listing first is what a run does.
        "$fabric" mcp call --url "$url" "${login[@]}" test-tool
        ;;
    *)
        echo "mcp-conformance-client.sh: no steps for scenario \`$scenario\`" >&2
        exit 2
        ;;
esac
