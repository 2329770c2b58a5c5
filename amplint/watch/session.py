"""`amplint.watch(...)`: the guard as a context manager, for people who prefer code.

    with amplint.watch("amplint-run"):
        train()

On exit the guard is removed, the summary goes to stderr and DIR/report.html is
written, as `amplint run` does. The Lightning and Hugging Face callbacks
(`integrations.py`) open and close one of these around fit / train.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional


class watch:
    """Watch the training steps run inside the `with` block; see docs/run.md for the options."""

    def __init__(self, report: str = "amplint-run", html: bool = True, model: Any = None, **options: Any) -> None:
        self.report = report
        self.model = model  # a model built before the block, so its modules can be named
        self.html = html
        self.options = options
        self.guard: Optional[Any] = None

    def __enter__(self) -> "watch":
        from . import guard
        from .run import fresh_report_dir

        if guard.current() is not None:
            raise RuntimeError("amplint.watch: a guard is already installed in this process")
        directory = fresh_report_dir(self.report)
        self.guard = guard.install(directory, guard.Options(**self.options))
        if self.model is not None:
            self.guard.build_sites.adopt(self.model)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.guard is None:
            return
        from . import guard
        from .run import finish

        directory = self.guard.directory
        guard.uninstall()
        self.guard = None
        finish(directory, self.html)

    @property
    def events_path(self) -> str:
        return os.path.join(os.path.abspath(self.report), "events.jsonl")
