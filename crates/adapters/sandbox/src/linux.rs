//! [`OsSandbox`]: the `ProcessSandbox` that applies the policy to each command.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use fabric_engine::fs::DiskWatch;
use fabric_engine::{CommandWatch, ProcessSandbox, SandboxGuard, ToolContext, ToolError};
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use rustix::process::{Resource, Rlimit, setrlimit};
use seccompiler::BpfProgram;

use crate::cgroup::CommandCgroup;
use crate::ns::{self, Plan, Step};
use crate::policy::{ABI_TCP, Mode, Policy};
use crate::{SandboxError, seccomp};

/// System directories a command may read and execute from. Everything else outside the
/// workspace (home directories, the fabric's config and runs, other projects) is invisible.
const SYSTEM_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc",
    "/sys", "/dev",
];

/// Device files a command may also write (redirections, `dd`, tests).
const DEVICE_WRITE: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// The sandbox of every tool process of this fabric, for one effective [`Policy`]: the one
/// decided at startup, or the one a fresh probe decided after a command's namespaces failed
/// to set up (issue #40: a kept verdict that no longer held disabled every command).
#[derive(Debug, Clone)]
pub struct OsSandbox {
    /// What commands get now.
    active: Arc<RwLock<Arc<Active>>>,
    /// Whether the host was probed afresh already: at most once per sandbox.
    reprobed: Arc<AtomicBool>,
}

/// One effective policy and what applying it needs.
#[derive(Debug)]
struct Active {
    policy: Policy,
    /// The policy as `run_start` records it, made once (issue #14).
    record: Arc<serde_json::Value>,
    /// The namespace setup, when the policy has namespaces: made at the first command
    /// (issue #26: a run whose tools start no process does not pay for scanning `/etc`
    /// and, as root, making a user namespace).
    plan: Option<OnceLock<Result<Plan, SandboxError>>>,
    /// Paths inside a workspace that commands may read but never change (`.git`, …).
    protected: Vec<String>,
}

/// Why a command's confinement could not be set up: the words for the model, and whether
/// it was the namespaces (which a fresh probe may decide to do without).
struct Failure {
    namespaces: bool,
    what: String,
}

impl Failure {
    fn other(what: String) -> Self {
        Self {
            namespaces: false,
            what,
        }
    }

    fn namespaces(what: impl std::fmt::Display) -> Self {
        Self {
            namespaces: true,
            what: format!("namespaces: {what}"),
        }
    }

    fn into_tool_error(self) -> ToolError {
        ToolError::Failed(format!(
            "the command was not started: the OS sandbox could not be set up ({})",
            self.what
        ))
    }
}

impl OsSandbox {
    /// The sandbox applying `policy`, keeping the workspace's `protected` paths (relative
    /// names such as `.git`) read-only for processes where it has namespaces.
    pub fn new(policy: Policy, protected: Vec<String>) -> Result<Self, SandboxError> {
        Ok(Self {
            active: Arc::new(RwLock::new(Arc::new(Active::new(policy, protected)))),
            reprobed: Arc::default(),
        })
    }

    /// The policy it applies now.
    pub fn policy(&self) -> Policy {
        self.active().policy.clone()
    }

    /// What a run records about this sandbox now: the effective policy (`run_start`'s
    /// `sandbox`) and the notices that go with it.
    pub fn record(&self) -> fabric_engine::RunSandbox {
        let active = self.active();
        fabric_engine::RunSandbox {
            policy: active.record.clone(),
            notices: active.policy.notices(),
        }
    }

    fn active(&self) -> Arc<Active> {
        self.active
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// After the namespaces of a command under `failed` did not set up: forgets the kept
    /// verdict, probes the host afresh (once) and, when that decides another policy, applies
    /// it from now on, as a fresh start would. Whether commands now get another policy.
    fn fall_back(&self, failed: &Arc<Active>, why: &str) -> bool {
        crate::cache::forget();
        let mut active = self
            .active
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !Arc::ptr_eq(&active, failed) {
            // Another command fell back already.
            return true;
        }
        if self.reprobed.swap(true, Ordering::SeqCst) {
            return false;
        }
        let old = &failed.policy;
        let decided = Policy::decide(
            old.mode,
            crate::probe::reprobe(),
            old.limits,
            old.read_paths.clone(),
        );
        match decided {
            Ok(policy)
                if policy.namespaces != old.namespaces
                    || policy.unprivileged != old.unprivileged =>
            {
                tracing::warn!(
                    error = why,
                    namespaces = policy.namespaces,
                    unprivileged = policy.unprivileged,
                    "the sandbox's namespaces did not set up; the host was probed again and commands now run as it decided"
                );
                *active = Arc::new(Active::new(policy, failed.protected.clone()));
                true
            }
            Ok(_) => false,
            Err(e) => {
                tracing::warn!(error = %e, "the sandbox's namespaces did not set up and the host, probed again, cannot enforce the mode");
                false
            }
        }
    }
}

impl Active {
    fn new(policy: Policy, protected: Vec<String>) -> Self {
        Self {
            plan: policy.namespaces.then(OnceLock::new),
            record: Arc::new(policy.to_json()),
            policy,
            protected,
        }
    }

    /// The namespace plan, made the first time it is asked for.
    fn plan(&self) -> Option<Result<&Plan, SandboxError>> {
        let cell = self.plan.as_ref()?;
        let made = cell.get_or_init(|| {
            Plan::shared(
                SYSTEM_READ,
                &self.policy.read_paths,
                self.policy.host.root,
                self.policy.unprivileged,
            )
            .map_err(|e| SandboxError::Unsupported(e.to_string()))
        });
        Some(made.as_ref().map_err(Clone::clone))
    }

    fn ruleset(
        &self,
        workspace: &Path,
        tmp: &Path,
        network: bool,
    ) -> Result<RulesetCreated, SandboxError> {
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

impl Active {
    /// Confines `cmd` by this policy.
    fn prepare(
        &self,
        cmd: &mut std::process::Command,
        ctx: &ToolContext,
    ) -> Result<SandboxGuard, Failure> {
        let parent = rustix::process::getpid();
        if self.policy.mode == Mode::Off {
            // SAFETY: the hook runs in the forked child before `exec` and only makes syscalls.
            unsafe {
                cmd.pre_exec(move || {
                    close_inherited()?;
                    die_with(Some(parent))
                });
            }
            return Ok(SandboxGuard::default());
        }
        let failed = Failure::other;
        let network = self.policy.process_network(ctx.network_allowed);
        // A private temporary directory per command, removed when the guard drops.
        let tmp = PrivateTmp::new().map_err(|e| failed(format!("private temp directory: {e}")))?;
        let cgroup = match (&self.policy.host.cgroups, self.policy.cgroups) {
            (Ok(host), true) => Some(
                host.create(&self.policy.limits)
                    .map_err(|e| failed(format!("cgroup: {e}")))?,
            ),
            _ => None,
        };
        // With namespaces /tmp is a sized tmpfs of the command's own (the host directory is
        // then unused); without, the host directory is the command's TMPDIR.
        let plan = self.plan().transpose().map_err(Failure::namespaces)?;
        if plan.is_some() {
            cmd.env("TMPDIR", "/tmp");
        } else {
            cmd.env("TMPDIR", tmp.path());
        }
        let ruleset = self
            .ruleset(&ctx.workspace, tmp.path(), network)
            .map_err(|e| failed(format!("Landlock: {e}")))?;
        let filters =
            seccomp::filters(network, plan.is_some()).map_err(|e| failed(e.to_string()))?;
        let namespaces = match plan {
            Some(plan) => plan
                .steps(&ns::Command {
                    workspace: &ctx.workspace,
                    tmp_bytes: self.policy.limits.disk_bytes,
                    tmp_files: self.policy.limits.files,
                    network,
                    protected: &self.protected,
                })
                .map_err(Failure::namespaces)?,
            None => Vec::new(),
        };
        // The fresh /proc and the private /tmp are granted from inside (see `ns::grant`),
        // through a second descriptor of the same ruleset.
        let inside_rules = if namespaces.is_empty() {
            None
        } else {
            let fd: Option<OwnedFd> = ruleset
                .try_clone()
                .map_err(|e| failed(format!("Landlock: {e}")))?
                .into();
            let abi = ABI::from(self.policy.landlock_abi);
            fd.map(|fd| {
                (
                    fd,
                    [
                        (c"/proc", AccessFs::from_read(abi).bits()),
                        (c"/tmp", AccessFs::from_all(abi).bits()),
                    ],
                )
            })
        };
        // A command switched to nobody has no capabilities left to drop (and no longer may
        // set the secure bits: its namespace setup set them before switching).
        let drop_capabilities = self.policy.host.root && !ns::drops_root(&namespaces);
        let child = ChildSetup {
            parent,
            cgroups: cgroup
                .as_ref()
                .map(CommandCgroup::join_fds)
                .unwrap_or_default(),
            limits: rlimits(&self.policy),
            namespaces,
            inside_rules,
            drop_capabilities,
            ruleset: Mutex::new(Some(ruleset)),
            filters,
        };
        // SAFETY: the hook runs in the forked child before `exec`. It only makes syscalls
        // (setrlimit, close_range, the namespace steps, prctl, capset,
        // landlock_restrict_self, seccomp) on data prepared in the parent; it allocates only
        // to report an error, which aborts the spawn. The
        // mutex was created unlocked in the parent and the child is single-threaded, so
        // taking it cannot block.
        unsafe {
            cmd.pre_exec(move || child.apply());
        }
        tracing::debug!(run_id = %ctx.run_id.as_str(), network, tmp = %tmp.path().display(), "sandboxed command");
        let disk = DiskWatch {
            paths: vec![ctx.workspace.clone(), tmp.path().to_path_buf()],
            max_bytes: self.policy.limits.disk_bytes,
            max_files: self.policy.limits.files,
        };
        Ok(SandboxGuard::watching(CommandResources {
            cgroup,
            disk,
            _tmp: tmp,
        }))
    }
}

impl ProcessSandbox for OsSandbox {
    fn prepare(
        &self,
        cmd: &mut std::process::Command,
        ctx: &ToolContext,
    ) -> Result<SandboxGuard, ToolError> {
        let active = self.active();
        match active.prepare(cmd, ctx) {
            Err(failure) if failure.namespaces && self.fall_back(&active, &failure.what) => self
                .active()
                .prepare(cmd, ctx)
                .map_err(Failure::into_tool_error),
            prepared => prepared.map_err(Failure::into_tool_error),
        }
    }

    fn describe(&self) -> String {
        let policy = &self.active().policy;
        format!(
            "OS sandbox `{}`: {}",
            policy.mode.as_str(),
            policy.enforced().join("; ")
        )
    }

    fn enforcing(&self) -> bool {
        self.active().policy.mode != Mode::Off
    }

    fn explain_spawn_error(&self, error: &std::io::Error) -> Option<String> {
        let why = ns::explain(error)?;
        // The namespaces no longer set up: the host is probed again, and the next command
        // runs as that probe decides.
        let active = self.active();
        if self.fall_back(&active, &why) {
            return Some(format!(
                "{why}; the host was probed again and the next command runs without them: run the command again"
            ));
        }
        Some(why)
    }
}

/// What a command holds until it has ended. The cgroup goes first: its processes, and the
/// files they kept open in the temporary directory, are gone by then.
struct CommandResources {
    cgroup: Option<CommandCgroup>,
    disk: DiskWatch,
    /// Held for its `Drop`.
    _tmp: PrivateTmp,
}

impl CommandWatch for CommandResources {
    fn limits_hit(&self) -> Option<String> {
        self.cgroup.as_ref().and_then(CommandCgroup::limits_hit)
    }

    fn disk_watch(&self) -> Option<DiskWatch> {
        Some(self.disk.clone())
    }
}

/// A command's private temporary directory, removed when the command has ended, whatever
/// it left there: without recursion, so a tree of any depth cannot overflow the stack and
/// take the fabric down (issue #31).
struct PrivateTmp(PathBuf);

impl PrivateTmp {
    fn new() -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("fabric-tmp-").tempdir()?;
        Ok(Self(dir.keep()))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        match fabric_engine::fs::remove_tree(&self.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.0.display(), error = %e, "could not remove a command's private temp directory")
            }
        }
    }
}

/// Arms the parent-death signal: the process is killed when the fabric (`parent`) ends, even
/// by `kill -9`, instead of running on unwatched (issue #26: a command ran 25 s past its
/// timeout after the fabric was killed). The signal follows the thread that spawned, and
/// the fabric spawns from its runtime's worker threads, which live as long as it does.
/// A parent (when given) already gone before the call means the same: exit now.
pub(crate) fn die_with(parent: Option<rustix::process::Pid>) -> std::io::Result<()> {
    // SAFETY: prctl with integer arguments.
    let r = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if parent.is_some_and(|p| rustix::process::getppid() != Some(p)) {
        // SAFETY: `_exit` never returns; nothing of the fabric's must run in this child.
        unsafe { libc::_exit(137) };
    }
    Ok(())
}

/// Makes a process the fabric starts outside the sandbox (an MCP server) die with the
/// fabric, as every tool command does: the parent-death signal, armed before `exec`.
pub fn dies_with_the_fabric(cmd: &mut std::process::Command) {
    let parent = rustix::process::getpid();
    // SAFETY: the hook runs in the forked child before `exec` and only makes syscalls.
    unsafe {
        cmd.pre_exec(move || die_with(Some(parent)));
    }
}

/// Marks every descriptor above 2 close-on-exec: descriptors the fabric inherited from
/// whoever started it (issue #15) never reach a command, whatever the mode.
fn close_inherited() -> std::io::Result<()> {
    // SAFETY: close_range with integer arguments; CLOEXEC only flags descriptors.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3_u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Everything the child applies to itself, prepared in the parent.
struct ChildSetup {
    /// The fabric, whose end kills the command.
    parent: rustix::process::Pid,
    /// `cgroup.procs` of the command's cgroups, joined first (empty without cgroups).
    cgroups: Vec<i32>,
    limits: Vec<(Resource, u64)>,
    /// The namespace steps; empty without namespaces.
    namespaces: Vec<Step>,
    /// The ruleset (a second descriptor) and the access to grant beneath the mounts made
    /// inside the namespaces (`/proc` read, `/tmp` everything).
    inside_rules: Option<(OwnedFd, [(&'static std::ffi::CStr, u64); 2])>,
    drop_capabilities: bool,
    /// Taken by the one child this hook runs in (`restrict_self` consumes it).
    ruleset: Mutex<Option<RulesetCreated>>,
    filters: Vec<BpfProgram>,
}

impl ChildSetup {
    /// Runs in the child between fork and exec. Order matters: limits first, then the
    /// namespaces (they fork: the command runs in the second child, the first waits), then
    /// capabilities (mounting needed them), then Landlock (which also sets `no_new_privs`,
    /// required by seccomp), then seccomp last so the syscalls above are not filtered.
    fn apply(&self) -> std::io::Result<()> {
        // First, before anything that may fail or fork: the namespace steps may end in
        // `ns::fork_init`, whose waiting parent never comes back here.
        die_with(Some(self.parent))?;
        // Before anything that allocates or forks: every process of the command is counted.
        crate::cgroup::join(&self.cgroups)?;
        for (resource, value) in &self.limits {
            setrlimit(
                *resource,
                Rlimit {
                    current: Some(*value),
                    maximum: Some(*value),
                },
            )?;
        }
        close_inherited()?;
        ns::apply(&self.namespaces)?;
        if let Some((fd, rules)) = &self.inside_rules {
            for (path, access) in rules {
                ns::grant(fd.as_raw_fd(), path, *access)?;
            }
        }
        if self.drop_capabilities {
            drop_capabilities()?;
        }
        join_fresh_session_keyring();
        // A change of user (the namespace steps may switch to nobody) clears the setting:
        // armed again for the process that execs. Past `ns::fork_init` this is the first
        // process of the new PID namespace, whose parent (the process the fabric started,
        // armed above) has no pid here: armed without the check.
        die_with((self.namespaces.is_empty()).then_some(self.parent))?;
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
        for filter in &self.filters {
            seccompiler::apply_filter(filter)
                .map_err(|e| std::io::Error::other(format!("seccomp: {e}")))?;
        }
        Ok(())
    }
}

/// A new, empty session keyring for the command (issue #31): the fabric's own session
/// keyring, and what it holds, is no longer the command's to search or to list as its own.
/// Best effort: a kernel without keys support has nothing to hide, and a user at its key
/// quota (200 keys for a non-root user by default, so many commands at once) keeps the
/// old keyring, whose contents seccomp keeps out of reach anyway (`keyctl` is refused).
fn join_fresh_session_keyring() {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    // SAFETY: keyctl with a null name: the kernel makes an anonymous keyring.
    unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        );
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
    let mut rlimits = vec![
        (Resource::Cpu, limits.cpu_s),
        (Resource::As, limits.memory_bytes),
        (Resource::Fsize, limits.file_size_bytes),
        (Resource::Nofile, limits.open_files),
        (Resource::Core, 0),
    ];
    // The cgroup's `pids.max` counts this command's processes alone; `RLIMIT_NPROC` would
    // count every process of the uid (the commands of concurrent runs, all `nobody`) and
    // make one run's fork bomb fail another's forks (issue #31).
    if !policy.cgroups {
        rlimits.push((Resource::Nproc, limits.processes));
    }
    rlimits
}
