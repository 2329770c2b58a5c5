"""`amplint server` shows what the CLI shows for a file of a project: cross-file findings
with their causes in other files as related information (the buffer's own text in
place of the saved file), and the verdict `amplint --verify` cached for a finding,
gone as soon as the code changes."""
from __future__ import annotations

import asyncio
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types as lsp  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

pytestmark = pytest.mark.asyncio

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "projects"
CLIP = (
    'import torch\nscaler = torch.amp.GradScaler("cuda")\nscaler.scale(loss).backward()\n'
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\nscaler.update()\n"
)
VERDICT = {"verdict": "confirmed", "reason": None, "method": "snippet", "summary": "clip saw the *scaled* norm",
           "device": "cpu", "device_type": "cpu", "torch": "2.13.0+cpu"}


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "amplint", "server"]))
async def client(lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp("workspace")
    for name in ("bce_loss_module", "bce_loss_module_ok"):
        shutil.copytree(FIXTURES / name, root / name)
    (root / "verified").mkdir()
    (root / "verified" / "pyproject.toml").write_text("[tool.amplint]\n")
    lsp_client.root = root
    await lsp_client.initialize_session(
        lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities(),
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name="workspace")],
        )
    )
    yield
    await lsp_client.shutdown_session()


async def published(client: LanguageClient, uri: str, until) -> list:
    """The diagnostics of `uri` once a publication satisfies `until`."""
    while uri not in client.diagnostics or not until(list(client.diagnostics[uri])):
        await asyncio.wait_for(client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 60)
    return list(client.diagnostics[uri])


def open_file(client: LanguageClient, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.diagnostics.pop(uri, None)
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


def replace_all(client: LanguageClient, uri: str, version: int, text: str) -> None:
    client.diagnostics.pop(uri, None)
    client.text_document_did_change(
        lsp.DidChangeTextDocumentParams(text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[lsp.TextDocumentContentChangeWholeDocument(text=text)])
    )


def codes(diagnostics) -> list:
    return [d.code for d in diagnostics]


async def test_a_cross_file_finding_has_its_cause_in_the_other_file_as_related_information(client: LanguageClient):
    project = client.root / "bce_loss_module"
    path = project / "segkit" / "losses.py"
    text = path.read_text()
    uri = open_file(client, path, text)
    (d,) = [d for d in await published(client, uri, lambda ds: "AMP303" in codes(ds)) if d.code == "AMP303"]
    assert (d.range.start.line, d.range.start.character) == (21, 14)  # losses.py:22:15, as the CLI reports
    (related,) = d.related_information
    assert related.location.uri == (project / "segkit" / "engine" / "trainer.py").resolve().as_uri()
    assert related.location.range.start.line == 17
    assert related.message == "autocast entered here (via `UNet.forward` -> `DiceBCELoss.forward`)"
    assert d.message == "`F.binary_cross_entropy` raises under the CUDA autocast of `trainer.py`"

    # edits move the finding with its line...
    replace_all(client, uri, 2, "# a comment\n# another\n" + text)
    moved = await published(client, uri, lambda ds: any(x.code == "AMP303" and x.range.start.line == 23 for x in ds))
    assert [x.related_information[0].location.range.start.line for x in moved if x.code == "AMP303"] == [17]
    # ...and an edit of its line drops it until the file is saved and the project looked at again
    fixed = text.replace("F.binary_cross_entropy(", "F.binary_cross_entropy_with_logits(")
    replace_all(client, uri, 3, fixed)
    assert "AMP303" not in codes(await published(client, uri, lambda ds: "AMP303" not in codes(ds)))
    commented = text.replace("target.float())", "target.float())  # BCE again")
    replace_all(client, uri, 4, commented)  # the line differs from the one analyzed: not shown before a save
    assert "AMP303" not in codes(await published(client, uri, lambda ds: True))
    path.write_text(commented)
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=uri)))
    assert "AMP303" in codes(await published(client, uri, lambda ds: "AMP303" in codes(ds)))


async def test_saving_the_file_that_holds_the_cause_updates_the_open_file(client: LanguageClient):
    project = client.root / "bce_loss_module"
    losses, trainer = project / "segkit" / "losses.py", project / "segkit" / "engine" / "trainer.py"
    uri = open_file(client, losses, losses.read_text())
    await published(client, uri, lambda ds: "AMP303" in codes(ds))
    fixed = trainer.read_text().replace('with torch.autocast("cuda", dtype=torch.float16):', "if True:")
    trainer_uri = open_file(client, trainer, trainer.read_text())
    replace_all(client, trainer_uri, 2, fixed)
    trainer.write_text(fixed)  # the editor writes the file, then says so
    client.text_document_did_save(lsp.DidSaveTextDocumentParams(text_document=lsp.TextDocumentIdentifier(uri=trainer_uri)))
    assert "AMP303" not in codes(await published(client, uri, lambda ds: "AMP303" not in codes(ds)))


async def test_a_buffer_that_differs_from_the_saved_file_is_what_counts(client: LanguageClient):
    path = client.root / "bce_loss_module" / "segkit" / "losses.py"
    uri = open_file(client, path, "import os\n\n\n" + path.read_text())  # unsaved lines on top
    found = await published(client, uri, lambda ds: "AMP303" in codes(ds))
    assert [d.range.start.line for d in found if d.code == "AMP303"] == [24]


async def test_the_correct_twin_project_is_silent(client: LanguageClient):
    twin = client.root / "bce_loss_module_ok" / "segkit" / "losses.py"
    twin_uri = open_file(client, twin, twin.read_text())
    buggy = client.root / "bce_loss_module" / "segkit" / "losses.py"
    uri = open_file(client, buggy, buggy.read_text())
    # the project models are made one after the other: once the buggy file has its
    # cross-file finding, the twin's model has been made and its file published again
    await published(client, uri, lambda ds: "AMP303" in codes(ds))
    assert list(client.diagnostics[twin_uri]) == []


async def test_a_cached_verdict_shows_on_its_finding_and_goes_when_the_code_changes(client: LanguageClient):
    from amplint.server.documents import lint_python
    from amplint.server.project import Projects
    from amplint.verify.store import VerdictStore, content_digest

    path = client.root / "verified" / "train.py"
    path.write_text(CLIP)
    projects = Projects(str(client.root))
    linted = lint_python(CLIP, str(path), projects)  # what `amplint --verify train.py` verified
    (finding,) = linted.diagnostics
    store = VerdictStore.for_config(linted.config)
    assert store.record(finding, content_digest(str(path), CLIP), VERDICT)
    store.save()

    uri = open_file(client, path, CLIP)
    (d,) = await published(client, uri, lambda ds: bool(ds))
    assert d.message.endswith(" [verify: confirmed]")
    assert d.data["verification"]["verdict"] == "confirmed" and d.data["verification"]["torch"] == "2.13.0+cpu"
    hover = await client.text_document_hover_async(lsp.HoverParams(text_document=lsp.TextDocumentIdentifier(uri=uri), position=d.range.start))
    assert r"verify: confirmed \[snippet\] clip saw the \*scaled\* norm" in hover.contents.value  # markdown escaped
    assert "verify: confirmed [snippet] clip saw the *scaled* norm (cpu, torch 2.13.0+cpu)" in re.sub(r"\\(.)", r"\1", hover.contents.value)

    edited = CLIP + "print('done')\n"  # the finding itself unchanged, the code around it not
    replace_all(client, uri, 2, edited)
    (d,) = await published(client, uri, lambda ds: bool(ds) and "verify" not in ds[0].message)
    assert d.code == "AMP101" and "verification" not in d.data
    replace_all(client, uri, 3, CLIP)  # undone: the verified code again
    (d,) = await published(client, uri, lambda ds: bool(ds) and "verify" in ds[0].message)
    assert d.message.endswith(" [verify: confirmed]")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="--verify needs torch")
async def test_a_verdict_from_a_real_verify_run_reaches_the_editor(client: LanguageClient):
    folder = client.root / "verified"
    (folder / "real.py").write_text(CLIP)
    run = subprocess.run(
        [sys.executable, "-m", "amplint", "--verify", "--verify-unsandboxed", "--device", "cpu", "real.py"],
        cwd=folder, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 1 and "verify: " in run.stdout, run.stderr
    verdict = run.stdout.split("verify: ", 1)[1].split()[0]
    uri = open_file(client, folder / "real.py", CLIP)
    # the newest publication carries it (under load a first, fast one may come before the
    # store is read again; a verdict that never arrives times the wait out)
    (d,) = await published(client, uri, lambda ds: len(ds) == 1 and ds[0].message.endswith(f" [verify: {verdict}]"))
    assert d.message.endswith(f" [verify: {verdict}]"), (d.message, run.stdout)
