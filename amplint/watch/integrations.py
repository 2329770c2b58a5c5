"""The guard as a Lightning callback and a Hugging Face `TrainerCallback`.

Each class is built on first access (`amplint.watch.LightningCallback`), so
that neither lightning nor transformers is imported before someone asks for
it. The guard is installed when training starts and closed (summary, report)
when it ends. The model, built before that point, is adopted: its modules are
named by their path in it, and their lines by their class when it is the
user's own.
"""
from __future__ import annotations

from typing import Any, Dict

_BUILT: Dict[str, Any] = {}


def _lightning_base() -> Any:
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback
    return Callback


def _lightning() -> Any:
    from .session import watch

    class LightningCallback(_lightning_base()):  # type: ignore[misc]
        """`Trainer(callbacks=[amplint.watch.LightningCallback("amplint-run")])`."""

        def __init__(self, report: str = "amplint-run", **options: Any) -> None:
            super().__init__()
            self._watch = watch(report, **options)

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            self._watch.model = pl_module
            self._watch.__enter__()

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            self._watch.close()

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self._watch.close()

    return LightningCallback


def _hf() -> Any:
    from transformers import TrainerCallback

    from .session import watch

    class HFCallback(TrainerCallback):  # type: ignore[misc]
        """`Trainer(..., callbacks=[amplint.watch.HFCallback("amplint-run")])`."""

        def __init__(self, report: str = "amplint-run", **options: Any) -> None:
            self._watch = watch(report, **options)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._watch.model = kwargs.get("model")
            self._watch.__enter__()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._watch.close()

    return HFCallback


def __getattr__(name: str) -> Any:
    builders = {"LightningCallback": _lightning, "HFCallback": _hf}
    if name not in builders:
        raise AttributeError(f"module 'amplint.watch.integrations' has no attribute {name!r}")
    if name not in _BUILT:
        _BUILT[name] = builders[name]()
    return _BUILT[name]
