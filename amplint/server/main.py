"""`amplint server [--help]`: start the language server on stdin/stdout."""
from __future__ import annotations

import sys
from typing import List, Optional

USAGE = """usage: amplint server

Run amplint as a language server (LSP) over stdin/stdout, for editors.
Configure your editor to start `amplint server` for Python files and
notebooks; see docs/editors.md.
"""

INSTALL_HINT = "amplint server needs the 'server' extra: pip install 'amplint[server]'"


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[2:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    if args:
        sys.stderr.write(f"amplint: error: unexpected argument {args[0]!r} (see 'amplint server --help')\n")
        return 2
    try:
        from .lsp import build
    except ImportError as exc:
        if getattr(exc, "name", "") and exc.name.split(".")[0] in ("pygls", "lsprotocol"):
            sys.stderr.write(f"amplint: error: {INSTALL_HINT}\n")
            return 2
        raise
    build().start_io()
    return 0
