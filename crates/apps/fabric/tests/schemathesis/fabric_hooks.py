"""Schemathesis hooks for the contract run against `fabric serve` (issue #14; the test is
crates/apps/fabric/tests/suite/schemathesis.rs, docs/HTTP.md says how to run it by hand).

Load with SCHEMATHESIS_HOOKS=fabric_hooks and this directory on PYTHONPATH, and run with
`--exclude-checks positive_data_acceptance,ensure_resource_availability`: the two checks
below replace them, each narrowed by one case the document declares and schemathesis cannot
know.

`pack` and `model_key` of the run requests name a specialist and a model key of the server's
config. The document cannot list them (they are the config, not the code), so it declares
any non-blank string and the answer to a name the config lacks: 422 `unknown_specialist` or
`unknown_model_key`. Schemathesis counts every 4xx to schema-valid data as a failure
(ST202); the first check is its own but for exactly those two codes, so any other refusal of
valid data (`invalid_request`, a 400) still fails the run.

`POST /runs/prune` deletes ended runs, and says which (`run_ids`). Schemathesis knows only
DELETE as a deletion, so a run started, pruned, then read in one stateful scenario looks to
it like a created resource gone missing (ST302); the second check is its own but for a run
that a prune of the same scenario named as deleted.
"""

import json

import schemathesis
from schemathesis.openapi.checks import EnsureResourceAvailability, RejectedPositiveData
from schemathesis.specs.openapi.checks import (
    ensure_resource_availability,
    positive_data_acceptance,
)

# The error codes that mean "valid syntax, but not a name this server's config has", or
# not a repository on the server's machine (`project`, issue #25: the document cannot know
# which paths are repositories there, nor say that `base` needs `project`).
CONFIG_NAMES = {"unknown_specialist", "unknown_model_key", "invalid_project"}


def body(response):
    """The JSON body of a response, or None."""
    try:
        return json.loads(response.content)
    except ValueError:
        return None


def error_code(response):
    """The `error.code` of an API error body, or None."""
    try:
        return body(response)["error"]["code"]
    except (KeyError, TypeError):
        return None


def pruned_in_scenario(ctx, case):
    """Whether a `POST /runs/prune` of this stateful scenario deleted the case's run."""
    run_id = (case.path_parameters or {}).get("id")
    recorder = ctx.internals.recorder
    if run_id is None or recorder is None:
        return False
    for prior in recorder.find_all_cases():
        if prior.operation.method.upper() != "POST" or prior.path != "/runs/prune":
            continue
        answer = recorder.find_response(case_id=prior.id)
        if answer is None or answer.status_code != 200:
            continue
        deleted = (body(answer) or {}).get("run_ids") or []
        if run_id in deleted:
            return True
    return False


@schemathesis.check
def positive_data_acceptance_but_config_names(ctx, response, case):
    """Schema-valid requests are accepted, but for names the server's config lacks."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        if response.status_code == 422 and error_code(response) in CONFIG_NAMES:
            return None
        raise


@schemathesis.check
def ensure_resource_availability_but_pruned(ctx, response, case):
    """A run just started is found, unless a prune of the same scenario deleted it."""
    try:
        return ensure_resource_availability(ctx, response, case)
    except EnsureResourceAvailability:
        if pruned_in_scenario(ctx, case):
            return None
        raise
