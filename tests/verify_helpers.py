"""What the verifier's worker tests share: the torch marker and one CPU worker per module."""
from __future__ import annotations

import importlib.util

import pytest

#: the worker needs torch; the test process itself never imports it
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


@pytest.fixture(scope="module")
def runner():
    """One started CPU worker for the module's tests (import this fixture into the module)."""
    from amplint.verify import Runner

    with Runner(device="cpu", timeout=120) as r:
        r.start()
        yield r
