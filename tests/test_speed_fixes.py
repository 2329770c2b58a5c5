"""Checking a file's fixes costs one parse when they keep it parsing together, not one parse of
the whole file per fix (quadratic: 500 AMP301 findings on one module took 92 s); a fix that
breaks parsing is still found and dropped, the others kept, as the check in turn gave."""
from __future__ import annotations

from amplint.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Severity
from amplint.core.text import apply_edits
from amplint.engine.run import lint_source
from amplint.fix import apply

DENSE = "import torch\n\nk = 0.5\nscores = torch.randn(8, 8, dtype=torch.float16)\n" + "".join(
    f"s{i} = scores.masked_fill(scores > k, -1e9)\n" for i in range(60)
)


def _counting(monkeypatch):
    calls = []
    real = apply.parses

    def parses(source):
        calls.append(source)
        return real(source)

    monkeypatch.setattr(apply, "parses", parses)
    return calls


def test_many_fixes_are_checked_with_one_parse(monkeypatch):
    found = [d for d in lint_source(DENSE) if d.fix is not None]
    assert len(found) == 60
    calls = _counting(monkeypatch)
    new, chosen = apply.apply_fixes(DENSE, found, unsafe=True)
    assert len(calls) == 1 and len(chosen) == 60
    assert new == apply_edits(DENSE, [e for d in found for e in d.fix.edits])
    assert "-1e9" not in new


def _replace(row: int, col: int, end: int, text: str) -> Diagnostic:
    edit = Edit(Location(row, col), Location(row, end), text)
    return Diagnostic(
        code="AMP999", name="t", message=f"m{row}", severity=Severity.WARNING, filename="t.py",
        location=Location(row, col), end_location=Location(row, end), fix=Fix(Applicability.SAFE, "t", (edit,)),
    )


def test_a_fix_that_breaks_parsing_is_dropped_and_the_rest_kept(monkeypatch):
    source = "a = 1\nb = 2\nc = 3\n"
    good, bad, also = _replace(1, 5, 6, "10"), _replace(2, 5, 6, "(2"), _replace(3, 5, 6, "30")
    rejected = []
    new, chosen = apply.apply_fixes(source, [also, bad, good], rejected=rejected)
    assert new == "a = 10\nb = 2\nc = 30\n"
    assert chosen == [good, also] and [d for d, _ in rejected] == [bad]


def test_edits_are_joined_as_splicing_them_from_the_end_gave():
    source = "abcdef\nghij\n"
    edits = [
        Edit(Location(1, 2), Location(1, 4), "X"),
        Edit(Location(2, 1), Location(2, 1), "<"),
        Edit(Location(2, 1), Location(2, 1), "["),
        Edit(Location(3, 1), Location(3, 1), "end\n"),
    ]
    spliced = source
    starts = [0, 0, 7, 12]
    for e in sorted(edits, key=lambda e: (e.location.row, e.location.column), reverse=True):
        b = starts[e.location.row] + e.location.column - 1
        f = starts[e.end_location.row] + e.end_location.column - 1
        spliced = spliced[:b] + e.content + spliced[f:]
    assert apply_edits(source, edits) == spliced
