//! Issue #40, first half: what outside eyes found, round two.

#![allow(clippy::print_stderr)]

use fabric_test_support::Turn;
use serde_json::{Value, json};

use super::fixture::{Fixture, of_kind};

/// Installs a seccomp filter, then executes the rest of its arguments. `refuse` makes
/// `unshare` and `setns` answer `EPERM`, `clone3` `ENOSYS` (so the C library falls back to
/// `clone`) and `clone` with a namespace flag `EPERM`, as a container runtime's default
/// profile or systemd's `RestrictNamespaces=` do; `allow` allows every call (a filter that
/// changes nothing but is there).
const SECCOMP_WRAPPER: &str = r#"
import ctypes, os, struct, sys
mode, argv = sys.argv[1], sys.argv[2:]
LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ALLOW, ERRNO = 0x7fff0000, 0x00050000
EPERM, ENOSYS = 1, 38
def op(code, k, jt=0, jf=0):
    return struct.pack("HBBI", code, jt, jf, k)
if mode == "refuse":
    prog = [
        op(LD, 4), op(JEQ, 0xc000003e, 1, 0), op(RET, ALLOW),
        op(LD, 0),
        op(JEQ, 272, 0, 1), op(RET, ERRNO | EPERM),   # unshare
        op(JEQ, 308, 0, 1), op(RET, ERRNO | EPERM),   # setns
        op(JEQ, 435, 0, 1), op(RET, ERRNO | ENOSYS),  # clone3
        op(JEQ, 56, 0, 3),                            # clone: its flags
        op(LD, 16), op(JSET, 0x7E020080, 0, 1), op(RET, ERRNO | EPERM),
        op(RET, ALLOW),
    ]
else:
    prog = [op(RET, ALLOW)]
code = b"".join(prog)
buf = ctypes.create_string_buffer(code, len(code))
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fprog = Prog(len(prog), ctypes.addressof(buf))
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(38, 1, 0, 0, 0) != 0:
    sys.exit("PR_SET_NO_NEW_PRIVS: " + os.strerror(ctypes.get_errno()))
if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
    sys.exit("PR_SET_SECCOMP: " + os.strerror(ctypes.get_errno()))
os.execvp(argv[0], argv)
"#;

/// Two shell commands, then the end.
fn two_commands() -> Vec<Turn> {
    vec![
        Turn::tool_call("shell", json!({"cmd": ["ls", "-a"]})),
        Turn::tool_call("shell", json!({"cmd": ["echo", "hello"]})),
        Turn::tool_call("finish_task", json!({"summary": "listed"})),
    ]
}

/// A `fabric run --json` of `two_commands` started through `wrapper` (none: directly), with
/// the sandbox probe's cache in `cache`; the runlog's events.
async fn run_two_commands(wrapper: &[&str], cache: &std::path::Path) -> Vec<Value> {
    let fx = Fixture::new(two_commands()).await;
    let cache = cache.display().to_string();
    let run = fx
        .fabric_via(
            wrapper,
            &[
                "run",
                "List the workspace",
                "--pack",
                "engineering",
                "--json",
            ],
            &[("XDG_CACHE_HOME", cache.as_str())],
            60,
        )
        .await;
    run.assert_code(0);
    fx.runlog(&run.json())
}

/// The seccomp wrapper of `mode` (`refuse`, `allow`), its script written into `dir`.
fn seccomp(dir: &std::path::Path, mode: &str) -> Vec<String> {
    let script = dir.join("seccomp.py");
    std::fs::write(&script, SECCOMP_WRAPPER).unwrap();
    vec![
        "python3".to_owned(),
        script.display().to_string(),
        mode.to_owned(),
    ]
}

/// Whether this host gives commands namespaces at all (else the test has nothing to show).
fn host_has_namespaces(events: &[Value]) -> bool {
    let sandbox = &events[0]["payload"]["sandbox"];
    if sandbox["namespaces"] == true {
        return true;
    }
    eprintln!("SKIP: this host gives commands no namespaces: {sandbox}");
    false
}

/// Both commands ran (exit code 0) and none failed.
fn assert_commands_ran(events: &[Value]) {
    let errors = of_kind(events, "tool_error");
    assert!(errors.is_empty(), "no command failed: {errors:#?}");
    let results: Vec<&Value> = of_kind(events, "tool_result")
        .into_iter()
        .filter(|e| e["payload"]["tool"] == "shell")
        .collect();
    assert_eq!(results.len(), 2, "{events:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_40_a_kept_namespace_verdict_does_not_hold_under_a_seccomp_filter() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    // Primed by a run outside any filter.
    let first = run_two_commands(&[], &cache).await;
    if !host_has_namespaces(&first) {
        return;
    }
    assert!(cache.join("agent-fabric/sandbox-probe.json").exists());
    // Under a filter refusing the namespace calls, the kept verdict does not apply: the
    // probe runs afresh, the commands run without namespaces, and `run_start` says so.
    let wrapper = seccomp(dir.path(), "refuse");
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let events = run_two_commands(&wrapper, &cache).await;
    assert_commands_ran(&events);
    let sandbox = &events[0]["payload"]["sandbox"];
    assert_eq!(sandbox["namespaces"], false, "{sandbox}");
    assert!(
        sandbox["host"]["namespaces_error"].as_str().is_some(),
        "run_start says why: {sandbox}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_40_commands_fall_back_when_the_namespaces_fail_to_set_up() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    // Primed under a filter that allows everything: the key (one seccomp filter) is the
    // same under the refusing filter, so the kept verdict says namespaces work.
    let allow = seccomp(dir.path(), "allow");
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let first = run_two_commands(&allow, &cache).await;
    if !host_has_namespaces(&first) {
        return;
    }
    let refuse = seccomp(dir.path(), "refuse");
    let refuse: Vec<&str> = refuse.iter().map(String::as_str).collect();
    let events = run_two_commands(&refuse, &cache).await;
    // The setup failed, the probe ran again and the commands ran as a fresh probe decides:
    // without namespaces.
    assert_commands_ran(&events);
    // The wrong verdict is gone: the next start probes afresh and records the truth.
    let after = run_two_commands(&refuse, &cache).await;
    assert_commands_ran(&after);
    assert_eq!(after[0]["payload"]["sandbox"]["namespaces"], false);
}

/// A long answer streamed slowly on `backend`, stopped by a 2 s time budget: `run_failed`
/// counted 0 tokens after about 400 were streamed. The prompt and the text received are
/// counted, estimated, as when the token budget stops a stream (issue #26).
async fn time_budget_counts_what_streamed(backend: &str) {
    let mut scenario = fabric_test_support::Scenario::new(vec![Turn::text("word ".repeat(4_000))]);
    // Twelve pieces of about 400 tokens, 400 ms apart: about five arrive in the 2 s.
    scenario.stream_delay_ms = 400;
    let fx = Fixture::with_backend(scenario, backend).await;
    fx.append_config("budget:\n  max_wall_s: 2\n");
    let result =
        super::budgets::stopped_stream(&fx, &[("ANTHROPIC_API_KEY", "sk-ant-test-key")]).await;
    let usage = &result["_meta"]["usage"];
    assert!(
        usage["completion_tokens"].as_u64() > Some(10),
        "{backend}: {usage}"
    );
    assert!(
        usage["prompt_tokens"].as_u64() > Some(0),
        "{backend}: {usage}"
    );
    let reason = result["_meta"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("ran out during a model call")
            && reason.contains("estimated from the prompt sent and the text received"),
        "{backend}: {reason}"
    );
    let events = fx.runlog(&result);
    let end = events.last().unwrap();
    assert_eq!(end["kind"], "run_failed");
    assert_eq!(end["payload"]["usage"], *usage, "{backend}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_40_a_time_budget_that_stops_a_stream_counts_its_tokens_openai() {
    time_budget_counts_what_streamed("openai").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_40_a_time_budget_that_stops_a_stream_counts_its_tokens_anthropic() {
    time_budget_counts_what_streamed("anthropic").await;
}

/// A run on `backend: openai-responses` with `constrained_decoding: json_schema`, against a
/// server that answers llama.cpp's `/props` (`llama`) or not; the request bodies.
async fn constrained_responses_run(llama: bool) -> Vec<Value> {
    let turns = vec![
        Turn::text(r#"{"name": "write_file", "arguments": {"path": "a.txt", "content": "A"}}"#),
        Turn::text(r#"{"name": "finish_task", "arguments": {"summary": "wrote a.txt"}}"#),
    ];
    // A template that calls tools: `json_schema` constrains every call all the same.
    let fx = responses_fixture(llama.then_some(true), "json_schema", turns).await;
    let result = fx.run_json("write a.txt", &[], 0).await;
    assert_eq!(result["summary"], "wrote a.txt");
    let workspace = std::path::PathBuf::from(result["_meta"]["workspace"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(workspace.join("a.txt")).unwrap(),
        "A"
    );
    let events = fx.runlog(&result);
    let answers = of_kind(&events, "llm_response");
    assert!(answers.iter().all(|e| e["payload"]["constrained"] == true));
    fx.server
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/responses")
        .map(|r| r.body)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_40_the_responses_backend_asks_for_tool_calls_by_json_schema() {
    for llama in [false, true] {
        let bodies = constrained_responses_run(llama).await;
        assert_eq!(bodies.len(), 2, "{bodies:#?}");
        for body in &bodies {
            // The Responses API's form: `text.format`, the tools in the instructions.
            assert!(body.get("tools").is_none(), "{body}");
            let format = &body["text"]["format"];
            assert_eq!(format["type"], "json_schema", "{body}");
            assert_eq!(format["name"], "tool_call");
            assert_eq!(format["strict"], true);
            let shapes = format["schema"]["anyOf"].as_array().unwrap();
            assert!(
                shapes
                    .iter()
                    .any(|s| s["properties"]["name"]["const"] == "write_file")
            );
            assert!(
                body["instructions"]
                    .as_str()
                    .is_some_and(|i| i.contains("Answer with exactly one JSON object"))
            );
            // llama.cpp ignores `text.format` on /v1/responses but enforces the
            // `response_format` it passes on: sent to it alone.
            assert_eq!(
                body["response_format"]["json_schema"]["schema"],
                if llama {
                    format["schema"].clone()
                } else {
                    Value::Null
                },
                "llama {llama}"
            );
        }
    }
}

/// The scripted server as a Responses API server: llama.cpp's (`/props`, its template
/// calling tools or not) or another; `mode`: the key's `constrained_decoding`.
async fn responses_fixture(llama: Option<bool>, mode: &str, turns: Vec<Turn>) -> Fixture {
    let mut scenario = fabric_test_support::Scenario::new(turns);
    if let Some(calls_tools) = llama {
        scenario.models[0].context_length = Some(32_768);
        if !calls_tools {
            scenario.models[0].capabilities = vec!["completion".to_owned()];
        }
    }
    let fx = Fixture::with_backend(scenario, "openai-responses").await;
    let yaml = std::fs::read_to_string(&fx.config).unwrap().replace(
        "    max_retries: 2\n",
        &format!("    max_retries: 2\n    constrained_decoding: \"{mode}\"\n"),
    );
    std::fs::write(&fx.config, yaml).unwrap();
    fx
}

/// `auto` on the Responses backend asks by JSON schema where llama.cpp's `/props` says the
/// chat template cannot call tools (SmolLM2's), and natively elsewhere.
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_auto_on_the_responses_backend_follows_the_template() {
    for calls_tools in [false, true] {
        let turns = if calls_tools {
            vec![
                Turn::tool_call("list_files", json!({})),
                Turn::tool_call("finish_task", json!({"summary": "listed"})),
            ]
        } else {
            vec![
                Turn::text(r#"{"name": "list_files", "arguments": {}}"#),
                Turn::text(r#"{"name": "finish_task", "arguments": {"summary": "listed"}}"#),
            ]
        };
        let fx = responses_fixture(Some(calls_tools), "auto", turns).await;
        let result = fx.run_json("list the files", &[], 0).await;
        assert_eq!(
            result["summary"], "listed",
            "template calls tools: {calls_tools}"
        );
        let body = &fx.requests()[0];
        assert_eq!(body.get("tools").is_some(), calls_tools, "{body}");
        assert_eq!(body.get("text").is_none(), calls_tools, "{body}");
    }
}

/// `fabric doctor` says where the schema goes on a Responses key's server, warns where the
/// server does not say it enforces it, and fails a template that cannot call tools with
/// constrained decoding off (a run would call no tool).
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_doctor_says_how_a_responses_key_asks_for_tool_calls() {
    for (llama, mode, expected) in [
        (
            None,
            "json_schema",
            "[warn] model `test` constrained decoding: the tool-call schema goes as `text.format`, which OpenAI enforces; this server does not say whether it does",
        ),
        (
            Some(false),
            "auto",
            "[ok  ] model `test` constrained decoding: llama.cpp's /v1/responses ignores `text.format`; the tool-call schema also goes as `response_format`, which it enforces (`auto`: the chat template cannot call tools, so every call)",
        ),
        (
            Some(false),
            "off",
            "[FAIL] model `test` constrained decoding: llama.cpp says the chat template cannot call tools and `constrained_decoding` is `off`",
        ),
    ] {
        let fx = responses_fixture(llama, mode, Vec::new()).await;
        let run = fx.fabric(&["doctor"]).await;
        assert!(
            run.stdout.contains(expected),
            "{llama:?} {mode}:\n{}",
            run.stdout
        );
    }
}

/// A fixture whose engineering specialist runs its shell in `image`, scripted to write a
/// file, list the workspace through the container and finish.
async fn containerised(image: &str) -> Fixture {
    let fx = Fixture::new(vec![
        Turn::tool_call("write_file", json!({"path": "a.txt", "content": "A"})),
        Turn::tool_call("shell", json!({"cmd": ["ls"]})),
        Turn::tool_call("finish_task", json!({"summary": "listed"})),
    ])
    .await;
    fx.append_config(&format!(
        "specialists:\n  engineering:\n    container_image: {image}\n"
    ));
    fx
}

/// An image of busybox alone (Debian's busybox-static), imported once: images cannot be
/// pulled here.
fn busybox_image(dir: &std::path::Path) -> &'static str {
    const IMAGE: &str = "localhost/fabric-test-busybox:40";
    let root = dir.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    for applet in ["ls", "true", "sh", "echo", "cat"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    let tar = dir.join("rootfs.tar");
    let packed = std::process::Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(packed.success());
    let imported = std::process::Command::new("podman")
        .args(["import", "--change", "ENV PATH=/bin"])
        .arg(&tar)
        .arg(IMAGE)
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    IMAGE
}

/// A real containerised specialist: its `ls` runs in a container of a local image and sees
/// the workspace, and `fabric doctor` starts a container of that image to say it works.
#[cfg_attr(
    not(fabric_has_podman),
    ignore = "needs Podman, catatonit and busybox-static: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_a_containerised_specialist_runs_its_commands_in_a_container() {
    let Some(deps) = fabric_test_support::test_deps() else {
        return;
    };
    // The test deps' Podman settings: runc (crun refuses this host's hybrid cgroups) and
    // limits the host lets root set; the fabric hands them to Podman.
    let conf = deps.join("containers.conf");
    assert!(
        conf.exists(),
        "{} is missing: run scripts/install-test-deps.sh",
        conf.display()
    );
    let conf = conf.display().to_string();
    let env = [("CONTAINERS_CONF", conf.as_str())];
    let dir = tempfile::tempdir().unwrap();
    let image = busybox_image(dir.path());
    let fx = containerised(image).await;
    let run = fx
        .fabric_with(
            &[
                "run",
                "write a.txt and list",
                "--pack",
                "engineering",
                "--json",
            ],
            &env,
        )
        .await;
    run.assert_code(0);
    let result = run.json();
    let events = fx.runlog(&result);
    let listed = of_kind(&events, "tool_result")
        .into_iter()
        .find(|e| e["payload"]["tool"] == "shell")
        .unwrap()
        .clone();
    // The runlog keeps a tool's result as the text the model was given.
    let shown: Value =
        serde_json::from_str(listed["payload"]["result"].as_str().unwrap_or("null")).unwrap();
    assert_eq!(shown["exit_code"], 0, "{listed}");
    assert!(
        shown["stdout"]
            .as_str()
            .is_some_and(|s| s.contains("a.txt")),
        "{listed}"
    );
    let doctor = fx.fabric_with(&["doctor"], &env).await;
    assert!(
        doctor.stdout.contains(&format!(
            "[ok  ] podman: a container of `{image}` (specialist `engineering`) starts"
        )),
        "{}",
        doctor.stdout
    );
}

/// A container that cannot start (here: its image is not present; on Debian without
/// catatonit, every one) fails each call as a tool error naming Podman's words, not as a
/// command that ran and exited 125, and `fabric doctor` fails the check.
#[cfg_attr(
    not(fabric_has_podman),
    ignore = "needs Podman: run scripts/install-test-deps.sh"
)]
#[tokio::test(flavor = "multi_thread")]
async fn issue_40_a_container_that_does_not_start_is_a_tool_error_and_a_doctor_failure() {
    let image = "localhost/fabric-test-absent:40";
    let fx = containerised(image).await;
    let run = fx
        .fabric(&[
            "run",
            "write a.txt and list",
            "--pack",
            "engineering",
            "--json",
        ])
        .await;
    let events = fx.runlog(&run.json());
    let errors = of_kind(&events, "tool_error");
    assert_eq!(errors.len(), 1, "{events:#?}");
    let message = errors[0]["payload"]["error_message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "Podman could not start a container of the image `{image}` (exit 125)"
        )),
        "{message}"
    );
    let doctor = fx.fabric(&["doctor"]).await;
    assert_eq!(doctor.code(), 1, "{}", doctor.stdout);
    assert!(
        doctor.stdout.contains(&format!(
            "[FAIL] podman: a container of `{image}` did not start"
        )),
        "{}",
        doctor.stdout
    );
}
