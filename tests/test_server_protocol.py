"""The pure parts of `amplint server`: positions in UTF-16 units, related sites,
severities, the noqa action."""
from __future__ import annotations

import sys

import pytest

pytest.importorskip("lsprotocol")
from lsprotocol import types as lsp  # noqa: E402

from amplint.core.diagnostics import Diagnostic, Location, Related, Severity  # noqa: E402
from amplint.server.actions import noqa_action  # noqa: E402
from amplint.server.protocol import Lines, to_lsp  # noqa: E402


_CLIP = (
    'import torch\nscaler = torch.amp.GradScaler("cuda")\nscaler.scale(loss).backward()\n'
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\nscaler.update()\n"
)


def _diag(**kw) -> Diagnostic:
    base = dict(code="AMP401", name="x", message="m", severity=Severity.WARNING, filename="/p/a.py", location=Location(2, 5), end_location=Location(2, 9), url="https://x/AMP401.md")
    base.update(kw)
    return Diagnostic(**base)


def test_columns_count_utf16_units_both_ways():
    lines = Lines("x = 1\ns = '😀'; torch.save(m)\n")
    # the emoji is one code point but two UTF-16 units
    assert lines.position(Location(2, 10)) == lsp.Position(line=1, character=10)
    assert lines.location(lsp.Position(line=1, character=10)) == Location(2, 10)
    assert lines.position(Location(2, 5)) == lsp.Position(line=1, character=4)


def test_related_sites_become_related_information_in_this_file_and_others():
    d = _diag(related=(Related(Location(3, 1), Location(3, 4), "also saved"), Related(Location(7, 2), Location(7, 6), "the cause", filename="/p/b.py")))
    out = to_lsp(d, Lines("a\nb = 1\nc = 2\n"), "file:///p/a.py", {})
    assert out.severity == lsp.DiagnosticSeverity.Warning and out.code == "AMP401" and out.source == "amplint"
    assert [(r.location.uri, r.location.range.start.line, r.message) for r in out.related_information] == [
        ("file:///p/a.py", 2, "also saved"),
        ("file:///p/b.py", 6, "the cause"),
    ]
    assert to_lsp(_diag(), Lines("a\n"), "file:///p/a.py", {}).related_information is None


@pytest.mark.parametrize(
    "line, expected",
    [
        ("torch.save(m)", "torch.save(m)  # noqa: AMP401"),
        ("torch.save(m)  # noqa: AMP101", "torch.save(m)  # noqa: AMP101, AMP401"),
    ],
)
def test_noqa_action_adds_the_code_to_the_line(line, expected):
    d = _diag(location=Location(1, 1), end_location=Location(1, 5), noqa_row=1)
    action = noqa_action(d, Lines(line + "\n"), "file:///p/a.py")
    (edit,) = action.edit.changes["file:///p/a.py"]
    assert edit.new_text == expected and edit.range.start.line == 0


def test_a_bare_noqa_needs_no_action():
    d = _diag(location=Location(1, 1), end_location=Location(1, 5), noqa_row=1)
    assert noqa_action(d, Lines("torch.save(m)  # noqa\n"), "file:///p/a.py") is None


def test_the_server_lints_without_importing_torch(tmp_path):
    import subprocess

    code = (
        "import sys\n"
        "from amplint.server.lsp import build\n"
        "from amplint.server.documents import lint_python\n"
        "from amplint.server.project import Projects\n"
        "build()\n"
        f"found = lint_python({_CLIP!r}, {str(tmp_path / 't.py')!r}, Projects()).diagnostics\n"
        "assert [d.code for d in found] == ['AMP101'], found\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

