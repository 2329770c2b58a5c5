"""The `amplint` console script: answers `--version` without importing click,
the engine or libcst, and hands everything else to `amplint.cli`."""
from __future__ import annotations

import sys

# `amplint NAME ...` for these names runs "module:function" (which returns the exit code)
# instead of linting; a folder with one of these names is linted as `amplint ./NAME`.
SUBCOMMANDS = {
    "run": "amplint.watch.run:main",
    "replay": "amplint.watch.replay:main",
    "server": "amplint.server.main:main",
}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in SUBCOMMANDS:
        import importlib

        module, _, function = SUBCOMMANDS[sys.argv[1]].partition(":")
        sys.exit(getattr(importlib.import_module(module), function)())
    if sys.argv[1:] in (["--version"], ["-V"]):
        from .__version__ import __version__

        sys.stdout.write(f"amplint {__version__}\n")
        sys.exit(0)
    from .cli import main as cli_main

    cli_main()


if __name__ == "__main__":  # pragma: no cover
    main()
