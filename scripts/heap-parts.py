"""Heap per run in flight by part, from a heaptrack profile of `fabric serve` (docs/BENCHMARKS.md).

Usage: heaptrack_print -f PROFILE.zst -F stacks.txt --flamegraph-cost-type peak
       python3 scripts/heap-parts.py stacks.txt RUNS

Each stack's peak goes to the first part whose frames it holds: the store, the model
connection, the run, the caller's connection, else the rest; printed in KiB per run.
"""
import sys, collections
parts = [
    ("store", ["fabric_store_sql", "fabric_store_fs", "sqlite3", "sqlx"]),
    ("model connection", ["fabric_llm::plain", "fabric_llm::transport", "TcpStream::connect", "tcp::stream::TcpStream::new"]),
    ("run", ["fabric_engine", "fabric_core", "fabric_api_http::launch", "TaskForce"]),
    ("caller connection", ["hyper::proto", "tower::util", "axum::", "serve_http1", "handle_connection"]),
]
runs = float(sys.argv[2])
tot = collections.Counter()
for line in open(sys.argv[1], errors="replace"):
    stack, _, cost = line.rstrip("\n").rpartition(" ")
    try: cost = int(cost)
    except ValueError: continue
    for name, pats in parts:
        if any(p in stack for p in pats):
            tot[name] += cost; break
    else:
        tot["rest"] += cost
for name in [p[0] for p in parts] + ["rest"]:
    print(f"{tot[name]/runs/1024:6.1f}  {name}")
print(f"{sum(tot.values())/runs/1024:6.1f}  all")
