//! Issue #39: memory the cgroup does not see. A command whose 16 workers fill UNIX socket
//! pairs (the third hidden corpus's escape) costs the host at most `memory_mb` plus the
//! documented margin (ADR-095, SECURITY.md), in both strict columns; with `--sandbox off`
//! the same command takes more, so the attempt proves something.
//!
//! The host's evidence is sampled every 10 ms while the fabric runs: the kernel memory the
//! host holds outside page cache and processes' anonymous memory (`MemTotal - MemFree -
//! Buffers - Cached - AnonPages - SReclaimable`), less the pages on the per-CPU free lists
//! (`count:` in `/proc/zoneinfo`). Those lists are free memory the page allocator hands
//! out first, yet `MemFree` and `MemAvailable` do not count them; pages freed when the
//! kernel's OOM killer ends workers land there by hundreds of MiB, which is most of what the
//! corpus read as 1,370 MiB lost under a 1,024 MiB limit (ADR-095's figures). Anonymous
//! memory and page cache are left out because the other tests running beside this one move
//! them by more than the margin; the sockets' memory is all kernel memory. Round three's
//! attempts, which fill socket buffers too, and this test take turns (`KERNEL_MEMORY`).

#![allow(clippy::print_stderr)]

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use super::attacks_round_three::Column;
use super::fixture::{Fixture, of_kind};

const MEMORY_MB: i64 = 256;
/// SECURITY.md's margin: kernel objects charged to nobody (a 5.9 KiB `task_struct` per
/// process, so 0.4 MiB for 64) plus what the kernel may charge over a limit while the OOM
/// killer acts, rounded up; the per-CPU free lists are measured and subtracted.
const MARGIN_MB: i64 = 64;

const CONFIG: &str = "shell:\n  allowed_commands: [python3]\nsandbox_limits:\n  memory_mb: 256\n  processes: 64\n  open_files: 1024\n  cpu_s: 60\n";

/// 16 workers, 150 socket pairs each, every pair filled with 64 KiB sends until its buffer
/// is full (about 0.22 MiB a pair, 530 MiB in all), held for two seconds. What counts is
/// what the workers that were not killed held at once.
const ATTACK: &str = r#"import os, socket, time
r, w = os.pipe()
kids = []
for k in range(16):
    pid = os.fork()
    if pid:
        kids.append(pid)
    else:
        os.close(r)
        total, keep = 0, []
        try:
            for i in range(150):
                a, b = socket.socketpair()
                keep.append((a, b))
                a.setblocking(False)
                try:
                    while True: total += a.send(b'x' * 65536)
                except BlockingIOError: pass
        except OSError: pass
        os.write(w, f'{os.getpid()} {total}\n'.encode())
        time.sleep(2)
        os._exit(0)
os.close(w)
data = b''
while True:
    chunk = os.read(r, 4096)
    if not chunk: break
    data += chunk
queued = dict(map(int, line.split()) for line in data.decode().splitlines())
whole = {pid for pid in kids if os.waitpid(pid, 0)[1] == 0}
total = sum(n for pid, n in queued.items() if pid in whole)
print('held MiB', total >> 20, 'by', len(whole), 'of 16 workers', flush=True)
if total >= (256 + 64) << 20:
    print('ESC' + 'APED:socket_pairs', flush=True)
"#;

fn kib(text: &str, key: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The kernel memory the host holds, in KiB, less its per-CPU free lists; and the host's
/// `MemAvailable`, for the record.
fn kernel_held_kib() -> (i64, i64) {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let zones = std::fs::read_to_string("/proc/zoneinfo").unwrap_or_default();
    let per_cpu_free: i64 = zones
        .lines()
        .filter_map(|l| l.trim().strip_prefix("count:"))
        .filter_map(|n| n.trim().parse::<i64>().ok())
        .sum::<i64>()
        * 4;
    let k = |key| kib(&info, key);
    let held = k("MemTotal")
        - k("MemFree")
        - k("Buffers")
        - k("Cached")
        - k("AnonPages")
        - k("SReclaimable")
        - per_cpu_free;
    (held, k("MemAvailable"))
}

/// Samples [`kernel_held_kib`] until `stop`: the largest rise of the memory held and the
/// largest fall of `MemAvailable` over the first sample.
fn sampler(stop: Arc<AtomicBool>, peak: Arc<[AtomicI64; 2]>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let (held, available) = kernel_held_kib();
        while !stop.load(Ordering::Relaxed) {
            let now = kernel_held_kib();
            peak[0].fetch_max(now.0 - held, Ordering::Relaxed);
            peak[1].fetch_max(available - now.1, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    })
}

/// One column: whether the command said it escaped, and the host's peak rise in MiB.
async fn run_column(column: Column) -> (bool, i64) {
    let fx = Fixture::new(super::attacks::calls_then_finish(std::iter::once((
        "socket_pairs",
        "shell",
        json!({ "cmd": ["python3", "-c", ATTACK], "timeout_s": 60 }),
    ))))
    .await;
    fx.append_config(CONFIG);
    let mut args = vec!["run", "socket pairs", "--pack", "engineering", "--json"];
    args.extend(column.sandbox_args());
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new([AtomicI64::new(0), AtomicI64::new(0)]);
    let _alone = super::attacks_round_three::KERNEL_MEMORY.lock().await;
    let watch = sampler(stop.clone(), peak.clone());
    let run = fx.fabric_via(column.wrapper(), &args, &[], 300).await;
    stop.store(true, Ordering::Relaxed);
    watch.join().expect("sampler");
    let events = fx.runlog(&run.json());
    let start = &of_kind(&events, "run_start")[0]["payload"]["sandbox"];
    column.assert_start(start);
    if column != Column::Off {
        assert_eq!(start["cgroups"], true, "{start}");
    }
    let escaped = events.iter().any(|e| {
        matches!(e["kind"].as_str(), Some("tool_result" | "tool_error"))
            && e["payload"].to_string().contains("ESCAPED:socket_pairs")
    });
    let mib = peak[0].load(Ordering::Relaxed) / 1024;
    eprintln!(
        "issue39-memory {:<13} escaped={escaped} host kernel memory peak +{mib} MiB (limit {MEMORY_MB} + margin {MARGIN_MB}); MemAvailable fell by up to {} MiB",
        column.name(),
        peak[1].load(Ordering::Relaxed) / 1024
    );
    (escaped, mib)
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_39_socket_pairs_cost_the_host_at_most_memory_mb_plus_the_margin() {
    let mut failures = Vec::new();
    for column in Column::on_this_host() {
        let (escaped, mut mib) = run_column(column).await;
        // The figure is the host's: another test starting processes at the same moment adds
        // to it. A strict column over the bound (that did not say it escaped) is measured
        // again, up to twice, and its least figure counts: an attempt the cgroup does not
        // hold is over every time (585-616 MiB with the cgroup off), a neighbour's noise is
        // not.
        for _ in 0..2 {
            if column == Column::Off || escaped || mib <= MEMORY_MB + MARGIN_MB {
                break;
            }
            let (again_escaped, again_mib) = run_column(column).await;
            if again_escaped {
                failures.push(format!(
                    "{}: the attempt escaped when measured again",
                    column.name()
                ));
            }
            mib = mib.min(again_mib);
        }
        let over = mib > MEMORY_MB + MARGIN_MB;
        match column {
            Column::Off if !(escaped && over) => failures.push(format!(
                "off: the attempt held only {mib} MiB (escaped={escaped}), so it proves nothing"
            )),
            Column::Namespaces | Column::NoNamespaces if escaped || over => failures.push(format!(
                "{}: the host lost {mib} MiB (escaped={escaped})",
                column.name()
            )),
            _ => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
