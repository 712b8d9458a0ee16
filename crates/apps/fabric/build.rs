//! Marks the tests that need scripts/install-test-deps.sh, or a root fabric, as ignored, with
//! the reason, when those dependencies are missing (see the included files).

include!("../../testing/test-deps-probe.rs");
include!("../../testing/root-probe.rs");

fn main() {
    emit_test_deps_cfgs();
    emit_not_root_cfg();
}
