"""Make file permissions bind in tests, also when they run as root.

root reads a mode-000 file or folder because it holds CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH. `permissions_enforced()` drops both from the calling
thread's effective capability set (Linux `capset`; they stay permitted, so they
are raised again on exit), which makes the kernel refuse root exactly as it
refuses any other user: a real EACCES from the real system call, not a
simulated one. Capabilities are per thread: code that reads in other threads
or processes keeps them.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from typing import Iterator

import pytest

_CAP_DAC_OVERRIDE = 1
_CAP_DAC_READ_SEARCH = 2
_VERSION_3 = 0x20080522


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _capset(libc, data) -> None:
    if libc.capset(ctypes.byref(_Header(_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


@contextlib.contextmanager
def permissions_enforced() -> Iterator[None]:
    """Within the block, this thread is refused what file modes refuse (root included)."""
    if os.geteuid() != 0:
        yield
        return
    if not sys.platform.startswith("linux"):
        pytest.skip("root outside Linux: no way to make file modes bind")
    libc = ctypes.CDLL(None, use_errno=True)
    data = (_Data * 2)()
    if libc.capget(ctypes.byref(_Header(_VERSION_3, 0)), data) != 0:
        pytest.skip("capget failed")
    saved = data[0].effective
    data[0].effective &= ~((1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_DAC_READ_SEARCH))
    _capset(libc, data)
    try:
        yield
    finally:
        data[0].effective = saved
        _capset(libc, data)
