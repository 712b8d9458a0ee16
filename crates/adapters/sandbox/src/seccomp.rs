//! The seccomp filter: a denylist that returns `EPERM`, built in the parent, installed in
//! the child.
//!
//! Why a denylist and not an allowlist: the programs are arbitrary (compilers, test
//! binaries, interpreters) and Landlock already confines files; seccomp's job here is what
//! Landlock does not cover: socket families (UDP, raw, netlink, packet), and syscalls that
//! reach the kernel's attack surface or other processes.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::SandboxError;

/// Syscalls no confined tool needs; each reaches other processes, the kernel's configuration
/// or a way around Landlock and the socket rules (`io_uring` can open sockets and files
/// without the syscalls seccomp sees).
const DENIED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_userfaultfd,
    libc::SYS_acct,
    libc::SYS_quotactl,
    // The descriptor form of `quotactl` (issue #31: it was left open beside it).
    libc::SYS_quotactl_fd,
    libc::SYS_syslog,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_fsconfig,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    // Leaving the process group would let a process outlive the timeout's group kill.
    libc::SYS_setsid,
];

/// Denied when the command has no namespaces of its own (issue #15): a new process group
/// escapes the group kill, and SysV and POSIX IPC objects outlive the command and reach the
/// host's (a new PID and IPC namespace makes all of them harmless, so they stay allowed there).
const DENIED_WITHOUT_NAMESPACES: &[libc::c_long] = &[
    libc::SYS_setpgid,
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmctl,
    libc::SYS_shmdt,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
    libc::SYS_mq_open,
    libc::SYS_mq_unlink,
    libc::SYS_mq_timedsend,
    libc::SYS_mq_timedreceive,
    libc::SYS_mq_notify,
    libc::SYS_mq_getsetattr,
    // Calls that reach another process by pid or pidfd with no more than a matching uid
    // (issue #31); in a PID namespace only the command's own processes are in reach.
    libc::SYS_kcmp,
    libc::SYS_pidfd_getfd,
    libc::SYS_process_madvise,
    // fanotify watches whole mounts and file systems, beyond what Landlock scopes.
    libc::SYS_fanotify_init,
];

/// Without namespaces, calls that take a pid are allowed only on the caller itself (pid
/// 0), so a command cannot lower another process's limits, priority, scheduling, CPU
/// affinity, I/O priority or memory placement (issue #31: `prlimit64` needs no more than a
/// matching uid). Each entry: the call and the argument holding the pid.
const SELF_ONLY: &[(libc::c_long, u8)] = &[
    (libc::SYS_prlimit64, 0),
    (libc::SYS_sched_setscheduler, 0),
    (libc::SYS_sched_setparam, 0),
    (libc::SYS_sched_setaffinity, 0),
    (libc::SYS_sched_setattr, 0),
    (libc::SYS_migrate_pages, 0),
    (libc::SYS_move_pages, 0),
];

/// `setpriority(which, who, prio)` and `ioprio_set(which, who, prio)`: `who` must be 0
/// (the caller, its process group or its user), and `which` must not name the user (every
/// process of the uid): `PRIO_USER` and `IOPRIO_WHO_USER`.
const SELF_OR_GROUP: &[(libc::c_long, u64)] = &[
    (libc::SYS_setpriority, 2), // PRIO_USER
    (libc::SYS_ioprio_set, 3),  // IOPRIO_WHO_USER
];

/// Answered `ENOSYS`, so libc and programs fall back to a call the filter can inspect:
/// `clone3` (its flags sit behind a pointer; glibc falls back to `clone`) and `openat2` (its
/// mode too; callers fall back to `openat`).
const NOT_IMPLEMENTED: &[libc::c_long] = &[libc::SYS_clone3, libc::SYS_openat2];

/// Also answered `ENOSYS` without namespaces: inotify reports the names of files made
/// anywhere the command can look up, live (issue #31), and Landlock does not scope watches.
/// Programs take `ENOSYS` as "no inotify here" and poll instead (`tail -f` does).
const NOT_IMPLEMENTED_WITHOUT_NAMESPACES: &[libc::c_long] = &[libc::SYS_inotify_init1];

/// Answered `EOPNOTSUPP` ("this filesystem has no extended attributes"), which `cp -a`,
/// `tar` and `rsync` take in their stride: setting extended attributes and POSIX ACLs, which
/// Landlock does not cover outside the workspace.
const NO_XATTRS: &[libc::c_long] = &[
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    SYS_SETXATTRAT,
    SYS_REMOVEXATTRAT,
];

/// `setxattrat` and `removexattrat` (Linux 6.13), not yet in every libc.
const SYS_SETXATTRAT: libc::c_long = 463;
const SYS_REMOVEXATTRAT: libc::c_long = 466;

/// The `CLONE_NEW*` flags `clone` must not carry (`unshare` and `setns` are denied whole).
const CLONE_NAMESPACES: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

/// Mode bits no file the command creates or changes may get: a setuid or setgid file left in
/// the workspace would run with the fabric user's rights (root's, often) when someone runs it
/// later outside the sandbox.
const SET_ID_BITS: &[u32] = &[libc::S_ISUID, libc::S_ISGID];

/// `SOCK_RAW` and `SOCK_PACKET`, matched on the type's low bits (flags live above them).
const SOCK_TYPE_MASK: u64 = 0xf;
/// The obsolete `SOCK_PACKET` type (libc deprecates the constant, the kernel still takes it).
const SOCK_PACKET: i32 = 10;

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(build)
}

fn build(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Build(format!("seccomp: {e}"))
}

fn whole(calls: &[libc::c_long]) -> BTreeMap<i64, Vec<SeccompRule>> {
    calls.iter().map(|nr| (*nr, Vec::new())).collect()
}

/// One rule per flag: the call is refused when `arg` has any of `flags` set.
fn any_flag(arg: u8, flags: impl Iterator<Item = u64>) -> Result<Vec<SeccompRule>, SandboxError> {
    flags
        .map(|flag| {
            SeccompRule::new(vec![cond(arg, SeccompCmpOp::MaskedEq(flag), flag)?]).map_err(build)
        })
        .collect()
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, SandboxError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(build)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno.unsigned_abs()),
        arch,
    )
    .map_err(build)?;
    filter.try_into().map_err(build)
}

/// The compiled filters, installed in this order (seccomp runs every one; a call refused by
/// any is refused). With `network` false every socket but `AF_UNIX` is refused; with it true
/// `AF_INET`/`AF_INET6` are allowed too, never raw or packet sockets. Without `namespaces`
/// the calls of [`DENIED_WITHOUT_NAMESPACES`] are refused too.
///
/// Compiled once per process for each of the four combinations: every command of every run
/// installs the same programs, and compiling them is a good part of a command's setup.
pub(crate) fn filters(network: bool, namespaces: bool) -> Result<Vec<BpfProgram>, SandboxError> {
    static COMPILED: [std::sync::OnceLock<Vec<BpfProgram>>; 4] =
        [const { std::sync::OnceLock::new() }; 4];
    let slot = &COMPILED[usize::from(network) * 2 + usize::from(namespaces)];
    if let Some(programs) = slot.get() {
        return Ok(programs.clone());
    }
    let programs = compile_all(network, namespaces)?;
    Ok(slot.get_or_init(|| programs).clone())
}

fn compile_all(network: bool, namespaces: bool) -> Result<Vec<BpfProgram>, SandboxError> {
    let mut rules = whole(DENIED);
    let mut not_implemented = whole(NOT_IMPLEMENTED);
    if !namespaces {
        rules.extend(whole(DENIED_WITHOUT_NAMESPACES));
        for (call, arg) in SELF_ONLY {
            rules.insert(
                *call,
                vec![SeccompRule::new(vec![cond(*arg, SeccompCmpOp::Ne, 0)?]).map_err(build)?],
            );
        }
        for (call, user) in SELF_OR_GROUP {
            rules.insert(
                *call,
                vec![
                    SeccompRule::new(vec![cond(1, SeccompCmpOp::Ne, 0)?]).map_err(build)?,
                    SeccompRule::new(vec![cond(0, SeccompCmpOp::Eq, *user)?]).map_err(build)?,
                ],
            );
        }
        not_implemented.extend(whole(NOT_IMPLEMENTED_WITHOUT_NAMESPACES));
        #[cfg(target_arch = "x86_64")]
        not_implemented.insert(libc::SYS_inotify_init, Vec::new());
    }
    let clone_flags = CLONE_NAMESPACES.iter().map(|f| u64::from(f.unsigned_abs()));
    rules.insert(libc::SYS_clone, any_flag(0, clone_flags)?);
    let set_id = || SET_ID_BITS.iter().map(|b| u64::from(*b));
    // The mode is the second argument of chmod and fchmod, the third of fchmodat(2), mkdirat
    // and mknodat, the fourth of openat; open, creat, mkdir and mknod take it second or third.
    let mut modes = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (libc::SYS_fchmodat2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mknodat, 2),
    ];
    // The legacy calls only some architectures still have.
    #[cfg(target_arch = "x86_64")]
    modes.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_creat, 1),
        (libc::SYS_open, 2),
        (libc::SYS_mknod, 1),
    ]);
    for (call, arg) in modes {
        rules.insert(call, any_flag(arg, set_id())?);
    }
    let unix = u64::from(libc::AF_UNIX.unsigned_abs());
    let mut family = vec![cond(0, SeccompCmpOp::Ne, unix)?];
    if network {
        for allowed in [libc::AF_INET, libc::AF_INET6] {
            family.push(cond(
                0,
                SeccompCmpOp::Ne,
                u64::from(allowed.unsigned_abs()),
            )?);
        }
    }
    // Conditions of one rule are ANDed, rules of one syscall ORed.
    let mut socket = vec![SeccompRule::new(family).map_err(build)?];
    for kind in [libc::SOCK_RAW, SOCK_PACKET] {
        socket.push(
            SeccompRule::new(vec![cond(
                1,
                SeccompCmpOp::MaskedEq(SOCK_TYPE_MASK),
                u64::from(kind.unsigned_abs()),
            )?])
            .map_err(build)?,
        );
    }
    rules.insert(libc::SYS_socket, socket);
    Ok(vec![
        compile(rules, libc::EPERM)?,
        compile(not_implemented, libc::ENOSYS)?,
        compile(whole(NO_XATTRS), libc::EOPNOTSUPP)?,
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_filter_compiles() {
        for network in [false, true] {
            for namespaces in [false, true] {
                let filters = super::filters(network, namespaces).unwrap();
                assert_eq!(filters.len(), 3);
                assert!(filters.iter().all(|f| !f.is_empty()));
            }
        }
    }
}
