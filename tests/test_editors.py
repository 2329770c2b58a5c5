"""The Neovim blocks of docs/editors.md, each run as the whole `init.lua` of a headless
Neovim against `amplint server`: the block on the page is the block that was tried.

Each block is marked `<!-- nvim-block: VERSION -->` (the oldest Neovim it is for); it
runs in every Neovim at hand that is at least that version (the `nvim` on PATH and those
named in `$AMPLINT_TEST_NVIM`, separated by `os.pathsep`), and is skipped where none is. The probe waits for the diagnostics of a file of a fixture project
and prints them with their related information, the hover and the code actions."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "editors.md"
PROJECT = ROOT / "fixtures" / "projects" / "bce_loss_module"
BLOCK = re.compile(r"<!-- nvim-block: (\d+)\.(\d+) -->\n```lua\n(.*?)```", re.S)

PROBE = r'''
local ok = vim.wait(120000, function() return #vim.diagnostic.get(0) >= 1 end, 200)
print(ok and "diagnostics:" or "timed out")
local diags = vim.diagnostic.get(0)
for _, d in ipairs(diags) do
  print(string.format("%d:%d %s %s %s", d.lnum + 1, d.col + 1, d.source or "?", d.code or "?", d.message))
  local lsp = d.user_data and d.user_data.lsp
  for _, r in ipairs((lsp and lsp.relatedInformation) or {}) do
    print(string.format("  related %s:%d %s", vim.uri_to_fname(r.location.uri), r.location.range.start.line + 1, r.message))
  end
end
local d = diags[1]
if d then
  local pos = { line = d.lnum, character = d.col }
  local doc = { uri = vim.uri_from_bufnr(0) }
  for _, res in pairs(vim.lsp.buf_request_sync(0, "textDocument/hover", { textDocument = doc, position = pos }, 20000) or {}) do
    local value = res.result and res.result.contents and res.result.contents.value or ""
    print("hover: " .. value:gsub("\n", " | "))
  end
  local params = { textDocument = doc, range = { start = pos, ["end"] = pos }, context = { diagnostics = {} } }
  for _, res in pairs(vim.lsp.buf_request_sync(0, "textDocument/codeAction", params, 20000) or {}) do
    for _, a in ipairs(res.result or {}) do print("code action: " .. a.title) end
  end
end
vim.cmd("qa!")
'''


def blocks() -> List[Tuple[Tuple[int, int], str]]:
    return [((int(a), int(b)), body) for a, b, body in BLOCK.findall(DOC.read_text(encoding="utf-8"))]


def nvims() -> List[Tuple[str, Tuple[int, int]]]:
    """(executable, (major, minor)) of each Neovim at hand."""
    found = []
    for exe in [shutil.which("nvim"), *filter(None, os.environ.get("AMPLINT_TEST_NVIM", "").split(os.pathsep))]:
        version = _version(exe) if exe else None
        if version is not None and exe not in [e for e, _ in found]:
            found.append((exe, version))
    return found


def _version(exe: str) -> Optional[Tuple[int, int]]:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"NVIM v(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def test_the_page_has_a_block_per_neovim_generation():
    assert [version for version, _ in blocks()] == [(0, 11), (0, 8), (0, 7)]
    assert all('cmd = { "amplint", "server" }' in body for _, body in blocks())


@pytest.mark.parametrize("version,body", blocks(), ids=lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else "")
def test_a_documented_block_runs_in_headless_neovim(tmp_path, version, body):
    usable = [(exe, have) for exe, have in nvims() if have >= version]
    if not usable:
        pytest.skip(f"the block is for Neovim {version[0]}.{version[1]}+; at hand: {nvims() or 'none'}")
    for exe, have in usable:
        _try_block(tmp_path / f"nvim-{have[0]}.{have[1]}", exe, body)


def _try_block(tmp_path: Path, exe: str, body: str) -> None:
    tmp_path.mkdir()
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    bin_dir = tmp_path / "bin"  # `amplint` as the block calls it: this interpreter's amplint
    bin_dir.mkdir()
    shim = bin_dir / "amplint"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m amplint "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "init.lua").write_text(body)
    (tmp_path / "probe.lua").write_text(PROBE)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("AMPLINT_CACHE_DIR", None)
    run = subprocess.run(
        [exe, "--headless", "-u", str(tmp_path / "init.lua"), "-c", f"luafile {tmp_path / 'probe.lua'}", "segkit/losses.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    out = run.stdout + run.stderr
    assert "diagnostics:" in out, out
    assert re.search(r"^22:15 amplint AMP303 `F\.binary_cross_entropy` raises under the CUDA autocast of `trainer\.py`", out, re.M), out
    assert f"  related {project.resolve() / 'segkit' / 'engine' / 'trainer.py'}:18 autocast entered here (via `UNet.forward` -> `DiceBCELoss.forward`)" in out, out
    assert "hover: **AMP303**" in out, out
    assert "code action: AMP303: add `# noqa: AMP303`" in out, out
