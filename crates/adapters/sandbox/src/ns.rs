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
//! lets it mount. A fabric running as root runs the command as `nobody` (65534) once the
//! mounts are made (ADR-053), so root's ownership of host files gives it nothing; the
//! workspace and `/tmp` are idmapped mounts on which root's files appear as `nobody`'s and
//! what the command writes lands as root's, as if root had written it. Where idmapped mounts
//! are not possible (a file system without support, no user namespaces for root) the command
//! stays root without capabilities, and the system files only root may read (`/etc/shadow`,
//! host keys) are masked in every case.
//!
//! Every path and byte is prepared in the parent ([`Plan::steps`]); the child only makes
//! syscalls. A failed step is reported through the spawn error's code ([`explain`]).

use std::collections::HashMap;
use std::ffi::{CString, c_int, c_uint};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// `MOUNT_ATTR_RDONLY` and `MOUNT_ATTR_NOSUID` of `mount_setattr(2)`.
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
/// `MOUNT_ATTR_IDMAP`: the mount shows its files' owners through a user namespace's map.
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
/// `AT_RECURSIVE`: `mount_setattr` on a whole tree of mounts.
const AT_RECURSIVE: c_int = 0x8000;
/// `OPEN_TREE_CLONE` of `open_tree(2)`: a detached copy of the mount tree.
const OPEN_TREE_CLONE: c_uint = 1;
/// `MOVE_MOUNT_F_EMPTY_PATH` of `move_mount(2)`: the source is the descriptor itself.
const MOVE_MOUNT_F_EMPTY_PATH: c_uint = 0x4;

/// The ids a root fabric's commands run as: `nobody` and `nogroup` on Debian and most
/// distributions, owning no file of the host.
pub(crate) const NOBODY: u32 = 65534;

/// The idmapping of the workspace and `/tmp` for commands run as [`NOBODY`]: root and
/// `nobody` swap places, every other id is itself. Files root owns appear as the command's,
/// and files the command makes are stored as root's.
const SWAP_MAP: &str = "0 65534 1\n1 1 65533\n65534 0 1\n65535 65535 4294901760\n";

/// The keyring listings of `/proc`, masked in a command's fresh `/proc`.
const PROC_KEYS: &[&str] = &["/proc/keys", "/proc/key-users"];

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
    /// A recursive bind mount whose owners are shown through the idmap user namespace
    /// `userns` (`open_tree`, `mount_setattr(MOUNT_ATTR_IDMAP)`, `move_mount`).
    IdmapBind {
        source: CString,
        target: CString,
        userns: c_int,
    },
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
    /// Become `uid`/`gid` with no supplementary groups; leaving uid 0 empties the
    /// capability sets. `SECBIT_NOROOT` (locked) is set first, while it still may be.
    SetIds { uid: u32, gid: u32 },
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
            Self::IdmapBind { .. } => 14,
            Self::SetIds { .. } => 15,
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
        13 => "entering the workspace (chdir)",
        14 => {
            "mounting the workspace with root's files shown as nobody's (idmapped mount; the file system may not support it)"
        }
        _ => "switching to the unprivileged user nobody (setresuid)",
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
    /// Root only: the user namespace whose map ([`SWAP_MAP`]) idmaps the writable mounts,
    /// so commands can run as [`NOBODY`]. `None` for a non-root fabric, or where it could
    /// not be made.
    idmap: Option<Arc<OwnedFd>>,
    /// The empty directory the child mounts its new root on (each child in its own mount
    /// namespace, so one directory serves them all).
    newroot: Arc<tempfile::TempDir>,
}

/// The protected paths and the per-command parts of a setup.
pub(crate) struct Command<'a> {
    pub(crate) workspace: &'a Path,
    /// Bytes and files (inodes) the private `/tmp` holds at most.
    pub(crate) tmp_bytes: u64,
    pub(crate) tmp_files: u64,
    pub(crate) network: bool,
    pub(crate) protected: &'a [String],
}

impl Plan {
    /// The plan for this host: `system` directories (symlinks among them recreated), the
    /// extra `read_paths`, and for root the masks of root-only files under `/etc` and, with
    /// `unprivileged`, commands run as [`NOBODY`] on idmapped mounts.
    pub(crate) fn new(
        system: &[&str],
        read_paths: &[PathBuf],
        root: bool,
        unprivileged: bool,
    ) -> io::Result<Self> {
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
        let idmap = if root && unprivileged {
            Some(swap_userns()?)
        } else {
            None
        };
        Ok(Self {
            entries,
            masks,
            user,
            idmap,
            newroot: Arc::new(newroot),
        })
    }

    /// [`Plan::new`], made once per process for each set of arguments and shared: a plan
    /// walks `/etc`, makes a directory and (root) a user namespace, which a run need not
    /// pay for again.
    pub(crate) fn shared(
        system: &[&str],
        read_paths: &[PathBuf],
        root: bool,
        unprivileged: bool,
    ) -> io::Result<Self> {
        type Key = (Vec<String>, Vec<PathBuf>, bool, bool);
        static PLANS: OnceLock<Mutex<HashMap<Key, Plan>>> = OnceLock::new();
        let key: Key = (
            system.iter().map(|s| (*s).to_owned()).collect(),
            read_paths.to_vec(),
            root,
            unprivileged,
        );
        // Made under the lock: commands starting at once wait for one plan instead of
        // each making their own.
        let mut plans = PLANS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(plan) = plans.get(&key) {
            return Ok(plan.clone());
        }
        let plan = Self::new(system, read_paths, root, unprivileged)?;
        plans.insert(key, plan.clone());
        Ok(plan)
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
        let workspace = cmd.workspace.canonicalize()?;
        // The command runs as nobody only where both writable mounts can be idmapped.
        let idmap = self
            .idmap
            .as_ref()
            .filter(|_| idmap_supported(&workspace))
            .map(|fd| fd.as_raw_fd());
        // Binds in path order, so a bind inside another lands on top of it. The third field
        // says whether the bind is idmapped (the workspace, its protected paths and /tmp).
        let mut binds: Vec<(PathBuf, PathBuf, bool)> = Vec::new();
        for entry in &self.entries {
            match entry {
                Entry::Link(link, target) => steps.push(Step::Symlink {
                    target: cstr(target)?,
                    link: cstr(&inside(link))?,
                }),
                Entry::Dir(dir) => binds.push((dir.clone(), dir.clone(), false)),
            }
        }
        // The private /tmp is a tmpfs of its own, sized (issue #31): a cap the kernel keeps
        // exactly, counted in the command's memory cgroup, gone with the namespace (nothing
        // for the fabric to remove). Mounted before the binds, so a workspace under /tmp
        // lands on top of it.
        let tmp = inside(Path::new("/tmp"));
        steps.push(Step::Mkdir(cstr(&tmp)?));
        steps.push(Step::Tmpfs {
            target: cstr(&tmp)?,
            data: CString::new(format!(
                "mode=1777,size={},nr_inodes={}",
                cmd.tmp_bytes.max(4096),
                cmd.tmp_files.max(16)
            ))
            .map_err(io::Error::other)?,
        });
        binds.push((workspace.clone(), workspace.clone(), true));
        if workspace != cmd.workspace {
            binds.push((workspace.clone(), cmd.workspace.to_path_buf(), true));
        }
        for name in cmd.protected {
            let path = workspace.join(name);
            if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.file_type().is_symlink()) {
                binds.push((path.clone(), path, true));
            }
        }
        binds.sort_by_key(|(_, target, _)| target.components().count());
        let mut made = std::collections::HashSet::new();
        for (source, target, mapped) in &binds {
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
            let (source, target) = (cstr(source)?, cstr(&inside(target))?);
            steps.push(match idmap {
                Some(userns) if *mapped => Step::IdmapBind {
                    source,
                    target,
                    userns,
                },
                _ => Step::Bind { source, target },
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
        // The keys of every keyring the command's uid may view, by name (issue #31); the
        // calls that read their contents are refused by seccomp anyway.
        for listing in PROC_KEYS {
            if Path::new(listing).exists() {
                steps.push(Step::Bind {
                    source: c"/dev/null".to_owned(),
                    target: CString::new(*listing).map_err(io::Error::other)?,
                });
            }
        }
        if idmap.is_some() {
            steps.push(Step::SetIds {
                uid: NOBODY,
                gid: NOBODY,
            });
        }
        steps.push(Step::Chdir(cstr(cmd.workspace)?));
        Ok(steps)
    }
}

/// Whether these steps switch the command to [`NOBODY`] (a root fabric whose workspace and
/// `/tmp` can be idmapped).
pub(crate) fn drops_root(steps: &[Step]) -> bool {
    steps.iter().any(|s| matches!(s, Step::SetIds { .. }))
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
            Step::IdmapBind {
                source,
                target,
                userns,
            } => idmap_bind(source, target, *userns),
            Step::SetIds { uid, gid } => {
                check_int(libc::prctl(
                    libc::PR_SET_SECUREBITS,
                    // SECBIT_NOROOT | SECBIT_NOROOT_LOCKED
                    0x3 as libc::c_ulong,
                    0,
                    0,
                    0,
                ))?;
                check_int(libc::setgroups(0, std::ptr::null()))?;
                check_int(libc::setresgid(*gid, *gid, *gid))?;
                check_int(libc::setresuid(*uid, *uid, *uid))
            }
        }
    }
}

/// Mounts a copy of `source`'s tree at `target`, its owners shown through `userns`'s map.
fn idmap_bind(source: &CString, target: &CString, userns: c_int) -> io::Result<()> {
    // SAFETY: NUL-terminated paths; the descriptor returned is closed below.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as c_uint | AT_RECURSIVE as c_uint,
        )
    };
    check(tree)?;
    let tree = c_int::try_from(tree).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: u64::try_from(userns).unwrap_or(u64::MAX),
    };
    // SAFETY: `tree` is the descriptor opened above, "" a NUL-terminated path, `attr` a live
    // `struct mount_attr` of the size passed; the kernel only reads them.
    let set = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | AT_RECURSIVE,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    let moved = check(set).and_then(|()| {
        // SAFETY: as above; `target` is a NUL-terminated path.
        check(unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                tree,
                c"".as_ptr(),
                libc::AT_FDCWD,
                target.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        })
    });
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(tree) };
    moved
}

/// A user namespace with [`SWAP_MAP`] for uids and gids, held by a descriptor: a child
/// enters a new user namespace, the parent writes its maps and opens it, the child exits.
/// The child only makes syscalls, as it must after forking a multi-threaded process.
fn swap_userns() -> io::Result<Arc<OwnedFd>> {
    // One at a time: a child forked here keeps, until it exits, a copy of every descriptor
    // the process had, so two children made at once would each hold the other's release
    // pipe open and neither would ever see its end (found when the namespace plan became
    // lazy and two commands made it at once, issue #26).
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let pipe = || -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0 as c_int; 2];
        // SAFETY: `fds` is a live array of two ints for the kernel to fill.
        check_int(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
        // SAFETY: both descriptors were just opened and are owned by nothing else.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    };
    let (ready_r, ready_w) = pipe()?;
    let (release_r, release_w) = pipe()?;
    // SAFETY: the child below only calls unshare, write, read and _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: async-signal-safe syscalls on descriptors inherited from the parent. The
        // child closes its copies of the ends it does not use, so the parent's close of the
        // release pipe reaches it as end of file.
        unsafe {
            // Never outlives the fabric, whatever happens to it meanwhile.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            libc::close(release_w.as_raw_fd());
            libc::close(ready_r.as_raw_fd());
            let ok = u8::from(libc::unshare(libc::CLONE_NEWUSER) == 0);
            libc::write(ready_w.as_raw_fd(), (&raw const ok).cast(), 1);
            let mut byte = 0_u8;
            libc::read(release_r.as_raw_fd(), (&raw mut byte).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(ready_w);
    drop(release_r);
    let made = (|| {
        let mut ok = 0_u8;
        // SAFETY: reading one byte into a live u8.
        let n = unsafe { libc::read(ready_r.as_raw_fd(), (&raw mut ok).cast(), 1) };
        if n != 1 || ok != 1 {
            return Err(io::Error::other(
                "a user namespace for the idmapped mounts could not be created",
            ));
        }
        std::fs::write(format!("/proc/{pid}/uid_map"), SWAP_MAP)?;
        std::fs::write(format!("/proc/{pid}/gid_map"), SWAP_MAP)?;
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
        Ok(Arc::new(OwnedFd::from(ns)))
    })();
    drop(release_w);
    let mut status = 0;
    // SAFETY: reaping our own child into a live int.
    unsafe { libc::waitpid(pid, &raw mut status, 0) };
    made
}

/// Whether the file system holding `path` can be idmapped, tried once per file system by
/// idmapping `path` onto itself in a throwaway mount namespace.
fn idmap_supported(path: &Path) -> bool {
    static SEEN: OnceLock<Mutex<HashMap<u64, bool>>> = OnceLock::new();
    let Ok(dev) = std::fs::metadata(path).map(|m| m.dev()) else {
        return false;
    };
    let seen = SEEN.get_or_init(Default::default);
    if let Some(known) = seen.lock().ok().and_then(|m| m.get(&dev).copied()) {
        return known;
    }
    let works = try_idmap(path).inspect_err(|e| {
        tracing::warn!(path = %path.display(), error = %e, "idmapped mounts do not work here: commands on this file system run as root without capabilities instead of as nobody");
    });
    let works = works.is_ok();
    if let Ok(mut map) = seen.lock() {
        map.insert(dev, works);
    }
    works
}

fn try_idmap(path: &Path) -> io::Result<()> {
    use std::os::unix::process::CommandExt;
    let userns = swap_userns()?;
    let at = cstr(path)?;
    let steps = vec![
        Step::Unshare(libc::CLONE_NEWNS),
        Step::Private,
        Step::IdmapBind {
            source: at.clone(),
            target: at,
            userns: userns.as_raw_fd(),
        },
    ];
    let program = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or_else(|| io::Error::other("no `true` program to try it on"))?;
    let mut cmd = std::process::Command::new(program);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the hook only makes the syscalls of `apply` on data prepared above.
    unsafe {
        cmd.pre_exec(move || apply(&steps));
    }
    let status = cmd
        .status()
        .map_err(|e| explain(&e).map_or(e, io::Error::other))?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "the idmap probe ended with {status}"
        )))
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

/// Grants `access` beneath `path`, a mount made inside the namespaces (the fresh `/proc`,
/// the private `/tmp`), to the Landlock ruleset `ruleset_fd`. The rules the parent made do
/// not reach it: Landlock checks the mount on top, not the directory it hides. Runs in the
/// child once the namespace steps are done.
pub(crate) fn grant(ruleset_fd: c_int, path: &std::ffi::CStr, access: u64) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
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
    // Armed again, in case a step before changed the user (which clears it): this process
    // must die with the fabric, and with it the namespace (issue #26).
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
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

    /// Two plans made at once (a lazy plan, two commands starting together) each forked a
    /// child holding the other's release pipe: both waited forever.
    #[test]
    fn user_namespaces_for_idmaps_can_be_made_from_many_threads_at_once() {
        if !rustix::process::geteuid().is_root() || swap_userns().is_err() {
            eprintln!("SKIP: needs root with user namespaces");
            return;
        }
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        for _ in 0..4 {
            let done = done_tx.clone();
            std::thread::spawn(move || {
                for _ in 0..25 {
                    swap_userns().unwrap();
                }
                let _ = done.send(());
            });
        }
        for _ in 0..4 {
            done_rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("every thread made its namespaces within 60 s");
        }
    }

    #[test]
    fn binds_come_parent_first_and_protected_paths_ride_on_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(".git")).unwrap();
        let plan = Plan::new(&["/usr", "/bin", "/etc"], &[], false, false).unwrap();
        let steps = plan
            .steps(&Command {
                workspace: ws.path(),
                tmp_bytes: 1 << 20,
                tmp_files: 100,
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
        assert!(ws_at < git_at, "{binds:?}");
        // The sized tmpfs at /tmp comes before every bind, so a workspace under /tmp lands
        // on top of it.
        let tmp_at = steps
            .iter()
            .position(|s| {
                matches!(s, Step::Tmpfs { target, data } if target.to_string_lossy().ends_with("/tmp")
                    && data.to_string_lossy().contains("size=1048576,nr_inodes=100"))
            })
            .unwrap();
        let first_bind = steps
            .iter()
            .position(|s| matches!(s, Step::Bind { .. }))
            .unwrap();
        assert!(tmp_at < first_bind, "{steps:?}");
        assert!(!binds.iter().any(|b| b.ends_with(".fabric")), "{binds:?}");
        assert!(matches!(steps[0], Step::Unshare(f) if f & libc::CLONE_NEWNET != 0));
    }
}
