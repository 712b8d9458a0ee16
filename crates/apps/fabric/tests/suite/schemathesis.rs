//! The HTTP API against its own OpenAPI document (issue #14). Schemathesis (PyPI, in the
//! test deps' venv) reads `GET /openapi.json` of a real `fabric serve` over the scripted
//! model server, generates requests from it, valid and invalid, and runs all its checks: no
//! 5xx, every status, header, body and SSE frame as the document declares them, valid data
//! taken and invalid data refused, the token required, the links between operations (a run
//! started by `POST /runs` is found at `GET /runs/{id}`). A failure prints its report.
//!
//! `tests/schemathesis/` holds its config (the names of this server's specialists and model
//! key, which the document cannot list) and two hooks (the 422 for a name the config lacks is
//! declared, not a refusal of valid data; a run `POST /runs/prune` deleted is not a created
//! resource gone missing). `FABRIC_SCHEMATHESIS_EXAMPLES` and
//! `FABRIC_SCHEMATHESIS_SEED` make a deeper or another run by hand (docs/HTTP.md).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use fabric_test_support::{Scenario, TurnBy};

use super::serve::hello_turns;
use super::serve_fixture::{Options, Served, TOKEN};

/// Examples per operation and phase: about 1,000 requests, some 15 s on a 2-core machine.
const EXAMPLES: &str = "30";
/// A fixed seed, so a run that fails fails again the same way.
const SEED: &str = "14";

/// Every value the document allows is one this server may take: every `max_steps` (1–1000),
/// and semantic search (the scripted server makes embeddings).
const CONFIG: &str =
    "max_steps: 1000\nrun_index:\n  embedding_model_key: test\n  embedding_model: embed-test\n";

#[cfg_attr(
    fabric_no_schemathesis,
    ignore = "needs schemathesis: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_14_fabric_serve_honours_its_openapi_document() {
    let Some(st) = fabric_test_support::schemathesis_deps() else {
        return;
    };
    // Any number of runs, each the same conversation from its first turn.
    let scenario = Scenario {
        turn_by: TurnBy::Conversation,
        ..Scenario::new(hello_turns())
    };
    let served = Served::with(
        scenario,
        Options {
            config: CONFIG,
            auth: true,
            ..Options::default()
        },
    )
    .await;
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis");
    let examples = std::env::var("FABRIC_SCHEMATHESIS_EXAMPLES").unwrap_or(EXAMPLES.to_owned());
    let seed = std::env::var("FABRIC_SCHEMATHESIS_SEED").unwrap_or(SEED.to_owned());
    let mut command = tokio::process::Command::new(&st);
    command
        .arg("--config-file")
        .arg(here.join("schemathesis.toml"))
        .arg("--no-color")
        .args(["run", &served.url("/openapi.json")])
        .args(["--header", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--checks", "all"])
        // Replaced by the hooks' checks, which know a name the config lacks and a pruned run.
        .args([
            "--exclude-checks",
            "positive_data_acceptance,ensure_resource_availability",
        ])
        .args(["--max-examples", &examples, "--seed", &seed])
        // One worker: with two, a `POST /runs/prune` of one could delete the run another
        // had just started and was about to read, which is the API working, not failing.
        .args(["--workers", "1"])
        .args(["--generation-database", "none"])
        .env("SCHEMATHESIS_HOOKS", "fabric_hooks")
        .env("PYTHONPATH", &here)
        // Its reports and caches go to the test's directory, not the source tree.
        .current_dir(served.fx.dir.path())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let started = Instant::now();
    let output = tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .expect("schemathesis finished within 300 s")
        .expect("schemathesis runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "schemathesis found the API and its document disagreeing ({:?}):\n{report}",
        output.status
    );
    // A run that tested nothing would pass too: it must have gone through every phase.
    for phase in ["Examples", "Coverage", "Fuzzing", "Stateful"] {
        assert!(
            report.contains(&format!("✅  {phase}")),
            "{phase} did not pass:\n{report}"
        );
    }
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "schemathesis: {} in {:.1} s",
            report
                .lines()
                .rev()
                .find(|l| l.contains(" generated, "))
                .unwrap_or("no summary")
                .trim(),
            started.elapsed().as_secs_f64()
        );
    }
}
