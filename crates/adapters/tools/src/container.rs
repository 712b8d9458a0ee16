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
