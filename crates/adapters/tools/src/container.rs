//! `shell` in a container: a specialist with `container_image` runs its commands through
//! Podman instead of on the host.
//!
//! The container is the confinement here, so the command line is built to give it no more
//! than the host sandbox would: no network unless the run allows it, the run's workspace as
//! the only mount, no capabilities, no new privileges, and limits on memory, processes and
//! CPU. The Podman client itself runs unconfined by our Landlock/seccomp layer, because it
//! needs namespaces and mounts to start the container. Images cannot be pulled on machines
//! without a registry; the image must already be present (docs/SECURITY.md).

use std::path::{Path, PathBuf};

use crate::policy::{ContainerSettings, SAFE_PATH};

/// The workspace's path inside the container.
pub(crate) const CONTAINER_WORKSPACE: &str = "/workspace";

/// `podman` on the fixed tool `PATH`, if installed.
pub fn podman_path() -> Option<PathBuf> {
    SAFE_PATH
        .split(':')
        .map(|dir| Path::new(dir).join("podman"))
        .find(|candidate| candidate.is_file())
}

/// Podman's exit code when Podman itself failed: the container did not start (a missing
/// image, no container init, a runtime error), as opposed to the command's own codes.
const PODMAN_FAILED: i32 = 125;

/// A container call whose container did not start (issue #40: Podman 4.3 from Debian,
/// without catatonit, failed every call with exit 125 and the run ended "completed" as if
/// the commands had run): a tool error in words for the model, with Podman's own; `None`
/// for every exit code of the command itself.
pub(crate) fn did_not_start(
    image: &str,
    code: Option<i32>,
    stderr: &str,
) -> Option<fabric_engine::ToolError> {
    // 126 is also the command's "cannot be invoked"; the OCI runtime's own failures (crun,
    // runc: limits or cgroups the host refuses) say so in Podman's words.
    let runtime_failed = code == Some(PODMAN_FAILED + 1) && stderr.contains("OCI ");
    (code == Some(PODMAN_FAILED) || runtime_failed).then(|| {
        fabric_engine::ToolError::Failed(format!(
            "the command did not run: Podman could not start a container of the image `{image}` (exit {}): {}. No command of this specialist can run until the host is fixed (`fabric doctor` starts a container to check); finish with what the other tools allow and say so in your answer",
            code.unwrap_or_default(),
            stderr.trim()
        ))
    })
}

/// Whether a container of `image` starts here, as every call starts one (`--init`, no
/// pull, no network) running `true`, within `within`: `fabric doctor`'s check (issue #40:
/// `[ok] podman` while every call failed). The error holds Podman's own words.
pub async fn container_starts(
    image: &str,
    within: std::time::Duration,
) -> Result<(), fabric_engine::ToolError> {
    let failed = |what: String| fabric_engine::ToolError::Failed(what);
    let podman = podman_path().ok_or_else(|| failed("Podman is not installed".to_owned()))?;
    let run = tokio::process::Command::new(podman)
        .args([
            "run",
            "--rm",
            "--init",
            "--pull=never",
            "--network=none",
            image,
            "true",
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(within, run)
        .await
        .map_err(|_| {
            failed(format!(
                "no container of `{image}` started within {} s",
                within.as_secs()
            ))
        })?
        .map_err(|e| failed(format!("podman did not start: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    Err(failed(format!(
        "a container of `{image}` did not start ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

/// The arguments of `podman` that run `program args` in the container named `name`.
pub(crate) fn podman_args(
    settings: &ContainerSettings,
    name: &str,
    workspace: &Path,
    network: bool,
    env: &[(String, String)],
    program: &str,
    args: &[String],
) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        "run".into(),
        "--rm".into(),
        "--init".into(),
        format!("--name={name}"),
        // Never pull: an image that is not present is an error the user can act on, not a
        // download from a registry the user did not choose.
        "--pull=never".into(),
        format!("--network={}", if network { "slirp4netns" } else { "none" }),
        "--cap-drop=all".into(),
        "--security-opt=no-new-privileges".into(),
        format!("--memory={}", settings.memory),
        format!("--pids-limit={}", settings.pids_limit),
        format!("--cpus={}", settings.cpus),
        format!("--volume={}:{CONTAINER_WORKSPACE}:rw", workspace.display()),
        format!("--workdir={CONTAINER_WORKSPACE}"),
        format!("--env=HOME={CONTAINER_WORKSPACE}"),
        "--env=LANG=C.UTF-8".into(),
    ];
    for (key, value) in env {
        argv.push(format!("--env={key}={value}"));
    }
    argv.push(settings.image.clone());
    argv.push(program.to_owned());
    argv.extend(args.iter().cloned());
    argv
}

/// Removes the container when dropped, unless disarmed: on timeout, cancellation or a dropped
/// call, killing the Podman client alone would leave the container running.
pub(crate) struct ContainerGuard {
    podman: PathBuf,
    name: String,
    armed: bool,
}

impl ContainerGuard {
    pub(crate) fn new(podman: PathBuf, name: String) -> Self {
        Self {
            podman,
            name,
            armed: true,
        }
    }

    /// The container ended on its own (`--rm` removed it).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Fire and forget: a drop cannot wait, and `podman rm -f` finishes on its own.
        let spawned = std::process::Command::new(&self.podman)
            .args(["rm", "-f", "--time=0", &self.name])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(e) = spawned {
            tracing::warn!(container = %self.name, error = %e, "could not remove the container");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_confines_the_container() {
        let settings = ContainerSettings::new("docker.io/library/rust:1.95");
        let argv = podman_args(
            &settings,
            "fabric-r1-0",
            Path::new("/runs/r1/workspace"),
            false,
            &[("CARGO_HOME".into(), "/workspace/.cargo".into())],
            "cargo",
            &["test".into(), "--quiet".into()],
        );
        let expected = [
            "run",
            "--rm",
            "--init",
            "--name=fabric-r1-0",
            "--pull=never",
            "--network=none",
            "--cap-drop=all",
            "--security-opt=no-new-privileges",
            "--memory=2g",
            "--pids-limit=256",
            "--cpus=1",
            "--volume=/runs/r1/workspace:/workspace:rw",
            "--workdir=/workspace",
            "--env=HOME=/workspace",
            "--env=LANG=C.UTF-8",
            "--env=CARGO_HOME=/workspace/.cargo",
            "docker.io/library/rust:1.95",
            "cargo",
            "test",
            "--quiet",
        ];
        assert_eq!(argv, expected);
        let with_network = podman_args(&settings, "n", Path::new("/w"), true, &[], "ls", &[]);
        assert!(with_network.contains(&"--network=slirp4netns".to_owned()));
    }
}

#[cfg(test)]
mod issue_40_tests {
    use super::*;

    #[test]
    fn issue_40_podman_s_own_failure_is_a_tool_error_and_the_command_s_codes_are_not() {
        let stderr = "Error: container-init binary not found on the host: stat /usr/libexec/podman/catatonit: no such file or directory\n";
        let Some(fabric_engine::ToolError::Failed(message)) =
            did_not_start("localhost/tools:1", Some(125), stderr)
        else {
            panic!("exit 125 is Podman's own failure");
        };
        assert!(message.contains("Podman could not start a container of the image `localhost/tools:1` (exit 125): Error: container-init binary not found"), "{message}");
        assert!(message.contains("fabric doctor"), "{message}");
        for code in [Some(0), Some(1), Some(126), Some(127), None] {
            assert!(did_not_start("i", code, "").is_none(), "{code:?}");
        }
        // The OCI runtime's own failure, as crun says it on a host with hybrid cgroups.
        let crun = "Error: OCI runtime error: crun: cgroups in hybrid mode not supported, drop all controllers from cgroupv2";
        assert!(did_not_start("i", Some(126), crun).is_some());
    }
}
