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

/// The compiled filter. With `network` false every socket but `AF_UNIX` is refused; with
/// it true `AF_INET`/`AF_INET6` are allowed too, never raw or packet sockets.
pub(crate) fn filter(network: bool) -> Result<BpfProgram, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|nr| (*nr, Vec::new())).collect();
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
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(build)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM.unsigned_abs()),
        arch,
    )
    .map_err(build)?;
    filter.try_into().map_err(build)
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_filters_compile() {
        assert!(!super::filter(false).unwrap().is_empty());
        assert!(!super::filter(true).unwrap().is_empty());
    }
}
