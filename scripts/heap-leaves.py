"""Heap per run in flight by the deepest frame of ours, from a heaptrack profile of
`fabric serve` (docs/BENCHMARKS.md, issue #45 round 6).

Usage: heaptrack_print -f PROFILE.zst -F stacks.txt --flamegraph-cost-type peak
       python3 scripts/heap-leaves.py stacks.txt RUNS [PATTERN] [N]

Each stack's peak goes to its deepest frame matching PATTERN (a regular expression; by
default our crates, axum, tower, hyper, tokio's sockets, sqlx and SQLite), "?" when none
does; the N largest are printed in KiB per run.
"""
import collections
import re
import sys

runs = float(sys.argv[2])
pattern = re.compile(sys.argv[3] if len(sys.argv) > 3 else r"fabric_|fabric::|axum|tower|hyper|tokio::net|sqlx|sqlite")
shown = int(sys.argv[4]) if len(sys.argv) > 4 else 30
total = collections.Counter()
for line in open(sys.argv[1], errors="replace"):
    stack, _, cost = line.rstrip("\n").rpartition(" ")
    try:
        cost = int(cost)
    except ValueError:
        continue
    key = "?"
    for frame in reversed(stack.split(";")):
        if pattern.search(frame):
            key = re.sub(r"::h[0-9a-f]{16}$", "", frame)[:150]
            break
    total[key] += cost
for key, cost in total.most_common(shown):
    print(f"{cost / runs / 1024:6.2f}  {key}")
