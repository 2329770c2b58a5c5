"""The default text output in ruff's `full` shape: source frame, underline, help, color."""
from __future__ import annotations

from click.testing import CliRunner

from amplint import lint_source
from amplint.cli import main
from amplint.core.diagnostics import Diagnostic, Location, Severity
from amplint.report.source import clean
from amplint.report.text import frame, render

SOURCE = """\
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
"""


def test_frame_underlines_the_span_and_ends_with_help(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SOURCE)
    d = next(d for d in lint_source(SOURCE, str(path)) if d.code == "AMP101")
    lines = render([d]).splitlines()
    assert lines[0] == f"{path}:4:1: AMP101 `torch.nn.utils.clip_grad_norm_` clips gradients still multiplied by the loss scale"
    assert lines[1:9] == [
        "  |",
        "2 | scaler = torch.amp.GradScaler(\"cuda\")",
        "3 | scaler.scale(loss).backward()",
        "4 | torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "  | " + "^" * len("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)") + " AMP101",
        "5 | scaler.step(optimizer)",
        "6 | scaler.update()",
        "  |",
    ]
    assert lines[9] == "  = help: Call `scaler.unscale_(optimizer)` before the clip"


def _diag(row, col, end_row, end_col, message="m"):
    return Diagnostic("AMP301", "x", message, Severity.WARNING, "f.py", Location(row, col), Location(end_row, end_col), help="h")


def test_untrusted_source_and_messages_are_escaped():
    lines = ["x = 1", "y = '\x1b[31mred\x1b[0m' + z"]
    out = "\n".join(frame(_diag(2, 22, 2, 23), lines))
    assert "\x1b" not in out and "\\x1b[31mred" in out
    # the caret stays under `z` although the escapes widened the text before it
    src, caret = out.splitlines()[2], out.splitlines()[3]
    assert src[caret.index("^")] == "z"
    assert clean("a\nb\u202ec") == "a\\nb\\u202ec"
    assert "\n" not in render([_diag(1, 1, 1, 2, message="two\nlines")]).splitlines()[0][-8:]


def test_multi_line_spans_underline_each_row_and_unreadable_files_have_no_frame():
    lines = ["f(a,", "  b)"]
    out = frame(_diag(1, 1, 2, 5), lines)
    assert out[2] == "  | ^^^^" and out[4] == "  |   ^^ AMP301"
    assert frame(_diag(1, 1, 1, 2), None) == ["  = help: h"]


def test_color_follows_the_terminal_no_color_and_force_color(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(SOURCE)
    runner = CliRunner()
    plain = runner.invoke(main, [str(path), "--no-cache"], env={"NO_COLOR": None, "FORCE_COLOR": None})
    assert "\x1b[" not in plain.output  # not a terminal
    forced = runner.invoke(main, [str(path), "--no-cache"], env={"FORCE_COLOR": "1", "NO_COLOR": None})
    assert "\x1b[1;31mAMP101\x1b[0m" in forced.output
    assert "\x1b[" not in runner.invoke(main, [str(path), "--no-cache", "--output-format", "json"], env={"FORCE_COLOR": "1"}).output
    out = tmp_path / "report.txt"
    runner.invoke(main, [str(path), "--no-cache", "-o", str(out)], env={"FORCE_COLOR": "1"})
    assert "\x1b[" not in out.read_text() and "AMP101" in out.read_text()
