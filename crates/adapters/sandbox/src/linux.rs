//! [`OsSandbox`]: the `ProcessSandbox` that applies the policy to each command.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fabric_core::{ProcessSandbox, SandboxGuard, ToolContext, ToolError};
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use rustix::process::{Resource, Rlimit, setrlimit};
use seccompiler::BpfProgram;

use crate::policy::{ABI_TCP, Mode, Policy};
use crate::seccomp;

/// System directories a command may read and execute from. Everything else outside the
/// workspace (home directories, the fabric's config and runs, other projects) is invisible.
const SYSTEM_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
    "/sys", "/dev",
];

/// Device files a command may also write (redirections, `dd`, tests).
const DEVICE_WRITE: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// The sandbox of every tool process of this fabric, for one effective [`Policy`].
#[derive(Debug, Clone)]
pub struct OsSandbox {
    policy: Policy,
}

impl OsSandbox {
    /// The sandbox applying `policy`.
    pub fn new(policy: Policy) -> Self {
        Self { policy }
    }

    /// The policy it applies.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    fn ruleset(
        &self,
        workspace: &Path,
        tmp: &Path,
        network: bool,
    ) -> Result<RulesetCreated, String> {
        let abi = ABI::from(self.policy.landlock_abi);
        let mut ruleset = Ruleset::default()
            // The ABI comes from the kernel itself, so everything asked for is supported;
            // a refusal would be a bug worth failing loudly on.
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))
            .map_err(|e| e.to_string())?;
        if !network && self.policy.landlock_abi >= ABI_TCP {
            ruleset = ruleset
                .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
                .map_err(|e| e.to_string())?;
        }
        if !Scope::from_all(abi).is_empty() {
            ruleset = ruleset
                .scope(Scope::from_all(abi))
                .map_err(|e| e.to_string())?;
        }
        let mut created = ruleset.create().map_err(|e| e.to_string())?;
        let readable = SYSTEM_READ
            .iter()
            .map(PathBuf::from)
            .chain(self.policy.read_paths.iter().cloned());
        for path in readable {
            // Missing system directories (no /lib32 here) are simply not granted.
            if let Ok(fd) = PathFd::new(&path) {
                created = created
                    .add_rule(PathBeneath::new(fd, AccessFs::from_read(abi)))
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        for device in DEVICE_WRITE {
            if let Ok(fd) = PathFd::new(device) {
                created = created
                    .add_rule(PathBeneath::new(fd, AccessFs::from_file(abi)))
                    .map_err(|e| format!("{device}: {e}"))?;
            }
        }
        for path in [workspace, tmp] {
            let fd = PathFd::new(path).map_err(|e| format!("{}: {e}", path.display()))?;
            created = created
                .add_rule(PathBeneath::new(fd, AccessFs::from_all(abi)))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(created)
    }
}

impl ProcessSandbox for OsSandbox {
    fn prepare(
        &self,
        cmd: &mut std::process::Command,
        ctx: &ToolContext,
    ) -> Result<SandboxGuard, ToolError> {
        if self.policy.mode == Mode::Off {
            return Ok(SandboxGuard::default());
        }
        let failed = |what: String| {
            ToolError::Failed(format!(
                "the command was not started: the OS sandbox could not be set up ({what})"
            ))
        };
        let network = self.policy.process_network(ctx.network_allowed);
        // A private temporary directory per command, removed when the guard drops.
        let tmp = tempfile::Builder::new()
            .prefix("fabric-tmp-")
            .tempdir()
            .map_err(|e| failed(format!("private temp directory: {e}")))?;
        cmd.env("TMPDIR", tmp.path());
        let ruleset = self
            .ruleset(&ctx.workspace, tmp.path(), network)
            .map_err(|e| failed(format!("Landlock: {e}")))?;
        let filter = seccomp::filter(network).map_err(|e| failed(e.to_string()))?;
        let child = ChildSetup {
            limits: rlimits(&self.policy),
            drop_capabilities: self.policy.host.root,
            ruleset: Mutex::new(Some(ruleset)),
            filter,
        };
        // SAFETY: the hook runs in the forked child before `exec`. It only makes syscalls
        // (setrlimit, prctl, capset, landlock_restrict_self, seccomp) on data prepared in
        // the parent; it allocates only to report an error, which aborts the spawn. The
        // mutex was created unlocked in the parent and the child is single-threaded, so
        // taking it cannot block.
        unsafe {
            cmd.pre_exec(move || child.apply());
        }
        tracing::debug!(run_id = %ctx.run_id.as_str(), network, tmp = %tmp.path().display(), "sandboxed command");
        Ok(SandboxGuard::holding(tmp))
    }

    fn describe(&self) -> String {
        format!(
            "OS sandbox `{}`: {}",
            self.policy.mode.as_str(),
            self.policy.enforced().join("; ")
        )
    }

    fn enforcing(&self) -> bool {
        self.policy.mode != Mode::Off
    }
}

/// Everything the child applies to itself, prepared in the parent.
struct ChildSetup {
    limits: Vec<(Resource, u64)>,
    drop_capabilities: bool,
    /// Taken by the one child this hook runs in (`restrict_self` consumes it).
    ruleset: Mutex<Option<RulesetCreated>>,
    filter: BpfProgram,
}

impl ChildSetup {
    /// Runs in the child between fork and exec. Order matters: limits and capabilities
    /// first (both need privileges the later steps take away), then Landlock (which also
    /// sets `no_new_privs`, required by seccomp), then seccomp last so the syscalls above
    /// are not filtered.
    fn apply(&self) -> std::io::Result<()> {
        for (resource, value) in &self.limits {
            setrlimit(
                *resource,
                Rlimit {
                    current: Some(*value),
                    maximum: Some(*value),
                },
            )?;
        }
        if self.drop_capabilities {
            drop_capabilities()?;
        }
        let ruleset = self
            .ruleset
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
            .ok_or_else(|| std::io::Error::other("sandbox hook ran twice"))?;
        let status = ruleset
            .restrict_self()
            .map_err(|e| std::io::Error::other(format!("Landlock: {e}")))?;
        if status.ruleset == RulesetStatus::NotEnforced {
            return Err(std::io::Error::other(
                "Landlock did not enforce the ruleset",
            ));
        }
        seccompiler::apply_filter(&self.filter)
            .map_err(|e| std::io::Error::other(format!("seccomp: {e}")))?;
        Ok(())
    }
}

/// Root keeps no capability across `exec`: `SECBIT_NOROOT` (locked) stops exec from granting
/// the full set to uid 0, and the current sets are emptied.
fn drop_capabilities() -> std::io::Result<()> {
    use rustix::thread::{
        CapabilitiesSecureBits, CapabilitySet, CapabilitySets, clear_ambient_capability_set,
        set_capabilities, set_capabilities_secure_bits,
    };
    set_capabilities_secure_bits(
        CapabilitiesSecureBits::NO_ROOT | CapabilitiesSecureBits::NO_ROOT_LOCKED,
    )?;
    clear_ambient_capability_set()?;
    set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )?;
    Ok(())
}

fn rlimits(policy: &Policy) -> Vec<(Resource, u64)> {
    let limits = policy.limits;
    vec![
        (Resource::Cpu, limits.cpu_s),
        (Resource::As, limits.memory_bytes),
        (Resource::Nproc, limits.processes),
        (Resource::Fsize, limits.file_size_bytes),
        (Resource::Nofile, limits.open_files),
        (Resource::Core, 0),
    ]
}
