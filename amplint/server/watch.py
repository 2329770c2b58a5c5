"""`amplint --watch`: lint, print, then lint again whenever a Python file, a
notebook or a configuration file under the paths changes (watchfiles), like
`ruff check --watch`. Ctrl-C stops it (exit 0)."""
from __future__ import annotations

import time
from typing import Callable, Optional, Sequence

WATCHED_SUFFIXES = (".py", ".pyi", ".ipynb")
CONFIG_FILES = ("pyproject.toml", "amplint.toml")

INSTALL_HINT = "--watch needs the 'server' extra: pip install 'amplint[server]'"


def relevant(path: str) -> bool:
    """A change worth a new run: source files and the files settings come from."""
    return path.endswith(WATCHED_SUFFIXES) or path.endswith(CONFIG_FILES)


def watch_paths(paths: Sequence[str], lint_once: Callable[[], str], echo: Callable[[str], None], stop_event: Optional[object] = None) -> int:
    """Run `lint_once` now and after every relevant change; `echo` prints its report."""
    try:
        from watchfiles import watch
    except ImportError:
        from ..core.config import ConfigError

        raise ConfigError(INSTALL_HINT) from None

    def run() -> None:
        echo(f"[{time.strftime('%H:%M:%S')}] amplint: checking...")
        echo(lint_once().rstrip("\n"))
        echo("Watching for file changes.")

    run()
    try:
        for _ in watch(*paths, watch_filter=lambda _change, path: relevant(path), stop_event=stop_event, raise_interrupt=False):
            run()
    except KeyboardInterrupt:  # pragma: no cover - watch() returns on Ctrl-C with raise_interrupt=False
        pass
    return 0
