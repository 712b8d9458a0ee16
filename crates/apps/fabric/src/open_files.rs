//! The open-files limit of a fabric that serves many runs (issue #45, ADR-132).
//!
//! Each run in flight holds descriptors for its life: its runlog (open, because its `flock`
//! is the run's claim, ADR-044), its connection to the model, and for a blocking `POST /run`
//! the caller's connection; an MCP server adds its pipes. A login shell's soft limit is
//! usually 1,024 while the hard limit is far higher (524,288 under systemd), so a server
//! allowed 1,000 runs failed them past about 340 with "Too many open files". A serving
//! command therefore raises its soft limit to the hard one at start (what Go's runtime does
//! for every program), and says so when even that cannot hold the runs it may take.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors a run in flight may hold at once: its runlog, its model connection and a
/// blocking caller's connection.
pub(crate) const PER_RUN: u64 = 3;

/// Descriptors the process holds besides its runs: the listener, the store's connections and
/// files, the runtime's, the log.
pub(crate) const OWN: u64 = 64;

/// The soft limit before and after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Raised {
    pub(crate) before: u64,
    pub(crate) now: u64,
}

/// Raises this process's soft open-files limit to its hard limit. `None` when the limit
/// cannot be read or set, or the hard limit is unlimited (not Linux's case): the process
/// keeps the one it had. Children inherit the raised soft limit,
/// except sandboxed commands, which get `sandbox_limits.open_files`.
pub(crate) fn raise() -> Option<Raised> {
    let limit = getrlimit(Resource::Nofile);
    let (before, hard) = (limit.current?, limit.maximum?);
    if before >= hard {
        return Some(Raised {
            before,
            now: before,
        });
    }
    match setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(hard),
            maximum: Some(hard),
        },
    ) {
        Ok(()) => Some(Raised { before, now: hard }),
        Err(error) => {
            tracing::debug!(%error, before, hard, "cannot raise the open-files limit");
            None
        }
    }
}

/// The soft open-files limit now (`None`: unlimited or unreadable).
pub(crate) fn current() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// [`shortfall`] of the limit this process has now (`None` also when it is unlimited).
pub(crate) fn warning(runs: u64, setting: &str) -> Option<String> {
    current().and_then(|limit| shortfall(limit, runs, setting))
}

/// About how many runs in flight `limit` descriptors hold.
pub(crate) fn runs_that_fit(limit: u64) -> u64 {
    limit.saturating_sub(OWN) / PER_RUN
}

/// What to tell the operator when a limit of `limit` descriptors cannot hold `runs` runs in
/// flight, or `None` when it can.
pub(crate) fn shortfall(limit: u64, runs: u64, setting: &str) -> Option<String> {
    let needed = runs.saturating_mul(PER_RUN).saturating_add(OWN);
    if limit >= needed {
        return None;
    }
    let fits = runs_that_fit(limit);
    Some(format!(
        "warning: the open-files limit is {limit}, enough for about {fits} runs in flight, but {setting} allows {runs} (each holds up to {PER_RUN} descriptors: its runlog, its model connection, a blocking caller's connection); runs past it fail with \"Too many open files\". Raise the hard limit (`ulimit -Hn`, `LimitNOFILE=` in a systemd unit, `--ulimit nofile=` in a container) to at least {needed}, or lower {setting}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_45_a_limit_that_holds_the_runs_says_nothing() {
        assert_eq!(shortfall(1_024, 320, "server.max_runs_in_flight"), None);
        assert_eq!(
            shortfall(1_048_576, 100_000, "server.max_runs_in_flight"),
            None
        );
    }

    #[test]
    fn issue_45_a_limit_too_low_names_what_fits_and_both_fixes() {
        let said = shortfall(1_024, 1_000, "server.max_runs_in_flight").expect("too low");
        assert!(said.contains("limit is 1024"), "{said}");
        assert!(said.contains("about 320 runs"), "{said}");
        assert!(said.contains("allows 1000"), "{said}");
        assert!(said.contains("at least 3064"), "{said}");
        assert!(said.contains("lower server.max_runs_in_flight"), "{said}");
        // A limit below the process's own share fits no run, and says so without underflow.
        let said = shortfall(10, 5, "--concurrency").expect("too low");
        assert!(said.contains("about 0 runs"), "{said}");
    }

    #[test]
    fn issue_45_raising_ends_at_the_hard_limit() {
        let raised = raise().expect("Linux reports both limits");
        let limit = getrlimit(Resource::Nofile);
        assert_eq!(Some(raised.now), limit.current);
        assert_eq!(limit.current, limit.maximum);
        assert!(raised.now >= raised.before);
    }
}
