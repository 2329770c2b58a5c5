"""`amplint server` end to end when the keystroke path's fast result is not the full
lint's (server/incremental.py's known limit): the editor first gets the fast result, then
the background full lint (server/recheck.py) re-publishes the exact one, and later
keystrokes in that definition no longer show the fast path's difference.

The real case: AMP001 stays silent on a deprecated autocast under `if new_api:` when
`new_api` is somewhere assigned from a version probe, a lookup by name over the whole
file. The excerpt linted for an edit of `forward` leaves `amp_api` (which `forward` does
not name) out, so it cannot see the probe and reports the deprecated call."""
from __future__ import annotations

import asyncio
import sys
from typing import List, Tuple

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types as lsp  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

from amplint.server.documents import lint_python, lint_text  # noqa: E402
from amplint.server.project import Projects  # noqa: E402

TIMEOUT_S = 120  # generous: the background lint spawns a process on a shared machine

OLD_BODY = '''    with torch.cuda.amp.autocast():
        return model(x)
'''
GATED_BODY = '''    if new_api:
        with torch.amp.autocast("cuda"):
            return model(x)
    else:
        with torch.cuda.amp.autocast():
            return model(x)
'''
TRAIN = f'''import torch


def amp_api():
    new_api = hasattr(torch, "amp") and hasattr(torch.amp, "autocast")
    return new_api


def forward(model, x, new_api):
{OLD_BODY}'''
GATED = TRAIN.replace(OLD_BODY, GATED_BODY)
BODY_ROW = TRAIN.split("\n").index(OLD_BODY.split("\n")[0])  # 0-based


def seen(diagnostics) -> List[Tuple]:
    return sorted((d.code, d.range.start.line, d.range.start.character, d.message) for d in diagnostics)


def full_lint_of(text: str, root) -> List[Tuple]:
    """What a full lint of `text` says, in the publish's terms (rows 0-based)."""
    projects = Projects(str(root))
    path = str(root / "train.py")
    return sorted((d.code, d.location.row - 1, d.location.column - 1, d.message) for d in lint_text(text, path, projects.config_for(path), projects))


def publishes(client: LanguageClient) -> "asyncio.Queue":
    """Every publishDiagnostics from now on, in order (re-armed inside the notification's own
    callback, so one arriving right after another is not missed)."""
    queue: asyncio.Queue = asyncio.Queue()

    def arm() -> None:
        client.protocol.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, received)

    def received(params: lsp.PublishDiagnosticsParams) -> None:
        queue.put_nowait(params)
        arm()

    arm()
    return queue


async def next_publish(queue: "asyncio.Queue", uri: str) -> List[Tuple]:
    while True:
        params = await asyncio.wait_for(queue.get(), TIMEOUT_S)
        if params.uri == uri:
            return seen(params.diagnostics)


def replace_rows(client: LanguageClient, uri: str, version: int, first: int, end: int, text: str) -> None:
    """Replace rows [first, end) (0-based) by `text`."""
    span = lsp.Range(start=lsp.Position(line=first, character=0), end=lsp.Position(line=end, character=0))
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[lsp.TextDocumentContentChangePartial(range=span, text=text)],
        )
    )


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "amplint", "server"]))
async def client(lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    lsp_client.root = root
    await lsp_client.initialize_session(lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=root.as_uri()))
    yield
    await lsp_client.shutdown_session()


def test_the_case_is_one_the_fast_path_gets_wrong(tmp_path):
    """The premise of the end-to-end test: the fast result of the edit differs from the full lint.
    If a change makes them agree, pick another shape for the test below (it would wait in vain)."""
    projects = Projects(str(tmp_path))
    path = str(tmp_path / "train.py")
    before = lint_python(TRAIN, path, projects)
    fast = lint_python(GATED, path, projects, before.base)
    assert fast.fast, "the edit of `forward` should take the keystroke path"
    assert [d.code for d in fast.diagnostics] == ["AMP001"]
    assert full_lint_of(GATED, tmp_path) == []  # the version probe in `amp_api` gates it


@pytest.mark.asyncio
async def test_the_background_lint_corrects_the_fast_result(client: LanguageClient):
    uri = (client.root / "train.py").as_uri()
    queue = publishes(client)
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=TRAIN)))
    opened = await next_publish(queue, uri)
    assert opened == full_lint_of(TRAIN, client.root)
    assert [(code, row) for code, row, _, _ in opened] == [("AMP001", BODY_ROW)]

    # the user gates the deprecated call behind `new_api`: one edit inside `forward`
    replace_rows(client, uri, 2, BODY_ROW, BODY_ROW + OLD_BODY.count("\n"), GATED_BODY)
    fast = await next_publish(queue, uri)
    exact = full_lint_of(GATED, client.root)
    else_row = GATED.split("\n").index("        with torch.cuda.amp.autocast():")
    assert [(code, row) for code, row, _, _ in fast] == [("AMP001", else_row)]  # the excerpt's result
    assert fast != exact
    corrected = await next_publish(queue, uri)  # the background full lint's re-publish
    assert corrected == exact

    # a keystroke in `forward` again: the difference does not come back, not even briefly
    replace_rows(client, uri, 3, BODY_ROW, BODY_ROW, "    # typed\n")
    typed = GATED.replace(GATED_BODY, "    # typed\n" + GATED_BODY)
    assert await next_publish(queue, uri) == full_lint_of(typed, client.root) == exact
