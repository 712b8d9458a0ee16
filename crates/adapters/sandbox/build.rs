//! Marks the tests that only mean something for a root fabric as ignored, with the reason,
//! when the tests are built by another user (see the included file).

include!("../../testing/root-probe.rs");

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    emit_not_root_cfg();
}
