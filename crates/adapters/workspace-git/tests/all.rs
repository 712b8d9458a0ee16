//! `fabric-workspace-git` against real repositories in temporary directories (issue #25):
//! the faults, worktrees, per-step commits, restore, diff, apply, discard, scratch
//! histories and takeover through a bare remote.
// Helpers outside `#[test]` functions are test code too.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub
)]

mod suite;
