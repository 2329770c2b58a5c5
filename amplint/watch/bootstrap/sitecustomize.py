"""Injected by `amplint run` (a temporary folder first on PYTHONPATH): installs the
amplint guard the moment the program imports torch, then runs the
sitecustomize this one shadows, if any. Programs that never import torch
(torchrun's launcher aside, which does) are left alone.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _install_guard():
    # The guard comes from the amplint that started the run, whatever this interpreter has installed.
    home = os.environ["AMPLINT_WATCH_HOME"]
    sys.path.insert(0, home)
    try:
        from amplint.watch.guard import Options, install
    finally:
        sys.path.remove(home)
    install(os.environ["AMPLINT_WATCH_DIR"], Options.from_env(os.environ))


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps torch's loader so the guard installs right after torch loads."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _install_guard()

        loader.exec_module = exec_module
        return spec


if os.environ.get("AMPLINT_WATCH_DIR"):
    if "torch" in sys.modules:  # pragma: no cover - something imported torch earlier
        _install_guard()
    else:
        sys.meta_path.insert(0, _TorchImportHook())


def _chain():
    """Run the sitecustomize.py that would have run without amplint."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_chain()
