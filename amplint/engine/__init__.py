"""Running rules over files: discovery, gates, excerpts, the per-file pipeline,
notebooks, the cache, processes, and the run over many files (`run.py`).

Modules are imported by their own names (`amplint.engine.run`); this package
exports nothing, so importing one engine module never imports the rest.
"""
