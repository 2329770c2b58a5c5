"""The system-call filter of one finding's process (worker side, no torch).

Namespaces and Landlock leave parts of the kernel reachable that a finding never needs
and that reach past them: keyrings are not namespaced by bubblewrap (the caller's
session keyring, where CI runners keep tokens, is inherited), `connect` on a pathname
unix socket is outside Landlock ABI 7, and io_uring, userfaultfd, bpf or a new user
namespace are kernel attack surface of their own. So each finding's process installs a
seccomp filter (a deny list compiled by libseccomp through `pyseccomp`; default: allow)
that refuses with EPERM:

* new processes and programs: `fork`, `vfork`, `clone` without CLONE_THREAD, `execve`,
  `execveat` (threads are allowed; `clone3`, whose flags a filter cannot read, answers
  ENOSYS, so the C library falls back to `clone`). A finding is one process, so its
  address-space limit bounds all the memory it holds, and nothing it starts outlives it;
* sockets: `socket` for every family (a pair from `socketpair` reaches nothing outside);
  the filter of a rank of a 2-process finding (`rank_bpf`) allows `socket` for TCP over
  AF_INET/AF_INET6 and AF_NETLINK's NETLINK_ROUTE only (what gloo's TCP transport needs:
  its pairs, and `getifaddrs` for GLOO_SOCKET_IFNAME=lo), every other family, type
  (UDP, raw, SCTP) and netlink protocol still EPERM; such
  a rank runs only where the sandbox's network namespace has nothing but its own loopback,
  and Landlock bounds its TCP ports (`confine.landlock`);
* keyrings: `add_key`, `request_key`, `keyctl`;
* io_uring, userfaultfd, `ptrace`, `process_vm_readv/writev`, `pidfd_getfd`, `bpf`,
  `perf_event_open`;
* mounts and namespaces: `mount`, `umount2`, `pivot_root`, `chroot`, the new mount API
  (`fsopen`, `fsmount`, `fsconfig`, `fspick`, `open_tree`, `move_mount`, `mount_setattr`),
  `unshare`, `setns`, and `clone` with any CLONE_NEW* flag;
* the administrator's calls (kernel modules, kexec, reboot, swap, clocks, quotas,
  `open_by_handle_at`, the terminal's TIOCSTI/TIOCLINUX ioctls).

A system call from another architecture's table (i386's `int 0x80`, x32) kills the
process: the filter is written for the native one. The worker compiles both programs
once (`build`); each forked child installs those bytes with `prctl` (`install`), so no
library code runs between fork and the experiment. What a deny list leaves open is the
rest of the ordinary system-call surface (docs/verifier.md, "what is left open").
"""
from __future__ import annotations

import ctypes
import errno
import os
import tempfile
from typing import Any, Dict, List, Optional, Tuple

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

CLONE_THREAD = 0x00010000
#: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
CLONE_NEW_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

#: refused outright (EPERM); a name this libseccomp does not know is left out (and listed)
DENIED = (
    # processes and programs
    "fork", "vfork", "execve", "execveat",
    # sockets
    "socket",
    # keyrings
    "add_key", "request_key", "keyctl",
    # io_uring, userfaultfd, other processes' memory, bpf
    "io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "bpf", "perf_event_open",
    # mounts and namespaces
    "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
    "open_tree", "move_mount", "mount_setattr", "unshare", "setns",
    # the administrator's
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "syslog", "acct", "quotactl", "quotactl_fd", "open_by_handle_at",
    "name_to_handle_at", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "iopl", "ioperm", "lookup_dcookie", "nfsservctl", "uselib", "vhangup",
)


class SeccompUnavailable(Exception):
    """The filter cannot be built here (no libseccomp, no pyseccomp, or the kernel refuses)."""


class Program:
    """A compiled filter: the BPF bytes, what it refuses, and the system-call numbers the
    child needs before it installs them (`keyctl`, for a fresh session keyring); `rank_bpf`
    is the same filter with `socket` allowed for the families gloo needs (`RANK_FAMILIES`)."""

    def __init__(self, bpf: bytes, denied: List[str], unknown: List[str], numbers: Dict[str, int], rank_bpf: Optional[bytes] = None) -> None:
        self.bpf = bpf
        self.denied = denied
        self.unknown = unknown
        self.numbers = numbers
        self.rank_bpf = rank_bpf


#: AF_INET, AF_INET6, AF_NETLINK: the only `socket` families of a rank (NETLINK_ROUTE only)
AF_INET, AF_INET6, AF_NETLINK = 2, 10, 16
RANK_FAMILIES = (AF_INET, AF_INET6, AF_NETLINK)
SOCK_STREAM, IPPROTO_TCP = 1, 6
#: families are small numbers (AF_MAX is 46 in Linux 6.x); every value from here up is refused
_FAMILY_CEILING = 64


def build() -> Program:
    """Compile the filters (a finding's, a rank's) for this machine's architecture;
    SeccompUnavailable saying why not."""
    try:
        import pyseccomp as sc
    except ImportError:
        raise SeccompUnavailable("pyseccomp is not installed (pip install pyseccomp)") from None
    except (OSError, RuntimeError) as exc:  # pyseccomp found no libseccomp
        raise SeccompUnavailable(f"libseccomp is not available ({exc}; apt-get install libseccomp2)") from None
    bpf, denied, unknown, numbers = _compile(sc, rank=False)
    rank_bpf = _compile(sc, rank=True)[0]
    return Program(bpf, denied, unknown, numbers, rank_bpf)


def _compile(sc: Any, rank: bool) -> Tuple[bytes, List[str], List[str], Dict[str, int]]:
    """(BPF bytes, refused, unknown to libseccomp, system-call numbers) of one filter."""
    try:
        f = sc.SyscallFilter(defaction=sc.ALLOW)
        f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
        deny = sc.ERRNO(errno.EPERM)
        denied: List[str] = []
        unknown: List[str] = []
        for name in DENIED:
            if rank and name == "socket":
                continue
            try:
                f.add_rule(deny, name)
                denied.append(name)
            except (OSError, ValueError, RuntimeError):
                unknown.append(name)
        if rank:
            # socket(family, ...): one rule per refused family (libseccomp takes one comparison
            # per argument and rule); the 64-bit compare also refuses a family with high bits set
            for family in range(_FAMILY_CEILING):
                if family not in RANK_FAMILIES:
                    f.add_rule(deny, "socket", sc.Arg(0, sc.EQ, family))
            f.add_rule(deny, "socket", sc.Arg(0, sc.GE, _FAMILY_CEILING))
            f.add_rule(deny, "socket", sc.Arg(0, sc.EQ, AF_NETLINK), sc.Arg(2, sc.NE, 0))  # NETLINK_ROUTE only
            for family in (AF_INET, AF_INET6):  # TCP only (what Landlock bounds): SOCK_STREAM, protocol 0 or 6
                for kind in range(16):
                    if kind != SOCK_STREAM:
                        f.add_rule(deny, "socket", sc.Arg(0, sc.EQ, family), sc.Arg(1, sc.MASKED_EQ, 0xF, kind))
                for protocol in (1, 2, 3, 4, 5):
                    f.add_rule(deny, "socket", sc.Arg(0, sc.EQ, family), sc.Arg(2, sc.EQ, protocol))
                f.add_rule(deny, "socket", sc.Arg(0, sc.EQ, family), sc.Arg(2, sc.GE, IPPROTO_TCP + 1))
            denied.append("socket (but TCP over AF_INET/AF_INET6, and NETLINK_ROUTE)")
        # clone: a thread, never a process, and never into new namespaces
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
        for flag in CLONE_NEW_FLAGS:
            f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        denied.append("clone (processes, namespaces)")
        try:
            f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
            denied.append("clone3 (ENOSYS)")
        except (OSError, ValueError, RuntimeError):
            unknown.append("clone3")
        for request in (TIOCSTI, TIOCLINUX):
            f.add_rule(deny, "ioctl", sc.Arg(1, sc.EQ, request))
        numbers: Dict[str, int] = {}
        for name in ("keyctl",):
            try:
                numbers[name] = int(sc.resolve_syscall(sc.Arch.NATIVE, name))
            except (OSError, ValueError, RuntimeError):
                pass
        with tempfile.TemporaryFile() as fh:
            f.export_bpf(fh)
            fh.seek(0)
            bpf = fh.read()
    except OSError as exc:
        raise SeccompUnavailable(f"libseccomp refused the filter: {exc}") from None
    if not bpf or len(bpf) % 8:
        raise SeccompUnavailable("libseccomp exported no filter")
    return bpf, denied, unknown, numbers


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _prctl(libc: ctypes.CDLL, option: int, arg: int) -> None:
    if libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def install(bpf: bytes, libc: Optional[ctypes.CDLL] = None) -> None:
    """Install the compiled program on this process, for good (and on what it starts)."""
    libc = libc or ctypes.CDLL(None, use_errno=True)
    libc.prctl.restype = ctypes.c_int
    _prctl(libc, PR_SET_NO_NEW_PRIVS, 1)  # the kernel's condition for an unprivileged filter
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = _SockFprog(len(bpf) // 8, ctypes.cast(buf, ctypes.c_void_p).value)
    if libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")


def summary(program: Optional[Program]) -> Tuple[str, ...]:
    """The layers line's words for the filter."""
    if program is None:
        return ()
    return ("seccomp: no new processes, programs, sockets, keyrings, io_uring, userfaultfd, ptrace, bpf, mounts or namespaces",)
