//! Marks the tests that need scripts/install-test-deps.sh, or a root fabric, as ignored, with
//! the reason, when those dependencies are missing (see the included files).
//!
//! And a link option that shrinks the release binary without changing its code (ADR-123): the
//! relative relocations of the position-independent executable (about 33,000 of them, 24
//! bytes each in `.rela.dyn`) are packed into a bitmap of a few KiB (`-z
//! pack-relative-relocs`, `.relr.dyn`), 0.75 MiB less. Only where it is known to work: release
//! builds for `x86_64-unknown-linux-gnu` with Rust's default linker (rust-lld since Rust 1.90;
//! a linker chosen in Cargo's config or in the flags turns this off), built on the machine
//! that runs them, with a glibc whose loader reads packed relocations (2.36 or newer: an older
//! one refuses such a binary). `FABRIC_PLAIN_LINK=1` at build time links without it.

include!("../../testing/test-deps-probe.rs");
include!("../../testing/root-probe.rs");

use std::env;
use std::process::Command;

fn main() {
    emit_test_deps_cfgs();
    emit_not_root_cfg();
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=FABRIC_PLAIN_LINK");
    if wanted() && glibc_reads_relr() {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// A native release build for x86_64 Linux with the default linker, not opted out.
fn wanted() -> bool {
    let var = |name: &str| env::var(name).unwrap_or_default();
    let target = var("TARGET");
    target == "x86_64-unknown-linux-gnu"
        && var("HOST") == target
        && var("PROFILE") == "release"
        && env::var_os("RUSTC_LINKER").is_none()
        && env::var_os("FABRIC_PLAIN_LINK").is_none()
        && !var("CARGO_ENCODED_RUSTFLAGS").contains("link")
}

/// glibc 2.36 or newer on this machine (`getconf GNU_LIBC_VERSION` says `glibc 2.36`).
fn glibc_reads_relr() -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= (2, 36)
}
