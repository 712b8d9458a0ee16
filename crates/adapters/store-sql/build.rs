//! Marks the tests that need scripts/install-test-deps.sh as ignored, with the reason, when
//! those dependencies are missing (see the included file).

include!("../../testing/test-deps-probe.rs");

fn main() {
    emit_test_deps_cfgs();
}
