"""The pure parts of `amplint server`: positions in UTF-16 units, related sites,
severities, the noqa action."""
from __future__ import annotations

import pytest

pytest.importorskip("lsprotocol")
from lsprotocol import types as lsp  # noqa: E402

from amplint.core.diagnostics import Diagnostic, Location, Related, Severity  # noqa: E402
from amplint.server.actions import noqa_action  # noqa: E402
from amplint.server.protocol import Lines, to_lsp  # noqa: E402


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
