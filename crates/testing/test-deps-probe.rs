// Included by the build scripts of the crates whose tests need the test dependencies
// (`include!`), so one piece of code decides, at build time, which of those tests to mark
// ignored with the reason a person reads in `cargo test`'s own report ("ignored, needs
// PostgreSQL: run scripts/install-test-deps.sh"), instead of letting them pass quietly.
// With FABRIC_REQUIRE_TEST_DEPS=1 nothing is ignored: the tests run and fail loudly.
// Plain std, no dependencies: a build script must stay cheap.

/// Where scripts/install-test-deps.sh installs the MCP servers and clients.
fn test_deps_dir() -> Option<std::path::PathBuf> {
    std::env::var_os("FABRIC_TEST_DEPS")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/agent-fabric/test-deps"))
        })
}

/// What scripts/install-test-deps.sh puts in the test-deps directory for the real model
/// servers: the small model, llama.cpp's server, llama-cpp-python's interpreter.
const LLAMA_FILES: [&str; 3] = [
    "models/SmolLM2-135M-Instruct.Q4_1.gguf",
    "bin/llama-server",
    "llama-venv/bin/python",
];

/// Where Debian's `chromium` and `chromium-driver` put the browser and its WebDriver.
const BROWSER_FILES: [&str; 2] = ["/usr/bin/chromium", "/usr/bin/chromedriver"];

/// Emits `fabric_no_mcp_deps`, `fabric_no_postgres`, `fabric_no_browser`,
/// `fabric_no_schemathesis`, `fabric_no_otlp`, `fabric_no_a2a`, `fabric_no_conformance`,
/// `fabric_no_conformance_next`, `fabric_no_inspector`, `fabric_no_acp` and
/// `fabric_no_llama` when those are missing.
fn emit_test_deps_cfgs() {
    println!("cargo::rustc-check-cfg=cfg(fabric_no_mcp_deps)");
    println!("cargo::rustc-check-cfg=cfg(fabric_no_postgres)");
    println!("cargo::rustc-check-cfg=cfg(fabric_no_browser)");
    println!("cargo::rustc-check-cfg=cfg(fabric_no_schemathesis)");
    println!("cargo::rustc-check-cfg=cfg(fabric_no_llama)");
    println!("cargo::rustc-check-cfg=cfg(fabric_no_otlp)");
    println!("cargo::rustc-check-cfg=cfg(fabric_no_a2a)");
    println!("cargo::rustc-check-cfg=cfg(fabric_no_conformance)");
    println!("cargo::rustc-check-cfg=cfg(fabric_no_conformance_next)");
    println!("cargo::rustc-check-cfg=cfg(fabric_no_inspector)");
    println!("cargo::rustc-check-cfg=cfg(fabric_no_acp)");
    println!("cargo::rustc-check-cfg=cfg(fabric_has_podman)");
    // A test of the refusal without Podman cannot run where Podman is installed.
    let podman: Vec<&str> = ["/usr/local/bin/podman", "/usr/bin/podman", "/bin/podman"]
        .into_iter()
        .filter(|p| std::path::Path::new(p).is_file())
        .collect();
    if !podman.is_empty() {
        for path in &podman {
            println!("cargo::rerun-if-changed={path}");
        }
        println!("cargo::rustc-cfg=fabric_has_podman");
    }
    // This file is `include!`d: Cargo does not see a change to it as a change of the build
    // script, so it is watched by name (a new cfg added here would otherwise be unknown).
    println!(
        "cargo::rerun-if-changed={}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../testing/test-deps-probe.rs")
    );
    println!("cargo::rerun-if-env-changed=FABRIC_REQUIRE_TEST_DEPS");
    println!("cargo::rerun-if-env-changed=FABRIC_TEST_DEPS");
    println!("cargo::rerun-if-env-changed=HOME");
    if std::env::var("FABRIC_REQUIRE_TEST_DEPS").as_deref() == Ok("1") {
        return;
    }
    // Only paths that exist are watched (Cargo reruns a build script on every build while
    // a watched path is missing); scripts/install-test-deps.sh touches the committed stamp
    // beside this file, which is always watched, so an install is noticed.
    println!(
        "cargo::rerun-if-changed={}",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../testing/test-deps.stamp")
    );
    // The install's stamp names what it installed; Selenium and schemathesis came with later
    // versions of the script than the MCP packages, so an older install lacks them.
    let mut selenium = false;
    let mut schemathesis = false;
    let mut otlp = false;
    let mut a2a = false;
    let mut conformance = false;
    let mut conformance_next = false;
    let mut inspector = false;
    let mut acp = false;
    match test_deps_dir() {
        Some(dir) => {
            let marker = dir.join(".installed");
            if marker.is_file() {
                println!("cargo::rerun-if-changed={}", marker.display());
                let stamp = std::fs::read_to_string(&marker).unwrap_or_default();
                selenium = stamp.contains("selenium=");
                schemathesis = stamp.contains("schemathesis=");
                otlp = stamp.contains("opentelemetry-proto=");
                a2a = stamp.contains("a2a-sdk=");
                conformance = stamp.contains("conformance=");
                conformance_next = stamp.contains("conformance-next=");
                inspector = stamp.contains("inspector=");
                acp = stamp.contains("acp-sdk=");
            } else {
                println!("cargo::rustc-cfg=fabric_no_mcp_deps");
            }
        }
        None => println!("cargo::rustc-cfg=fabric_no_mcp_deps"),
    }
    if !schemathesis {
        println!("cargo::rustc-cfg=fabric_no_schemathesis");
    }
    // The OTLP receiver's Python packages (issue #27: its tests returned quietly without).
    if !otlp {
        println!("cargo::rustc-cfg=fabric_no_otlp");
    }
    // The official A2A Python SDK (issue #30).
    if !a2a {
        println!("cargo::rustc-cfg=fabric_no_a2a");
    }
    // The official MCP conformance suite and its Node 22 (issue #29).
    if !conformance {
        println!("cargo::rustc-cfg=fabric_no_conformance");
    }
    // The newest published conformance suite (issue #29).
    if !conformance_next {
        println!("cargo::rustc-cfg=fabric_no_conformance_next");
    }
    // The MCP Inspector's CLI (issue #29).
    if !inspector {
        println!("cargo::rustc-cfg=fabric_no_inspector");
    }
    // The official ACP TypeScript SDK, an editor's side of `fabric acp` (issue #44).
    if !acp {
        println!("cargo::rustc-cfg=fabric_no_acp");
    }
    // The real model servers and the small model (issue #24).
    let llama: Vec<std::path::PathBuf> = test_deps_dir()
        .map(|dir| {
            LLAMA_FILES
                .iter()
                .map(|f| dir.join(f))
                .collect()
        })
        .unwrap_or_default();
    if !llama.is_empty() && llama.iter().all(|p| p.is_file()) {
        for path in &llama {
            println!("cargo::rerun-if-changed={}", path.display());
        }
    } else {
        println!("cargo::rustc-cfg=fabric_no_llama");
    }
    let mut browser = selenium;
    for path in BROWSER_FILES {
        if std::path::Path::new(path).is_file() {
            println!("cargo::rerun-if-changed={path}");
        } else {
            browser = false;
        }
    }
    if !browser {
        println!("cargo::rustc-cfg=fabric_no_browser");
    }
    if std::path::Path::new("/usr/lib/postgresql").is_dir() {
        println!("cargo::rerun-if-changed=/usr/lib/postgresql");
    }
    let postgres = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .any(|version| version.path().join("bin/initdb").is_file());
    if !postgres {
        println!("cargo::rustc-cfg=fabric_no_postgres");
    }
}
