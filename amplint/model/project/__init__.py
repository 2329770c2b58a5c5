"""The project-wide AMP model: per-file summaries joined into one program.

`index.text_index` (a file's roles and imports, from its text), `index.universe`
(the files a run needs), `summary.summarize` (one file, plain JSON-able data) and
`graph.Project` (names, values, the call graph and facts propagated along it).
Used by the cross-file rules, and meant for the verifier and an editor server.
Never imports libcst or torch.
"""
from .graph import Call, Project, Region, Witness, display
from .index import ModuleIndex, module_names, registering, text_index, universe
from .summary import VERSION, summarize

__all__ = ["Call", "ModuleIndex", "Project", "Region", "VERSION", "Witness", "display", "module_names", "registering", "summarize", "text_index", "universe"]
