//! Namespaces for every tool process (issue #15, ADR-052): what Landlock and seccomp cannot
//! say, a fresh view of the system can.
//!
//! Between `fork` and `exec` the child leaves the fabric's namespaces: a new mount namespace
//! whose root is an empty tmpfs holding only the system directories, the `sandbox_read_paths`,
//! the run's workspace and a private `/tmp` (everything else on the host, its runlogs and home
//! directories included, does not exist there, so neither its names nor its metadata can be
//! reached); the whole tree read-only and `nosuid`, but for the workspace and `/tmp`; the
//! workspace's protected paths (`.git`, `.fabric`, …) mounted read-only over it; a new PID
//! namespace with its own `/proc` (host processes and their command lines are invisible, and
//! every descendant dies with the namespace's first process); a new IPC namespace (SysV and
//! POSIX IPC objects die with it); and a new network namespace when the network is off (no
//! interface but a downed loopback, no abstract socket shared with the host).
//!
//! An unprivileged fabric also gets a user namespace mapping only its own ids, which is what
//! lets it mount; a fabric running as root needs none (ADR-052 says why it does not map root
//! to another id) and instead masks the system files only root may read (`/etc/shadow`, host
//! keys) and drops every capability after the mounts.
//!
//! Every path and byte is prepared in the parent ([`Plan::steps`]); the child only makes
//! syscalls. A failed step is reported through the spawn error's code ([`explain`]).

use std::ffi::{CString, c_int};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// `MOUNT_ATTR_RDONLY` and `MOUNT_ATTR_NOSUID` of `mount_setattr(2)`.
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// `AT_RECURSIVE`: `mount_setattr` on a whole tree of mounts.
const AT_RECURSIVE: c_int = 0x8000;

/// Spawn errors of a failed setup step carry this tag, the step's kind and the errno.
const STEP_TAG: i32 = 0x4000_0000;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// One syscall-level step of the child's setup.
#[derive(Debug)]
pub(crate) enum Step {
    /// `unshare(flags)`.
    Unshare(c_int),
    /// Write `data` to `path` (`/proc/self/uid_map` and friends).
    Write { path: CString, data: Vec<u8> },
    /// Make every mount private, so nothing below propagates to the host.
    Private,
    /// An empty tmpfs at `target`.
    Tmpfs { target: CString, data: CString },
    /// `mkdir`, an existing directory is fine.
    Mkdir(CString),
    /// `symlink(target, link)`.
    Symlink { target: CString, link: CString },
    /// A recursive bind mount.
    Bind { source: CString, target: CString },
    /// Make `dir` the root: `chdir`, `pivot_root(".", ".")`, detach the old root.
    PivotInto(CString),
    /// Read-only and `nosuid` (recursively or for one mount).
    ReadOnly { path: CString, recursive: bool },
    /// Writable again (one mount; its sub-mounts stay read-only).
    Writable(CString),
    /// Fork: the parent waits and passes on the child's exit status, the child (the first
    /// process of the new PID namespace) goes on.
    ForkInit,
    /// A fresh `/proc` of the new PID namespace, read-only.
    MountProc,
    /// `chdir`.
    Chdir(CString),
}

impl Step {
    /// The step's kind number, encoded into a failed spawn's error.
    fn kind(&self) -> i32 {
        match self {
            Self::Unshare(_) => 1,
            Self::Write { .. } => 2,
            Self::Private => 3,
            Self::Tmpfs { .. } => 4,
            Self::Mkdir(_) => 5,
            Self::Symlink { .. } => 6,
            Self::Bind { .. } => 7,
            Self::PivotInto(_) => 8,
            Self::ReadOnly { .. } => 9,
            Self::Writable(_) => 10,
            Self::ForkInit => 11,
            Self::MountProc => 12,
            Self::Chdir(_) => 13,
        }
    }
}

/// What a step kind does, for messages.
fn kind_name(kind: i32) -> &'static str {
    match kind {
        1 => "creating the namespaces (unshare)",
        2 => "mapping the user namespace's ids",
        3 => "making the mounts private",
        4 => "mounting the new root (tmpfs)",
        5 => "creating a mount point",
        6 => "recreating a system symlink",
        7 => "bind-mounting a directory",
        8 => "switching to the new root (pivot_root)",
        9 => "making the tree read-only (mount_setattr)",
        10 => "making the workspace writable (mount_setattr)",
        11 => "starting the namespace's first process (fork)",
        12 => "mounting a fresh /proc",
        _ => "entering the workspace (chdir)",
    }
}

/// The message for a spawn error that a failed namespace step produced, if it is one.
pub(crate) fn explain(error: &io::Error) -> Option<String> {
    let code = error.raw_os_error()?;
    if code & STEP_TAG == 0 || code < 0 {
        return None;
    }
    let kind = (code >> 16) & 0x3f;
    let errno = code & 0xffff;
    Some(format!(
        "the sandbox's namespaces could not be set up: {} failed: {}",
        kind_name(kind),
        io::Error::from_raw_os_error(errno)
    ))
}

fn step_error(step: &Step, errno: io::Error) -> io::Error {
    let raw = errno.raw_os_error().unwrap_or(libc::EIO) & 0xffff;
    io::Error::from_raw_os_error(STEP_TAG | (step.kind() << 16) | raw)
}

fn cstr(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path holds a NUL byte"))
}

/// A top-level entry of the new root.
#[derive(Debug, Clone)]
enum Entry {
    /// A directory bound read-only from the host.
    Dir(PathBuf),
    /// A symlink recreated as it is on the host (`/bin -> usr/bin`).
    Link(PathBuf, PathBuf),
}

/// The host-wide part of the namespace setup, worked out once.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    entries: Vec<Entry>,
    /// Files and directories only root may read, masked when the fabric runs as root.
    masks: Vec<(PathBuf, bool)>,
    /// The ids to map in a user namespace; `None` when running as root (no user namespace).
    user: Option<(u32, u32)>,
    /// The empty directory the child mounts its new root on (each child in its own mount
    /// namespace, so one directory serves them all).
    newroot: Arc<tempfile::TempDir>,
}

/// The protected paths and the per-command parts of a setup.
pub(crate) struct Command<'a> {
    pub(crate) workspace: &'a Path,
    pub(crate) tmp: &'a Path,
    pub(crate) network: bool,
    pub(crate) protected: &'a [String],
}

impl Plan {
    /// The plan for this host: `system` directories (symlinks among them recreated), the
    /// extra `read_paths`, and for root the masks of root-only files under `/etc`.
    pub(crate) fn new(system: &[&str], read_paths: &[PathBuf], root: bool) -> io::Result<Self> {
        let mut entries = Vec::new();
        for dir in system {
            let path = PathBuf::from(dir);
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    entries.push(Entry::Link(path.clone(), std::fs::read_link(&path)?));
                }
                Ok(m) if m.is_dir() => entries.push(Entry::Dir(path)),
                _ => {}
            }
        }
        for path in read_paths {
            if let Ok(real) = path.canonicalize() {
                entries.push(Entry::Dir(real));
            }
        }
        let masks = if root {
            let mut masks = Vec::new();
            root_only(Path::new("/etc"), 0, &mut masks);
            masks
        } else {
            Vec::new()
        };
        let user = (!root).then(|| {
            (
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            )
        });
        let newroot = tempfile::Builder::new().prefix("fabric-root-").tempdir()?;
        Ok(Self {
            entries,
            masks,
            user,
            newroot: Arc::new(newroot),
        })
    }

    /// The steps that give one command its namespaces.
    pub(crate) fn steps(&self, cmd: &Command<'_>) -> io::Result<Vec<Step>> {
        let root = self.newroot.path();
        let inside = |p: &Path| -> PathBuf {
            let rel: PathBuf = p
                .components()
                .filter(|c| matches!(c, Component::Normal(_)))
                .collect();
            root.join(rel)
        };
        let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
        if !cmd.network {
            flags |= libc::CLONE_NEWNET;
        }
        if self.user.is_some() {
            flags |= libc::CLONE_NEWUSER;
        }
        let mut steps = vec![Step::Unshare(flags)];
        if let Some((uid, gid)) = self.user {
            steps.push(Step::Write {
                path: c"/proc/self/setgroups".to_owned(),
                data: b"deny".to_vec(),
            });
            steps.push(Step::Write {
                path: c"/proc/self/uid_map".to_owned(),
                data: format!("{uid} {uid} 1").into_bytes(),
            });
            steps.push(Step::Write {
                path: c"/proc/self/gid_map".to_owned(),
                data: format!("{gid} {gid} 1").into_bytes(),
            });
        }
        steps.push(Step::Private);
        steps.push(Step::Tmpfs {
            target: cstr(root)?,
            data: c"mode=0755,size=1m".to_owned(),
        });
        // Binds in path order, so a bind inside another lands on top of it.
        let mut binds: Vec<(PathBuf, PathBuf)> = Vec::new();
        for entry in &self.entries {
            match entry {
                Entry::Link(link, target) => steps.push(Step::Symlink {
                    target: cstr(target)?,
                    link: cstr(&inside(link))?,
                }),
                Entry::Dir(dir) => binds.push((dir.clone(), dir.clone())),
            }
        }
        binds.push((cmd.tmp.to_path_buf(), PathBuf::from("/tmp")));
        let workspace = cmd.workspace.canonicalize()?;
        binds.push((workspace.clone(), workspace.clone()));
        if workspace != cmd.workspace {
            binds.push((workspace.clone(), cmd.workspace.to_path_buf()));
        }
        for name in cmd.protected {
            let path = workspace.join(name);
            if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_symlink()) {
                binds.push((path.clone(), path));
            }
        }
        binds.sort_by_key(|(_, target)| target.components().count());
        let mut made = std::collections::HashSet::new();
        for (source, target) in &binds {
            let mut at = root.to_path_buf();
            let is_dir = source.is_dir();
            let parts: Vec<_> = target
                .components()
                .filter(|c| matches!(c, Component::Normal(_)))
                .collect();
            for (i, part) in parts.iter().enumerate() {
                at.push(part);
                let last = i + 1 == parts.len();
                if last && !is_dir {
                    // A file is bound onto an empty file made for it.
                    steps.push(Step::Write {
                        path: cstr(&at)?,
                        data: Vec::new(),
                    });
                } else if made.insert(at.clone()) {
                    steps.push(Step::Mkdir(cstr(&at)?));
                }
            }
            steps.push(Step::Bind {
                source: cstr(source)?,
                target: cstr(&inside(target))?,
            });
        }
        for (path, is_dir) in &self.masks {
            let target = cstr(&inside(path))?;
            steps.push(if *is_dir {
                Step::Tmpfs {
                    target,
                    data: c"mode=0000,size=4k".to_owned(),
                }
            } else {
                Step::Bind {
                    source: c"/dev/null".to_owned(),
                    target,
                }
            });
        }
        steps.push(Step::PivotInto(cstr(root)?));
        steps.push(Step::ReadOnly {
            path: c"/".to_owned(),
            recursive: true,
        });
        steps.push(Step::Writable(c"/tmp".to_owned()));
        steps.push(Step::Writable(cstr(&workspace)?));
        if workspace != cmd.workspace {
            steps.push(Step::Writable(cstr(cmd.workspace)?));
        }
        // The masks and protected paths were made read-only with the rest; they stay so.
        steps.push(Step::ForkInit);
        steps.push(Step::MountProc);
        steps.push(Step::Chdir(cstr(cmd.workspace)?));
        Ok(steps)
    }
}

/// Files and directories under `dir` that only root can read (no read bit for others):
/// what root's ownership would still give a process without capabilities.
fn root_only(dir: &Path, depth: usize, out: &mut Vec<(PathBuf, bool)>) {
    const MAX_DEPTH: usize = 4;
    const MAX_MASKS: usize = 256;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if out.len() >= MAX_MASKS {
            return;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let path = entry.path();
        let others = meta.mode() & 0o007;
        if meta.file_type().is_symlink() {
            continue;
        } else if meta.is_dir() {
            if others & 0o5 != 0o5 {
                out.push((path, true));
            } else if depth < MAX_DEPTH {
                root_only(&path, depth + 1, out);
            }
        } else if meta.is_file() && others & 0o4 == 0 {
            out.push((path, false));
        }
    }
}

fn check(result: libc::c_long) -> io::Result<()> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_int(result: c_int) -> io::Result<()> {
    check(libc::c_long::from(result))
}

/// Runs the steps in the child between fork and exec. Only syscalls: every argument was
/// prepared by [`Plan::steps`].
pub(crate) fn apply(steps: &[Step]) -> io::Result<()> {
    for step in steps {
        run(step).map_err(|e| step_error(step, e))?;
    }
    Ok(())
}

fn set_attr(path: &CString, flags: c_int, set: u64, clr: u64) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: `path` is a NUL-terminated string and `attr` a live `struct mount_attr` of the
    // size passed; the kernel only reads both.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    })
}

fn run(step: &Step) -> io::Result<()> {
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: each call gets NUL-terminated strings prepared in the parent (or null where
    // the syscall takes null), live buffers of the length passed, and descriptors it opened
    // itself; none keeps a pointer past the call.
    unsafe {
        match step {
            Step::Unshare(flags) => check_int(libc::unshare(*flags)),
            Step::Write { path, data } => {
                let fd = libc::open(
                    path.as_ptr(),
                    libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
                    0o644,
                );
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let written = libc::write(fd, data.as_ptr().cast(), data.len());
                libc::close(fd);
                if written < 0 || written.unsigned_abs() != data.len() {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            }
            Step::Private => check_int(libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )),
            Step::Tmpfs { target, data } => check_int(libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )),
            Step::Mkdir(path) => {
                if { libc::mkdir(path.as_ptr(), 0o755) } < 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(e);
                    }
                }
                Ok(())
            }
            Step::Symlink { target, link } => {
                check_int(libc::symlink(target.as_ptr(), link.as_ptr()))
            }
            Step::Bind { source, target } => check_int(libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                null,
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            )),
            Step::PivotInto(dir) => {
                check_int(libc::chdir(dir.as_ptr()))?;
                // pivot_root(".", ".") stacks the old root under the new one; detaching it leaves
                // only the new root (the trick runc and bubblewrap use: no directory needed).
                check(libc::syscall(
                    libc::SYS_pivot_root,
                    c".".as_ptr(),
                    c".".as_ptr(),
                ))?;
                check_int(libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
                check_int(libc::chdir(c"/".as_ptr()))
            }
            Step::ReadOnly { path, recursive } => set_attr(
                path,
                if *recursive { AT_RECURSIVE } else { 0 },
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID,
                0,
            ),
            Step::Writable(path) => set_attr(path, 0, 0, MOUNT_ATTR_RDONLY),
            Step::ForkInit => fork_init(),
            Step::MountProc => check_int(libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )),
            Step::Chdir(path) => check_int(libc::chdir(path.as_ptr())),
        }
    }
}

/// `struct landlock_path_beneath_attr`.
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: c_int,
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const LANDLOCK_RULE_PATH_BENEATH: c_int = 1;

/// Grants `access` beneath the fresh `/proc` to the Landlock ruleset `ruleset_fd`. The rule
/// the parent made for the host's `/proc` does not reach it: Landlock checks the mount on
/// top, not the directory it hides. Runs in the child after [`Step::MountProc`].
pub(crate) fn grant_proc(ruleset_fd: c_int, access: u64) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc".as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC | libc::O_DIRECTORY,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: fd,
    };
    // SAFETY: `attr` is a live `struct landlock_path_beneath_attr`; the kernel reads it.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset_fd,
            LANDLOCK_RULE_PATH_BENEATH,
            &raw const attr,
            0_u32,
        )
    };
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    check(r)
}

/// Forks the first process of the new PID namespace. The parent (the process the fabric
/// started and waits for) closes every descriptor, so the fabric's pipes end with the
/// command, waits, and ends the way the command ended; it never returns. The child dies
/// when the parent does (`PR_SET_PDEATHSIG`), and with it the whole namespace.
fn fork_init() -> io::Result<()> {
    // SAFETY: the caller is the single-threaded child of a fork; the new child only returns
    // into the same `pre_exec` hook, the parent only makes syscalls and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: prctl with integer arguments.
        check_int(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) })?;
        return Ok(());
    }
    // SAFETY: closing our own descriptors, including the spawn's error pipe (the child
    // keeps its copy: a failure after this point still reaches the fabric).
    unsafe { libc::syscall(libc::SYS_close_range, 0_u32, u32::MAX, 0_u32) };
    let mut status: c_int = 0;
    loop {
        // SAFETY: waiting for our own child into a live int.
        let r = unsafe { libc::waitpid(pid, &raw mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // SAFETY: `_exit` never returns.
            unsafe { libc::_exit(126) };
        }
    }
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: restoring the default action and raising the same signal on ourselves,
        // so the fabric sees the command's own death (SIGXCPU, SIGKILL, …).
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut set);
            libc::sigaddset(&raw mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &raw const set, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
    }
    // SAFETY: `_exit` never returns.
    unsafe { libc::_exit(libc::WEXITSTATUS(status)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_step_is_explained_and_other_errors_are_not() {
        let step = Step::Bind {
            source: c"/a".to_owned(),
            target: c"/b".to_owned(),
        };
        let err = step_error(&step, io::Error::from_raw_os_error(libc::EPERM));
        let text = explain(&err).unwrap();
        assert!(text.contains("bind-mounting a directory"), "{text}");
        assert!(text.contains("not permitted"), "{text}");
        assert!(explain(&io::Error::from_raw_os_error(libc::ENOENT)).is_none());
    }

    #[test]
    fn binds_come_parent_first_and_protected_paths_ride_on_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(".git")).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let plan = Plan::new(&["/usr", "/bin", "/etc"], &[], false).unwrap();
        let steps = plan
            .steps(&Command {
                workspace: ws.path(),
                tmp: tmp.path(),
                network: false,
                protected: &[".git".to_owned(), ".fabric".to_owned()],
            })
            .unwrap();
        let binds: Vec<String> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Bind { target, .. } => Some(target.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        let ws_at = binds
            .iter()
            .position(|b| b.ends_with(&ws.path().canonicalize().unwrap().display().to_string()))
            .unwrap();
        let git_at = binds.iter().position(|b| b.ends_with("/.git")).unwrap();
        let tmp_at = binds.iter().position(|b| b.ends_with("/tmp")).unwrap();
        assert!(tmp_at < ws_at && ws_at < git_at, "{binds:?}");
        assert!(!binds.iter().any(|b| b.ends_with(".fabric")), "{binds:?}");
        assert!(matches!(steps[0], Step::Unshare(f) if f & libc::CLONE_NEWNET != 0));
    }
}
