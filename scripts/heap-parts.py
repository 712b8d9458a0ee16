"""Heap per run in flight by part, from a heaptrack profile of `fabric serve` (docs/BENCHMARKS.md).

Usage: heaptrack_print -f PROFILE.zst -F stacks.txt --flamegraph-cost-type peak
       python3 scripts/heap-parts.py stacks.txt RUNS
       python3 scripts/heap-parts.py stacks.txt RUNS leaves [PATTERN] [N]

Each stack's peak goes to the first part whose frames it holds: the store, the model
connection, the run, the caller's connection, else the rest; printed in KiB per run.

With `leaves`, each stack's peak goes instead to its deepest frame matching PATTERN (a
regular expression; by default our crates, axum, tower, hyper, tokio's sockets, sqlx and
SQLite), "?" when none does; the N largest (30) are printed in KiB per run.
"""
import collections
import re
import sys

parts = [
    ("store", ["fabric_store_sql", "fabric_store_fs", "sqlite3", "sqlx"]),
    ("model connection", ["fabric_llm::plain", "fabric_llm::transport", "TcpStream::connect", "tcp::stream::TcpStream::new"]),
    ("run", ["fabric_engine", "fabric_core", "fabric_api_http::launch", "TaskForce"]),
    ("caller connection", ["hyper::proto", "tower::util", "axum::", "serve_http1", "handle_connection"]),
]


def stacks(path):
    """Each stack of the flamegraph file, as its text and its cost."""
    for line in open(path, errors="replace"):
        stack, _, cost = line.rstrip("\n").rpartition(" ")
        try:
            yield stack, int(cost)
        except ValueError:
            continue


def by_part(path):
    total = collections.Counter()
    for stack, cost in stacks(path):
        for name, patterns in parts:
            if any(p in stack for p in patterns):
                total[name] += cost
                break
        else:
            total["rest"] += cost
    return [(name, total[name]) for name in [p[0] for p in parts] + ["rest"]] + [("all", sum(total.values()))]


def by_leaf(path, pattern, shown):
    total = collections.Counter()
    for stack, cost in stacks(path):
        key = "?"
        for frame in reversed(stack.split(";")):
            if pattern.search(frame):
                key = re.sub(r"::h[0-9a-f]{16}$", "", frame)[:150]
                break
        total[key] += cost
    return [(key, cost) for key, cost in total.most_common(shown)]


runs = float(sys.argv[2])
if len(sys.argv) > 3 and sys.argv[3] == "leaves":
    pattern = re.compile(sys.argv[4] if len(sys.argv) > 4 else r"fabric_|fabric::|axum|tower|hyper|tokio::net|sqlx|sqlite")
    rows = by_leaf(sys.argv[1], pattern, int(sys.argv[5]) if len(sys.argv) > 5 else 30)
else:
    rows = by_part(sys.argv[1])
for name, cost in rows:
    print(f"{cost / runs / 1024:6.2f}  {name}")
