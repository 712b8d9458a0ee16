//! `fabric-test-support`: what the tests of agent-fabric share besides the fakes of the core's
//! ports (those are `fabric-fakes`).
//!
//! Where it sits: outside the hexagon and dev-only. It depends on no fabric crate but
//! `fabric-scripted-llm`, and no fabric crate ships it (`tests/layers.rs` checks both; ADR-100).
//!
//! Layout:
//! - the scripted model server of `fabric-scripted-llm` ([`ScriptedServer`], [`Scenario`],
//!   [`Turn`], [`hash_embedding`], ...), re-exported so a test names one crate.
//! - [`llama`]: real model servers (llama.cpp's `llama-server`, llama-cpp-python's server)
//!   with a real small model, started on a free loopback port ([`llama::LlamaServer`]).
//! - [`postgres`]: a throwaway PostgreSQL cluster ([`PgCluster`], [`shared_cluster`]) for the
//!   database store's contract tests.
//! - [`test_deps`] and its kin: where scripts/install-test-deps.sh put the real MCP servers,
//!   clients, browsers and suites, or why a test that needs them is skipped.
//! - `tests/layers.rs`: the architecture check (the hexagon's arrows, module circles, long
//!   functions, string errors).

pub mod llama;
pub mod postgres;

pub use fabric_scripted_llm::{
    DEFAULT_EMBEDDING_DIMS, EmbeddingsMode, ModelInfo, OnExhausted, RecordedRequest, Scenario,
    ScenarioError, ScriptedCall, ScriptedServer, ServerError, Turn, TurnBy, UsageSpec,
    hash_embedding, scenario,
};
pub use postgres::{PgCluster, PgError, shared_cluster};

/// The directory scripts/install-test-deps.sh installed the MCP test servers and clients in
/// (`FABRIC_TEST_DEPS`, else `~/.cache/agent-fabric/test-deps`), or `None` with a message
/// on stderr when they are not there. With `FABRIC_REQUIRE_TEST_DEPS=1` a missing install
/// panics instead, also when neither variable is set. (Tests that need them are marked
/// ignored at build time when they are missing, so this is the backstop.)
pub fn test_deps() -> Option<std::path::PathBuf> {
    deps_dir().map_or_else(skipped, Some)
}

/// Where Debian's `chromium` and `chromium-driver` put the browser and its WebDriver (the
/// build scripts' probe looks at the same two files).
pub const BROWSER_FILES: [&str; 2] = ["/usr/bin/chromium", "/usr/bin/chromedriver"];

/// The Python of the test deps' venv, with Selenium, when Chromium and chromedriver are
/// installed too (the web run viewer's browser tests, issue #13); else `None` with a
/// message on stderr, or a panic with `FABRIC_REQUIRE_TEST_DEPS=1`, as [`test_deps`].
pub fn browser_deps() -> Option<std::path::PathBuf> {
    let found = venv_file("selenium", "venv/bin/python").and_then(|python| {
        match BROWSER_FILES
            .iter()
            .find(|path| !std::path::Path::new(path).is_file())
        {
            Some(missing) => Err(format!(
                "{missing} is missing (Debian's chromium and chromium-driver); run scripts/install-test-deps.sh as root"
            )),
            None => Ok(python),
        }
    });
    found.map_or_else(skipped, Some)
}

/// The Python of the test deps' venv, with the OpenTelemetry protobuf definitions
/// (`opentelemetry-proto`, for the OTLP receiver of the trace tests, issue #13); else
/// `None` with a message, or a panic with `FABRIC_REQUIRE_TEST_DEPS=1`, as [`test_deps`].
pub fn otlp_deps() -> Option<std::path::PathBuf> {
    venv_file("opentelemetry-proto", "venv/bin/python").map_or_else(skipped, Some)
}

/// The `st` command of schemathesis in the test deps' venv (the contract run against
/// `fabric serve`'s OpenAPI document, issue #14); else `None` with a message, or a panic with
/// `FABRIC_REQUIRE_TEST_DEPS=1`, as [`test_deps`].
pub fn schemathesis_deps() -> Option<std::path::PathBuf> {
    venv_file("schemathesis", "venv/bin/st").map_or_else(skipped, Some)
}

/// The directory of the official MCP conformance suite and the Node 22 it runs on
/// (`conformance/`, issue #29); else `None` with a message, or a panic with
/// `FABRIC_REQUIRE_TEST_DEPS=1`, as [`test_deps`].
pub fn conformance_deps() -> Option<std::path::PathBuf> {
    venv_file("conformance", "conformance").map_or_else(skipped, Some)
}

/// The directory of the newest published conformance suite (`conformance-next/`, issue #29),
/// run on the Node 22 of [`conformance_deps`]; else `None` with a message, or a panic with
/// `FABRIC_REQUIRE_TEST_DEPS=1`.
pub fn conformance_next_deps() -> Option<std::path::PathBuf> {
    venv_file("conformance-next", "conformance-next").map_or_else(skipped, Some)
}

/// The directory of the MCP Inspector (`inspector/`, issue #29), whose CLI runs on the Node
/// 22 of [`conformance_deps`]; else `None` with a message, or a panic with
/// `FABRIC_REQUIRE_TEST_DEPS=1`.
pub fn inspector_deps() -> Option<std::path::PathBuf> {
    venv_file("inspector", "inspector").map_or_else(skipped, Some)
}

/// The directory of the official ACP TypeScript SDK (`acp/`, issue #44), whose client drives
/// `fabric acp` in the tests (on the system's Node 20 or later); else `None` with a message,
/// or a panic with `FABRIC_REQUIRE_TEST_DEPS=1`.
pub fn acp_deps() -> Option<std::path::PathBuf> {
    venv_file("acp-sdk", "acp").map_or_else(skipped, Some)
}

/// `file` of the test deps when the install's stamp names `package` (packages came with
/// later versions of the script, so an older install may lack one), else why not.
fn venv_file(package: &str, file: &str) -> Result<std::path::PathBuf, String> {
    deps_dir().and_then(|dir| {
        let stamp = std::fs::read_to_string(dir.join(".installed")).unwrap_or_default();
        if stamp.contains(&format!("{package}=")) {
            Ok(dir.join(file))
        } else {
            Err(format!(
                "{package} is not among the test deps in {} (an install from before it); run scripts/install-test-deps.sh",
                dir.display()
            ))
        }
    })
}

/// The test deps' directory when the install is there, else why not.
fn deps_dir() -> Result<std::path::PathBuf, String> {
    let dir = std::env::var_os("FABRIC_TEST_DEPS")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/agent-fabric/test-deps"))
        });
    match dir {
        Some(dir) if dir.join(".installed").is_file() => Ok(dir),
        Some(dir) => Err(format!(
            "the test deps (MCP servers and clients, Selenium) are not installed in {}; run scripts/install-test-deps.sh",
            dir.display()
        )),
        None => Err("neither FABRIC_TEST_DEPS nor HOME is set, so the MCP test servers cannot be found; set FABRIC_TEST_DEPS to where scripts/install-test-deps.sh installed them".to_owned()),
    }
}

/// A test that cannot run says why where a person sees it, or fails under
/// `FABRIC_REQUIRE_TEST_DEPS=1` (CI).
fn skipped<T>(reason: String) -> Option<T> {
    if std::env::var("FABRIC_REQUIRE_TEST_DEPS").as_deref() == Ok("1") {
        panic!("FABRIC_REQUIRE_TEST_DEPS=1, but {reason}");
    }
    #[allow(clippy::print_stderr)]
    {
        eprintln!("SKIPPED: {reason}");
    }
    None
}
