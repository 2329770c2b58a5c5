"""Findings made for one version of a buffer, carried onto a later one: kept (moved)
while their lines are unchanged, dropped once one is edited."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amplint.core.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Related, Severity
from amplint.server.relocate import LineMap, relocate

OLD = "import torch\n\ndef f(x):\n    y = bce(x)\n    return y\n"


def diag(row: int, end_row: int = None, fix_row: int = None, related=()) -> Diagnostic:
    fix = None
    if fix_row is not None:
        fix = Fix(Applicability.SAFE, "fix", (Edit(Location(fix_row, 5), Location(fix_row, 8), "bce2"),))
    return Diagnostic("AMP303", "bce", "msg", Severity.ERROR, "a.py", Location(row, 9), Location(end_row or row, 15),
                      fix=fix, noqa_row=end_row or row, related=tuple(related))


def test_lines_inserted_above_move_the_finding_and_its_fix_and_same_file_related():
    new = "# one\n# two\n" + OLD
    d = diag(4, fix_row=4, related=[Related(Location(1, 1), Location(1, 13), "imported", None, None),
                                    Related(Location(18, 1), Location(18, 1), "autocast entered here", "trainer.py", None)])
    (moved,) = relocate([d], OLD, new)
    assert (moved.location.row, moved.end_location.row, moved.noqa_row) == (6, 6, 6)
    assert moved.location.column == 9 and moved.fix.edits[0].location == Location(6, 5)
    assert [r.location.row for r in moved.related] == [3, 18]  # another file's place stays


def test_an_edited_line_drops_the_finding():
    new = OLD.replace("y = bce(x)", "y = bce_with_logits(x)")
    assert relocate([diag(4)], OLD, new) == []


def test_an_edit_elsewhere_keeps_it_in_place_and_a_fix_on_an_edited_line_is_withdrawn():
    new = OLD.replace("import torch", "import torch  # edited")
    (kept,) = relocate([diag(4, fix_row=1)], OLD, new)
    assert kept.location.row == 4 and kept.fix is None


def test_a_multi_line_finding_needs_every_line_unchanged():
    assert relocate([diag(3, end_row=5)], OLD, OLD.replace("return y", "return y + 1")) == []
    assert [d.location.row for d in relocate([diag(3, end_row=5)], OLD, "\n" + OLD)] == [4]


def test_a_line_split_in_two_is_not_the_same_span():
    new = OLD.replace("    y = bce(x)\n", "    y = (\n    bce(x))\n")
    assert relocate([diag(4)], OLD, new) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "", "x = 1"]), max_size=12), st.lists(st.sampled_from(["a", "b", "c", "", "x = 1"]), max_size=12))
def test_a_mapped_row_always_holds_the_same_text(old_lines, new_lines):
    old, new = "".join(f"{line}\n" for line in old_lines), "".join(f"{line}\n" for line in new_lines)
    m = LineMap(old, new)
    for row in range(1, len(old_lines) + 1):
        target = m.row(row)
        if target is not None:
            assert new_lines[target - 1] == old_lines[row - 1]
