"""The `amplint` console script: answers `--version` without importing click,
the engine or libcst, and hands everything else to `amplint.cli`."""
from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] in (["--version"], ["-V"]):
        from .__version__ import __version__

        sys.stdout.write(f"amplint {__version__}\n")
        sys.exit(0)
    from .cli import main as cli_main

    cli_main()


if __name__ == "__main__":  # pragma: no cover
    main()
