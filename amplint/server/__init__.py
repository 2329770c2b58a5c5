"""Long-running modes: `amplint server` (the Language Server Protocol over stdio)
and `amplint --watch` (re-lint on file changes). Both reuse the engine's
configuration and per-file pipeline; nothing here decides a finding."""
