"""`amplint server`: the Language Server Protocol over stdio (pygls).

Findings are published on open and save at once and on change after a short
quiet spell (`DEBOUNCE_S`), so a burst of keystrokes costs one lint. Linting
runs on one worker thread: the event loop keeps answering hovers and code
actions meanwhile, and a lint whose document changed again before it finished
is not published (the next one is on its way). Notebooks are synced as
notebook documents: their code cells are linted as one program, like
`amplint NOTEBOOK.ipynb`, and each cell gets its own findings.

A Python file's cross-file findings (causes in other files, as related
information) come from the project model, built on a thread of its own when
the file is opened and when a file of its project is saved (`crossfile.py`);
verdicts a `--verify` run cached are shown on their findings (`verdicts.py`).
"""
from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, Optional, Tuple

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import to_fs_path

from ..__version__ import __version__
from ..core.config import Config
from ..core.diagnostics import Diagnostic
from .actions import FIX_ALL, actions_for, fix_all_action, hover_text, overlaps, withdrawn
from .crossfile import CrossFile
from .documents import Linted, exact, lint_notebook_cells, lint_python, lint_text
from .project import Projects
from .protocol import Lines, to_lsp
from .recheck import Rechecker
from .verdicts import Verdicts

DEBOUNCE_S = 0.15
PYTHON_SUFFIXES = (".py", ".pyi")
#: the largest document the server lints (characters); a bigger one gets one AMP000 line
MAX_DOCUMENT_CHARS = 2_000_000
#: a document above this is linted in full in the recheck process, not on the server's own
#: thread: a parse of it would hold the GIL (and so the event loop) for too long
IN_PROCESS_CHARS = 256_000


class Protocol(LanguageServerProtocol):
    """pygls only logs a request whose params do not fit the method; the client
    would wait forever. Such a request gets its JSON-RPC error (Invalid Params)."""

    def structure_message(self, data):  # type: ignore[override]
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" in data and "method" in data:
                self._send_response(data["id"], error=exc.to_response_error())
            raise


class AmplintServer(LanguageServer):
    def _start_io_async(self, stdin=None, stdout=None):  # type: ignore[override]
        """pygls' stdio loop, reading frames with `transport.read_messages` (every malformed
        frame gets its JSON-RPC error; no traceback is logged)."""
        import sys
        import threading

        from pygls.io_ import StdinAsyncReader, StdoutWriter

        from .transport import quiet_logs, read_messages

        quiet_logs()
        self._stop_event = threading.Event()
        reader = StdinAsyncReader(stdin or sys.stdin.buffer, self.thread_pool)
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        try:
            asyncio.run(read_messages(self._stop_event, reader, self.protocol))
        except (BrokenPipeError, KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def __init__(self, debounce: float = DEBOUNCE_S) -> None:
        super().__init__(
            "amplint",
            __version__,
            protocol_cls=Protocol,
            text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental,
            notebook_document_sync=lsp.NotebookDocumentSyncOptions(
                notebook_selector=[lsp.NotebookDocumentFilterWithCells(notebook="*", cells=[lsp.NotebookCellLanguage(language="python")])],
                save=True,
            ),
        )
        self.debounce = debounce
        self.projects = Projects()
        self.crossfile = CrossFile(lambda: self.projects, self.project_findings_ready)  # findings caused in other files
        self.verdicts = Verdicts()  # verdicts `amplint --verify` cached
        self.linted: Dict[str, Linted] = {}  # a text document's or notebook's uri -> its last lint
        self.plain: Dict[str, Linted] = {}  # a Python document's last lint before the project's findings
        self.tracked: set = set()  # the open Python documents (not notebook cells)
        self.owner: Dict[str, str] = {}  # a cell's uri -> its notebook's uri
        self.timers: Dict[str, asyncio.TimerHandle] = {}
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amplint-lint")
        self.rechecker = Rechecker()  # full lints confirming fast ones (incremental.py)
        self.shown_errors: set = set()
        self.loop: Optional[asyncio.AbstractEventLoop] = None

    # ------------------------------------------------------------ scheduling

    def schedule(self, uri: str, delay: float) -> None:
        """Lint `uri` after `delay` seconds of quiet (0: now); a newer request replaces an older one."""
        old = self.timers.pop(uri, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self.timers[uri] = loop.call_later(delay, lambda: loop.create_task(self.lint(uri)))

    async def lint(self, uri: str) -> None:
        self.loop = asyncio.get_running_loop()
        self.timers.pop(uri, None)
        snapshot = self.snapshot(uri)
        if snapshot is None:
            return
        linted = await asyncio.get_running_loop().run_in_executor(self.worker, self.run_lint, uri, snapshot)
        if self.snapshot(uri) != snapshot:  # edited meanwhile: a newer lint is scheduled
            return
        self.linted[uri] = linted
        self.publish(uri, linted)
        if linted.fast:
            asyncio.get_running_loop().create_task(self.confirm(uri, snapshot, linted))

    async def confirm(self, uri: str, snapshot: Tuple, fast: Linted) -> None:
        """After a fast publish: the full lint, in the recheck process; re-published if it differs."""
        _, path, source = snapshot
        plain = self.plain.get(uri)  # the fast lint itself (`fast` may be re-published with new cross-file findings)
        try:
            full = await asyncio.wrap_future(self.rechecker.submit(source, path, fast.config))
        except (asyncio.CancelledError, RuntimeError):
            return  # replaced by a newer edit, or the process is gone: the next edit re-lints
        if self.snapshot(uri) != snapshot or self.plain.get(uri) is not plain:
            return
        base = fast.base
        if base is not None and full.facts == base.facts and _same(full.raw, base.raw):
            base.confirmed = True  # the usual case: nothing to redo (a new base costs a parse)
            return
        linted = await asyncio.get_running_loop().run_in_executor(self.worker, self.exact_lint, uri, source, path, fast.config, full, base)
        if self.snapshot(uri) != snapshot or linted is None:
            return
        self.linted[uri] = linted
        if linted.diagnostics != fast.diagnostics:
            self.publish(uri, linted)

    def snapshot(self, uri: str) -> Optional[Tuple]:
        """What the lint of `uri` reads: (path, text) or (path, ((cell uri, kind, text), ...))."""
        notebook = self.workspace.get_notebook_document(notebook_uri=uri) if uri.endswith(".ipynb") or uri in self.owner.values() else None
        if notebook is not None:
            cells = []
            for cell in notebook.cells:
                kind = "code" if cell.kind == lsp.NotebookCellKind.Code else "markdown"
                cells.append((cell.document, kind, self.workspace.get_text_document(cell.document).source))
            return ("notebook", path_of(uri), tuple(cells))
        if uri not in self.workspace.text_documents:
            return None
        return ("python", path_of(uri), self.workspace.get_text_document(uri).source)

    def run_lint(self, uri: str, snapshot: Tuple) -> Linted:
        kind, path, content = snapshot
        size = sum(len(text) for _, _, text in content) if kind == "notebook" else len(content)
        if size > MAX_DOCUMENT_CHARS:
            return too_large(kind, path, content, size)
        if kind == "notebook":
            return self.verdicts.attach(lint_notebook_cells(content, path, self.projects), path)
        previous = self.plain.get(uri)
        base = previous.base if previous is not None else None
        if base is None and size > IN_PROCESS_CHARS:
            plain = self.lint_elsewhere(content, path)
        else:
            plain = lint_python(content, path, self.projects, base)
        self.plain[uri] = plain
        return self.completed(plain, uri, path)

    def lint_elsewhere(self, source: str, path: str) -> Linted:
        """A big document's full lint in the recheck process: its seconds of parsing hold that
        process's GIL, never this one's (the event loop keeps answering, `shutdown` included)."""
        from ..core.config import ConfigError

        try:
            config = self.projects.config_for(path)
        except ConfigError as exc:
            return Linted(source, [], Config(), error=str(exc))
        try:
            full = self.rechecker.submit(source, path, config).result()
        except Exception:  # noqa: BLE001 - cancelled (a newer edit, shutdown) or the process ended
            return Linted(source, [], config)
        return exact(source, path, config, full, self.projects)

    def exact_lint(self, uri: str, source: str, path: str, config, full, base) -> Optional[Linted]:
        """The full lint `full` as the document's lint, correcting the fast one whose base is
        `base` (None: a newer lint came meanwhile)."""
        fast = self.plain.get(uri)
        plain = exact(source, path, config, full, self.projects, base)
        if self.plain.get(uri) is not fast:
            return None
        self.plain[uri] = plain
        return self.completed(plain, uri, path)

    def completed(self, plain: Linted, uri: str, path: str) -> Linted:
        """A Python file's own findings with its cross-file ones (a saved file's only: an
        untitled buffer is linted alone, like stdin) and cached verdicts."""
        linted = self.crossfile.add(plain, path) if uri.startswith("file:") else plain
        return self.verdicts.attach(linted, path)

    def project_findings_ready(self, path: str) -> None:
        """(On the project model's thread.) New cross-file findings for `path`."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.refresh, [path])

    def refresh(self, paths: List[str]) -> None:
        """Publish the open documents of `paths` again with their newest cross-file findings."""
        wanted = {os.path.abspath(p) for p in paths}
        for uri in list(self.tracked):
            if os.path.abspath(path_of(uri)) in wanted:
                self.loop = self.loop or asyncio.get_running_loop()
                self.loop.create_task(self.republish(uri))

    async def republish(self, uri: str) -> None:
        """The last lint with the newest cross-file findings when the text is still the one it
        linted (the file's own findings are not made again); else a new lint."""
        plain, snapshot = self.plain.get(uri), self.snapshot(uri)
        if snapshot is None:
            return
        if plain is None or snapshot[2] != plain.source:
            self.schedule(uri, 0)
            return
        linted = await asyncio.get_running_loop().run_in_executor(self.worker, self.completed, plain, uri, snapshot[1])
        if self.snapshot(uri) != snapshot:
            return
        self.linted[uri] = linted
        self.publish(uri, linted)

    # ------------------------------------------------------------ publishing

    def publish(self, uri: str, linted: Linted) -> None:
        if linted.error and linted.error not in self.shown_errors:
            self.shown_errors.add(linted.error)
            self.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Error, message=f"amplint: {linted.error}"))
        if not linted.cells:
            lines = Lines(linted.source)
            self.send(uri, [to_lsp(d, lines, uri, {}) for d in linted.diagnostics])
            return
        related = {i: cell_uri for i, cell_uri in enumerate(linted.cells, start=1)}
        for i, cell_uri in enumerate(linted.cells, start=1):
            lines = Lines(self.workspace.get_text_document(cell_uri).source)
            self.send(cell_uri, [to_lsp(d, lines, cell_uri, related) for d in linted.diagnostics if d.cell == i])

    def send(self, uri: str, diagnostics: List[lsp.Diagnostic]) -> None:
        self.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics))

    def forget(self, uri: str) -> None:
        timer = self.timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        linted = self.linted.pop(uri, None)
        self.plain.pop(uri, None)
        for cell_uri in (linted.cells if linted else []) or [uri]:
            self.send(cell_uri, [])

    # ------------------------------------------------------------ queries

    def findings_at(self, uri: str) -> Tuple[Optional[Linted], List[Diagnostic], Optional[Lines]]:
        """The last lint's findings in the document `uri` (a file or a notebook cell), and its lines."""
        notebook = self.owner.get(uri)
        linted = self.linted.get(notebook or uri)
        if linted is None or uri not in self.workspace.text_documents:
            return linted, [], None
        lines = Lines(self.workspace.get_text_document(uri).source)
        if notebook is None:
            return linted, linted.diagnostics, lines
        position = linted.cells.index(uri) + 1 if uri in linted.cells else -1
        return linted, [d for d in linted.diagnostics if d.cell == position], lines


def _same(a: List[Diagnostic], b: List[Diagnostic]) -> bool:
    return sorted(a, key=Diagnostic.sort_key) == sorted(b, key=Diagnostic.sort_key)


def path_of(uri: str) -> str:
    """The file an editor document stands for (an unsaved one: its name in the current folder)."""
    path = to_fs_path(uri)
    if path is None or not uri.startswith("file:"):
        path = os.path.join(os.getcwd(), os.path.basename(uri.split(":", 1)[-1]) or "untitled.py")
    return path


def is_python(document: lsp.TextDocumentItem) -> bool:
    return document.language_id == "python" or document.uri.endswith(PYTHON_SUFFIXES)


def build(debounce: float = DEBOUNCE_S) -> AmplintServer:
    server = AmplintServer(debounce)

    @server.feature(lsp.INITIALIZE)
    def initialize(ls: AmplintServer, params: lsp.InitializeParams) -> None:
        root = None
        if params.workspace_folders:
            root = to_fs_path(params.workspace_folders[0].uri)
        elif params.root_uri:
            root = to_fs_path(params.root_uri)
        ls.projects = Projects(root)

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: AmplintServer, params: lsp.DidOpenTextDocumentParams) -> None:
        if is_python(params.text_document):
            ls.tracked.add(params.text_document.uri)
            ls.crossfile.opened(path_of(params.text_document.uri))
            ls.schedule(params.text_document.uri, 0)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: AmplintServer, params: lsp.DidChangeTextDocumentParams) -> None:
        if params.text_document.uri in ls.tracked:
            ls.schedule(params.text_document.uri, ls.debounce)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: AmplintServer, params: lsp.DidSaveTextDocumentParams) -> None:
        uri = params.text_document.uri
        if uri in ls.tracked:
            linted = ls.linted.get(uri)
            if linted is not None:
                ls.projects.refresh(path_of(uri), linted.config)
            ls.refresh(ls.crossfile.saved(path_of(uri)))  # the open files of its project
            ls.schedule(uri, 0)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: AmplintServer, params: lsp.DidCloseTextDocumentParams) -> None:
        if params.text_document.uri in ls.tracked:
            ls.tracked.discard(params.text_document.uri)
            ls.crossfile.forget(path_of(params.text_document.uri))
            ls.forget(params.text_document.uri)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_open(ls: AmplintServer, params: lsp.DidOpenNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        for cell in params.notebook_document.cells:
            ls.owner[cell.document] = uri
        ls.schedule(uri, 0)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_change(ls: AmplintServer, params: lsp.DidChangeNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        notebook = ls.workspace.get_notebook_document(notebook_uri=uri)
        for cell in notebook.cells if notebook else ():
            ls.owner[cell.document] = uri
        ls.schedule(uri, ls.debounce)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_save(ls: AmplintServer, params: lsp.DidSaveNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        if uri in ls.linted:
            ls.projects.refresh(path_of(uri), ls.linted[uri].config)
        ls.schedule(uri, 0)

    @server.feature(lsp.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_close(ls: AmplintServer, params: lsp.DidCloseNotebookDocumentParams) -> None:
        uri = params.notebook_document.uri
        ls.forget(uri)
        for cell in params.cell_text_documents:
            ls.owner.pop(cell.uri, None)

    @server.feature(
        lsp.TEXT_DOCUMENT_CODE_ACTION,
        lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=False),
    )
    async def code_action(ls: AmplintServer, params: lsp.CodeActionParams) -> List[lsp.CodeAction]:
        """Quick fixes for the findings in the range and `source.fixAll.amplint`; what needs a
        re-lint of the buffer (the CLI's fix check, fix-all) runs on the lint worker, not the loop."""
        uri = params.text_document.uri
        linted, findings, lines = ls.findings_at(uri)
        if linted is None or lines is None:
            return []
        only = params.context.only
        out: List[lsp.CodeAction] = []
        path, config = path_of(uri), linted.config
        loop = asyncio.get_running_loop()

        def lint(text: str) -> List[Diagnostic]:
            return lint_text(text, path, config, ls.projects)

        if not only or any(lsp.CodeActionKind.QuickFix.value.startswith(k) for k in only):
            start, end = lines.location(params.range.start), lines.location(params.range.end)
            dropped: frozenset = frozenset()
            if not linted.cells and any(d.fix is not None and overlaps(d, start, end) for d in findings):
                # the fixes `amplint --fix` would drop (a notebook's are checked on `--fix`), once per text
                dropped = await loop.run_in_executor(ls.worker, withdrawn, linted.diagnostics, linted.source, lint, linted.memo)
            out.extend(actions_for(findings, lines, uri, start, end, lambda: dropped))
        wants_fix_all = only and any(FIX_ALL.startswith(k) for k in only)
        if wants_fix_all and not linted.cells and any(d.fix is not None for d in findings):
            action = await loop.run_in_executor(ls.worker, fix_all_action, linted.source, uri, lint)
            if action is not None:
                out.append(action)
        return out

    @server.feature(lsp.TEXT_DOCUMENT_HOVER)
    def hover(ls: AmplintServer, params: lsp.HoverParams) -> Optional[lsp.Hover]:
        _, findings, lines = ls.findings_at(params.text_document.uri)
        if lines is None:
            return None
        at = lines.location(params.position)
        hits = [d for d in findings if overlaps(d, at, at)]
        if not hits:
            return None
        text = "\n\n---\n\n".join(hover_text(d) for d in hits)
        return lsp.Hover(contents=lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=text))

    @server.feature(lsp.SHUTDOWN)
    def shutdown(ls: AmplintServer, params: None) -> None:
        ls.worker.shutdown(wait=False, cancel_futures=True)
        ls.crossfile.shutdown()
        ls.rechecker.close()

    @server.feature(lsp.EXIT)
    def exit_now(ls: AmplintServer, params: None) -> None:
        """Leave at once, whatever a lint thread is doing: the interpreter's own exit would
        wait for the lint and project threads (a 30 MB buffer: minutes)."""
        import sys

        ls.rechecker.close()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0 if ls.protocol._shutdown else 1)

    return server


def too_large(kind: str, path: str, content: object, size: int) -> Linted:
    """What the editor shows for a document over MAX_DOCUMENT_CHARS: one AMP000 line (a
    notebook: a message), nothing linted."""
    from ..engine.pipeline import syntax_error

    message = (f"not linted in the editor: the document has {size / 1e6:.1f} million characters, over the "
               f"server's {MAX_DOCUMENT_CHARS / 1e6:g} million (`amplint FILE` lints it)")
    if kind == "notebook":
        return Linted("", [], Config(), error=message)
    return Linted(str(content), [syntax_error(path, 1, 1, message)], Config())
