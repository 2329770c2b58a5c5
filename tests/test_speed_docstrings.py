"""amplint.core.docstrings: gates asked again without docstrings before a whole-file parse."""
from __future__ import annotations

import textwrap

from amplint.core.config import Config
from amplint.core.docstrings import without_docstrings
from amplint.engine.pipeline import _lint_file_source, selected_rules


def _lint(source):
    codes, rules = selected_rules(Config())
    return _lint_file_source(textwrap.dedent(source), "t.py", Config(), rules, codes)


def test_blanks_string_statements_and_keeps_everything_else():
    source = textwrap.dedent('''\
        """Module doc: use torch.autocast("cuda")."""
        import torch


        class Net:
            """Say GradScaler() here."""

            def f(self):
                """Doc ü."""
                "a bare string used as a comment"
                x = "autocast kept: an expression, not a statement"
                return f"{x}"
        ''')
    out = without_docstrings(source)
    assert out.count("\n") == source.count("\n")
    assert "GradScaler" not in out and "Module doc" not in out and "bare string" not in out and "Doc" not in out
    assert "autocast kept" in out and 'return f"{x}"' in out and "class Net:" in out
    assert [len(line.encode()) for line in out.split("\n")] == [len(line.encode()) for line in source.split("\n")]


def test_unparsable_or_lone_carriage_returns_give_none():
    assert without_docstrings("def (:\n") is None
    assert without_docstrings('"""doc"""\rx = 1\r') is None
    assert without_docstrings('"""doc"""\r\nx = 1\r\n') == '         \r\nx = 1\r\n'


def test_a_rule_gated_in_only_by_a_docstring_is_not_run():
    # AMP302's optimizer form needs the whole file; here "AdamW (" is only help text
    result = _lint('''
        import torch


        def make(args):
            """Build the optimizer: AdamW (the default) or SGD (lr=0.1).

            Use torch.float16 weights only with care.
            """
            return args
        ''')
    assert not result.parsed and result.diagnostics == []


def test_the_same_words_in_code_still_run_the_rule():
    result = _lint('''
        import torch


        def make(model):
            """Build the optimizer."""
            model.half()
            return torch.optim.AdamW(model.parameters())
        ''')
    assert result.parsed
    assert "AMP302" in [d.code for d in result.diagnostics]


def test_a_docstring_is_blanked_byte_for_byte_keeping_only_its_newlines():
    # each byte of the literal a space (a two-byte ü two spaces, a CR one), each newline kept
    source = 'x = 1\n"""ü\r\n  two"""\ny = "k"\n'
    assert without_docstrings(source) == "x = 1\n" + " " * 6 + "\n" + " " * 8 + '\ny = "k"\n'
