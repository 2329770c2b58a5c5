"""`amplint server` end to end: a real LSP client (pytest-lsp) talks to the
server over stdio: initialize, open, diagnostics, edit, code actions that
apply and clear a finding, hover, a notebook document, a malformed request,
shutdown/exit."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types as lsp  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

pytestmark = pytest.mark.asyncio

DEPRECATED = 'import torch\n\nscaler = torch.cuda.amp.GradScaler()\nloss = scaler.scale(loss)\n'
CLIP = (
    'import torch\nscaler = torch.amp.GradScaler("cuda")\nscaler.scale(loss).backward()\n'
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\nscaler.update()\n"
)


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "amplint", "server"]))
async def client(lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "pyproject.toml").write_text('[tool.amplint]\nper-file-ignores = { "quiet_*.py" = ["AMP001"] }\n')
    lsp_client.root = root
    await lsp_client.initialize_session(
        lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities(notebook_document=lsp.NotebookDocumentClientCapabilities(synchronization=lsp.NotebookDocumentSyncClientCapabilities())),
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name="project")],
        )
    )
    yield
    await lsp_client.shutdown_session()


async def open_and_wait(client: LanguageClient, path: Path, text: str) -> list:
    uri = path.as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    return client.diagnostics[uri]


def apply(text: str, edits) -> str:
    """Apply LSP text edits (ASCII text: characters are UTF-16 units), last first."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(p: lsp.Position) -> int:
        return starts[min(p.line, len(lines))] + p.character

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end):]
    return text


async def test_open_publishes_the_finding_with_code_link_source_and_severity(client: LanguageClient):
    diagnostics = await open_and_wait(client, client.root / "train.py", CLIP)
    assert [d.code for d in diagnostics] == ["AMP101"]
    d = diagnostics[0]
    assert d.source == "amplint"
    assert d.severity == lsp.DiagnosticSeverity.Error
    assert d.code_description.href.endswith("AMP101.md")
    assert (d.range.start.line, d.range.start.character) == (3, 0)


async def test_edit_republishes_and_clean_code_is_silent(client: LanguageClient):
    path = client.root / "edit.py"
    uri = path.as_uri()
    assert [d.code for d in await open_and_wait(client, path, CLIP)] == ["AMP101"]
    # insert the unscale_ line: the finding goes away
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[lsp.TextDocumentContentChangePartial(range=lsp.Range(start=lsp.Position(line=3, character=0), end=lsp.Position(line=3, character=0)), text="scaler.unscale_(optimizer)\n")],
        )
    )
    await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert list(client.diagnostics[uri]) == []


async def test_safe_fix_is_a_quickfix_and_in_fix_all_and_applying_it_clears_the_finding(client: LanguageClient):
    path = client.root / "deprecated.py"
    uri = path.as_uri()
    diagnostics = await open_and_wait(client, path, DEPRECATED)
    assert [d.code for d in diagnostics] == ["AMP001"]
    actions = await client.text_document_code_action_async(
        lsp.CodeActionParams(text_document=lsp.TextDocumentIdentifier(uri=uri), range=diagnostics[0].range, context=lsp.CodeActionContext(diagnostics=diagnostics))
    )
    titles = [a.title for a in actions]
    fix = next(a for a in actions if "noqa" not in a.title)
    assert fix.kind == lsp.CodeActionKind.QuickFix and fix.is_preferred and "unsafe" not in fix.title
    assert "AMP001: add `# noqa: AMP001`" in titles
    fixed = apply(DEPRECATED, fix.edit.changes[uri])
    assert 'torch.amp.GradScaler("cuda")' in fixed

    fix_all = await client.text_document_code_action_async(
        lsp.CodeActionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri),
            range=lsp.Range(start=lsp.Position(line=0, character=0), end=lsp.Position(line=0, character=0)),
            context=lsp.CodeActionContext(diagnostics=[], only=["source.fixAll"]),
        )
    )
    assert [a.kind for a in fix_all] == ["source.fixAll.amplint"]
    assert apply(DEPRECATED, fix_all[0].edit.changes[uri]) == fixed

    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2), content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=fixed)])
    )
    await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert list(client.diagnostics[uri]) == []


async def test_unsafe_fix_is_only_an_explicit_labelled_quickfix_and_noqa_silences(client: LanguageClient):
    path = client.root / "clip.py"
    uri = path.as_uri()
    diagnostics = await open_and_wait(client, path, CLIP)
    actions = await client.text_document_code_action_async(
        lsp.CodeActionParams(text_document=lsp.TextDocumentIdentifier(uri=uri), range=diagnostics[0].range, context=lsp.CodeActionContext(diagnostics=diagnostics))
    )
    fix = next(a for a in actions if "noqa" not in a.title)
    assert "unsafe" in fix.title and not fix.is_preferred
    fix_all = await client.text_document_code_action_async(
        lsp.CodeActionParams(text_document=lsp.TextDocumentIdentifier(uri=uri), range=diagnostics[0].range, context=lsp.CodeActionContext(diagnostics=[], only=["source.fixAll"]))
    )
    assert list(fix_all) == []  # an unsafe fix is never applied wholesale
    noqa = next(a for a in actions if "noqa" in a.title)
    silenced = apply(CLIP, noqa.edit.changes[uri])
    assert "clip_grad_norm_(model.parameters(), 1.0)  # noqa: AMP101\n" in silenced
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2), content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=silenced)])
    )
    await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert list(client.diagnostics[uri]) == []


async def test_hover_on_a_finding_shows_the_rule_page_short_form(client: LanguageClient):
    path = client.root / "hover.py"
    uri = path.as_uri()
    await open_and_wait(client, path, CLIP)
    hover = await client.text_document_hover_async(lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=3, character=5)))
    assert "AMP101" in hover.contents.value and "## What it does" in hover.contents.value
    assert "## Example" not in hover.contents.value
    nothing = await client.text_document_hover_async(lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=0, character=1)))
    assert nothing is None


async def test_per_file_ignores_from_the_project_config(client: LanguageClient):
    assert list(await open_and_wait(client, client.root / "quiet_one.py", DEPRECATED)) == []


async def test_notebook_cells_get_their_own_findings(client: LanguageClient):
    nb_uri = (client.root / "train.ipynb").as_uri()
    cells = ['import torch\nscaler = torch.amp.GradScaler("cuda")\n', "# notes", "scaler.scale(loss).backward()\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\nscaler.update()\n"]
    kinds = [lsp.NotebookCellKind.Code, lsp.NotebookCellKind.Markup, lsp.NotebookCellKind.Code]
    cell_uris = [f"vscode-notebook-cell:{nb_uri[len('file:'):]}#cell{i}" for i in range(3)]
    client.notebook_document_did_open(
        lsp.DidOpenNotebookDocumentParams(
            notebook_document=lsp.NotebookDocument(uri=nb_uri, notebook_type="jupyter-notebook", version=1, cells=[lsp.NotebookCell(kind=k, document=u) for k, u in zip(kinds, cell_uris)]),
            cell_text_documents=[lsp.TextDocumentItem(uri=u, language_id="python" if k == lsp.NotebookCellKind.Code else "markdown", version=1, text=t) for u, k, t in zip(cell_uris, kinds, cells)],
        )
    )
    while not all(u in client.diagnostics for u in cell_uris):  # one notification per cell
        await asyncio.wait_for(client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 30)
    assert list(client.diagnostics[cell_uris[0]]) == []
    third = client.diagnostics[cell_uris[2]]
    assert [d.code for d in third] == ["AMP101"]
    assert third[0].range.start.line == 1  # the row within the cell


async def test_a_malformed_request_gets_an_error_and_the_server_keeps_serving(client: LanguageClient):
    """The client's own API cannot send bad params, so the request is written raw."""
    from pygls.exceptions import JsonRpcException

    protocol = client.protocol
    answer = asyncio.get_running_loop().create_future()
    protocol._request_futures["malformed-1"] = answer
    protocol._send_data({"jsonrpc": "2.0", "id": "malformed-1", "method": "textDocument/hover", "params": {"textDocument": 42}})
    with pytest.raises(JsonRpcException):
        await asyncio.wait_for(answer, 30)
    diagnostics = await open_and_wait(client, client.root / "after.py", CLIP)
    assert [d.code for d in diagnostics] == ["AMP101"]


async def test_an_edit_while_the_first_lint_runs_is_not_lost(client: LanguageClient):
    uri = (client.root / "quick.py").as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=CLIP)))
    client.text_document_did_change(  # before the first publish
        lsp.DidChangeTextDocumentParams(text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=2), content_changes=[lsp.TextDocumentContentChangeWholeDocument(text="x = 1\n")])
    )
    while uri not in client.diagnostics or list(client.diagnostics[uri]):
        await asyncio.wait_for(client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 30)
    assert list(client.diagnostics[uri]) == []


BOUNDARY = (
    'import torch\nscaler = torch.amp.GradScaler("cuda")\nfor i, (x, y) in enumerate(loader):\n'
    "    scaler.scale(model(x, y) / accum).backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    "    if (i + 1) % accum == 0:\n        scaler.step(optimizer)\n        scaler.update()\n"
)


async def test_a_fix_that_amplint_fix_would_drop_is_not_offered(client: LanguageClient):
    """The rule offers `scaler.unscale_(optimizer)` before a clip that runs every micro-batch;
    `amplint --fix --unsafe-fixes` drops it (it would create AMP104: it raises), so the editor
    offers only the noqa action (one fix engine: tests/test_one_fix_engine.py)."""
    path = client.root / "boundary.py"
    uri = path.as_uri()
    diagnostics = await open_and_wait(client, path, BOUNDARY)
    assert [d.code for d in diagnostics] == ["AMP101"]
    actions = await client.text_document_code_action_async(
        lsp.CodeActionParams(text_document=lsp.TextDocumentIdentifier(uri=uri), range=diagnostics[0].range, context=lsp.CodeActionContext(diagnostics=diagnostics))
    )
    assert [a.title for a in actions] == ["AMP101: add `# noqa: AMP101`"]
