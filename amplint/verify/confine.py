"""Confinement of one finding's process, applied by the worker right after fork.

Worker side, no torch. Everything here is kernel-enforced and one-way: once set, the
user's code (running in this process next) cannot undo it.

* hard resource limits (`hard_limits`): CPU seconds, address space, file size, open
  files, processes, no core files. Soft and hard are set to the same value; raising a
  hard limit needs CAP_SYS_RESOURCE in the initial user namespace, which a process in
  bubblewrap's user namespace never has. (The kernel does not apply RLIMIT_NPROC to
  uid 0: when amplint runs as root, the PID namespace and `kill_descendants` bound
  processes, not the limit.)
* no_new_privs, then Landlock (`landlock`, optional: kernels >= 5.13): reads only
  beneath the folders Python and torch need, writes only beneath the finding's temp
  folder, no TCP bind/connect (ABI >= 4), no signals to or abstract sockets of
  processes outside the finding (ABI >= 6). Landlock also keeps the finding from
  ptrace-reading other processes (their /proc/PID/fd, /proc/PID/environ). A rank of a
  2-process finding (`tcp_ports`) may bind TCP only to a port the kernel picks (port 0)
  and connect only to the ephemeral range, where the other rank's gloo pairs listen.

The worker itself (`mark_worker`) becomes a child subreaper and non-dumpable: every
orphan of a finding is reparented to it and killed by `kill_descendants`, and no
finding can open the worker's /proc/PID/fd to write into its protocol pipe.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Iterable, List, Optional, Tuple

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # same on every Linux architecture
_RULE_PATH_BENEATH = 1
_CREATE_RULESET_VERSION = 1

# LANDLOCK_ACCESS_FS_*
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_MAKE_AND_REMOVE = sum(1 << b for b in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
# LANDLOCK_ACCESS_NET_*, LANDLOCK_SCOPE_*
_NET_TCP = (1 << 0) | (1 << 1)
_SCOPES = (1 << 0) | (1 << 1)

_libc: Optional[ctypes.CDLL] = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.restype = ctypes.c_int
    return _libc


def _prctl(option: int, arg: int) -> None:
    if _c().prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


# ----------------------------------------------------------------- the worker


def mark_worker() -> None:
    """Subreaper (orphans of findings come back to us) and non-dumpable (no /proc/PID/fd access)."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_DUMPABLE, 0)


def _children(me: int) -> List[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != b"Z":
            out.append(int(name))
    return out


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_descendants(keep: Iterable[int] = (), rounds: int = 200) -> bool:
    """SIGKILL every descendant of this (subreaper) process, level by level, until none is left.

    Killing a child reparents its children to us, so the next round sees them. Returns
    False when descendants keep appearing after `rounds` (the caller then gives up the
    whole sandbox, whose PID namespace takes them all).
    """
    me, keep = os.getpid(), set(keep)
    for _ in range(rounds):
        _reap()
        alive = [p for p in _children(me) if p not in keep]
        if not alive:
            return True
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)
    _reap()
    return not [p for p in _children(me) if p not in keep]


# ----------------------------------------------------------------- the finding


def user_tasks() -> int:
    """Tasks (threads) of this real uid visible in /proc: what RLIMIT_NPROC counts where we live.

    In bubblewrap's user namespace that is the sandbox's own tasks; without one, every task
    of the user on the machine, so the process limit must be set above it."""
    uid, count = os.getuid(), 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if line.startswith(("Uid:", "Threads:")))
        except (OSError, ValueError):
            continue
        try:
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (KeyError, ValueError, IndexError):
            continue
    return count


def hard_limits(cpu_s: int, address_space: Optional[int], file_size: int, nproc: int, nofile: int = 1024) -> None:
    """Set soft = hard limits (never above the current hard limit)."""
    import resource

    wanted: List[Tuple[int, Optional[int]]] = [
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_CPU, cpu_s),
        (resource.RLIMIT_FSIZE, file_size),
        (resource.RLIMIT_NOFILE, nofile),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_AS, address_space),
    ]
    for which, value in wanted:
        if value is None:
            continue
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


KEYCTL_JOIN_SESSION_KEYRING = 1


def fresh_session_keyring(keyctl_nr: int) -> None:
    """Leave the inherited session keyring for a new, empty, anonymous one.

    bubblewrap's namespaces do not separate keyrings: a process started by a CI runner
    inherits the runner's session keyring, and the keys in it (tokens) can be read by
    whatever possesses it. After this call this process (and what it starts) possesses
    only the new keyring; the seccomp filter then refuses every keyring call."""
    if _c().syscall(ctypes.c_long(keyctl_nr), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING), None) < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"keyctl(JOIN_SESSION_KEYRING): {os.strerror(err)}")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is absent or disabled."""
    try:
        abi = _c().syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):  # pragma: no cover - no libc syscall()
        return 0
    return int(abi) if abi > 0 else 0


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_RULE_NET_PORT = 2
_BIND_TCP, _CONNECT_TCP = 1 << 0, 1 << 1


def ephemeral_ports(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> Tuple[int, int]:
    """This network namespace's ephemeral port range (what `bind(port 0)` picks from; IPv6 too)."""
    with open(path, encoding="ascii") as fh:
        low, high = (int(x) for x in fh.read().split()[:2])
    if not 0 < low <= high < 65536:
        raise OSError(f"unexpected ephemeral port range {low}-{high}")
    return low, high


def only_loopback(path: str = "/proc/self/net/dev") -> bool:
    """Whether this process's network namespace has no interface but `lo` (bubblewrap's
    --unshare-net): what a rank's TCP sockets can reach is then this sandbox's processes."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            names = {line.split(":", 1)[0].strip() for line in fh.readlines()[2:] if ":" in line}
    except OSError:
        return False
    return names == {"lo"}


def landlock(read: Iterable[str], write: Iterable[str], devices: Iterable[str], abi: int, tcp_ports: Optional[Tuple[int, int]] = None) -> None:
    """Restrict this process (and what it starts) for good; OSError if the kernel refuses.

    `tcp_ports` (low, high), ABI >= 4: TCP bind to port 0 only (the kernel picks one of the
    range) and connect to ports low..high only; None: no TCP bind or connect at all."""
    if tcp_ports is not None and abi < 4:
        raise OSError("Landlock ABI >= 4 is needed to bound a rank's TCP ports")
    fs = EXECUTE | WRITE_FILE | READ_FILE | READ_DIR | _MAKE_AND_REMOVE
    if abi >= 2:
        fs |= REFER
    if abi >= 3:
        fs |= TRUNCATE
    if abi >= 5:
        fs |= IOCTL_DEV
    net = _NET_TCP if abi >= 4 else 0
    scoped = _SCOPES if abi >= 6 else 0
    fields = (ctypes.c_uint64 * 3)(fs, net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    libc = _c()
    ruleset = libc.syscall(_SYS_CREATE, ctypes.byref(fields), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        rules = [(p, EXECUTE | READ_FILE | READ_DIR) for p in read]
        rules += [(p, fs) for p in write]
        rules += [(p, READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV) for p in devices]
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # a folder this machine does not have
            try:
                if not os.path.isdir(path):
                    access &= _FILE_ONLY
                attr = _PathBeneath(access & fs, fd)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(attr), ctypes.c_uint32(0)) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
            finally:
                os.close(fd)
        if tcp_ports is not None:
            ports = [(0, _BIND_TCP)] + [(port, _CONNECT_TCP) for port in range(tcp_ports[0], tcp_ports[1] + 1)]
            for port, access in ports:
                attr = _NetPort(access, port)
                if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_NET_PORT), ctypes.byref(attr), ctypes.c_uint32(0)) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"landlock_add_rule(tcp port {port}): {os.strerror(err)}")
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        if libc.syscall(_SYS_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)
