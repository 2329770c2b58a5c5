"""`amplint server` end to end on the keystroke path (server/incremental.py): edits
inside one definition publish what a full lint says, at the moved rows."""
from __future__ import annotations

import sys

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types as lsp  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

pytestmark = pytest.mark.asyncio

TRAIN = '''import torch


def unrelated(x):
    return x + 1


def train(model, loader, optimizer, scaler):
    for batch in loader:
        with torch.autocast("cuda"):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
'''
CLIP_ROW = 12  # 0-based


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "amplint", "server"]))
async def client(lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    lsp_client.root = root
    await lsp_client.initialize_session(lsp.InitializeParams(capabilities=lsp.ClientCapabilities(), root_uri=root.as_uri()))
    yield
    await lsp_client.shutdown_session()


async def change(client: LanguageClient, uri: str, version: int, line: int, text: str) -> list:
    """Insert `text` at the start of `line` and wait for the publish."""
    at = lsp.Position(line=line, character=0)
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[lsp.TextDocumentContentChangePartial(range=lsp.Range(start=at, end=at), text=text)],
        )
    )
    await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    return list(client.diagnostics[uri])


async def test_keystrokes_inside_definitions_publish_the_full_lint(client: LanguageClient):
    uri = (client.root / "train.py").as_uri()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=TRAIN)))
    await client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert [(d.code, d.range.start.line) for d in client.diagnostics[uri]] == [("AMP101", CLIP_ROW)]
    # two lines in `unrelated`: the finding in `train` moves down with them
    found = await change(client, uri, 2, 4, "    x = x * 2\n    x = x - 1\n")
    assert [(d.code, d.range.start.line) for d in found] == [("AMP101", CLIP_ROW + 2)]
    # unscale_ before the clip, inside `train`: the finding goes
    assert await change(client, uri, 3, CLIP_ROW + 2, "        scaler.unscale_(optimizer)\n") == []
