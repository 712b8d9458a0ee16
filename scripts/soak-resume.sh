#!/usr/bin/env bash
# Soak test of durable runs (issue #10, docs/DURABILITY.md): `fabric run` killed with SIGKILL
# at spread points and continued by `fabric resume`, 500 times (the suite does 50). Every run
# must end exactly once, with a valid runlog, without a recorded model call asked again.
#   scripts/soak-resume.sh            # 500 rounds
#   scripts/soak-resume.sh 2000       # more
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-500}"
FABRIC_SOAK_ROUNDS="$rounds" cargo test -p fabric --test all \
  suite::durability::issue_10_a_run_killed_at_random_points_is_continued_exactly_once \
  -- --exact --nocapture
