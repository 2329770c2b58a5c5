"""Fuzzing: amplint never raises and never reports an internal error (issue 7).

* generated programs (hypothesmith, from the Python grammar and from libcst
  nodes), each prefixed with a comment that passes every rule's gate so the
  programs are really parsed and analysed by every rule;
* seeded mutations (delete / duplicate / swap / re-indent / truncate lines)
  of every fixture and every rule's VALID and INVALID example;
* the same mutants through the fix machinery: a fix's output parses, fixing
  again changes nothing, and only the lines the applied edits name change.

Bounded for CI: a few hundred generated examples, derandomized, no example
database. `scripts/fuzz.py` runs the same properties for as long as you like.
"""
from __future__ import annotations

import difflib
import random
from pathlib import Path

import pytest

from amplint import Config, lint_source
from amplint.core.rule import example_source
from amplint.core.text import split_lines
from amplint.engine.pipeline import is_internal_error
from amplint.engine.registry import all_rules
from amplint.fix.apply import apply_fixes, fix_until_stable, parses

ALL = Config(select=("ALL",))
ROOT = Path(__file__).resolve().parent.parent


def gate_header() -> str:
    """A docstring line that passes every rule's gate (triggers, regexes and gate checks).

    Not a comment: the call gates skip comment lines (amplint/core/gates.py)."""
    words = {t for r in all_rules() for t in r.triggers}
    words |= {clause[0] for r in all_rules() for clause in getattr(r, "requires", ())}
    # what the rules' gate regexes and gate checks look for (a literal in context, a call)
    return (
        '"""' + " ".join(sorted(words))
        + " x.scale( x.step( unscale_( f(scaler) Scaler float False Adam( optim.SGD( torch.save( torch.load("
        + " MixedPrecision( x.bfloat16() initialize("  # the wrapper rules' gate regexes (issue 23)
        + " flash_attn_func("  # AMP304's gate: a flash-attn function called
        + ' autocast( x * 1e9 x + 1e-8 def forward"""\n'
    )


HEADER = gate_header()


def test_header_passes_every_gate():
    assert all(r.passes_gate(HEADER) for r in all_rules())


def check_never_raises(source: str) -> list:
    """The property: linting `source` with every rule returns, with no internal error."""
    found = lint_source(source, "fuzz.py", ALL)
    errors = [d.message for d in found if is_internal_error(d)]
    assert not errors, errors
    rows = split_lines(source)
    for d in found:
        assert 1 <= d.location.row <= max(len(rows), 1) + 1, d
        assert (d.location.row, d.location.column) <= (d.end_location.row, d.end_location.column), d
    return found


def check_fixes(source: str, found: list) -> None:
    """Fix output parses, is idempotent, and changes only the lines its edits name."""
    if not any(d.fix is not None for d in found) or not parses(source):
        return
    new, chosen = apply_fixes(source, found, unsafe=True)
    if not chosen:
        return
    assert parses(new), "a fix produced code that does not parse"
    touched = set()
    for d in chosen:
        for e in d.fix.edits:
            touched.update(range(e.location.row - 1, e.end_location.row + 1))
    old_lines, new_lines = split_lines(source, keepends=True), split_lines(new, keepends=True)
    for tag, i1, i2, _j1, _j2 in difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        # rows i1+1..i2 (1-based) changed; an insertion sits before row i1+1
        changed = set(range(i1, max(i2, i1 + 1)))
        assert changed & touched or (i1 in touched or i1 - 1 in touched), (tag, i1, i2, sorted(touched))

    def lint(text: str) -> list:
        return lint_source(text, "fuzz.py", ALL)

    once, _, _ = fix_until_stable(source, lint, True)
    assert parses(once)
    twice, fixed_again, _ = fix_until_stable(once, lint, True)
    assert twice == once and not fixed_again, "fixing twice changed the code again"


# ------------------------------------------------------------------ generated programs

hypothesis = pytest.importorskip("hypothesis")
hypothesmith = pytest.importorskip("hypothesmith")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

FUZZ_SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

# a sprinkle of AMP vocabulary so generated programs meet the rules' detectors
AMP_LINES = [
    "scaler = torch.cuda.amp.GradScaler()",
    "scaler.scale(loss).backward()",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "scaler.step(optimizer)",
    "scaler.update()",
    "optimizer.step()",
    "model = model.half()",
    "x = scores.masked_fill(mask, -1e9)",
    "loss = torch.nn.functional.binary_cross_entropy(torch.sigmoid(x), y)",
    "torch.save(model.state_dict(), 'm.pt')",
    "with torch.autocast('cuda', dtype=torch.float16):\n    loss = model(x)",
    "with torch.cuda.amp.autocast(enabled=False):\n    y = f(x)",
]


@settings(max_examples=100, **FUZZ_SETTINGS)
@given(hypothesmith.from_grammar())
def test_generated_programs_never_raise(source):
    check_never_raises(HEADER + source)


@settings(max_examples=25, **FUZZ_SETTINGS)  # from_node is slow to generate
@given(hypothesmith.from_node())
def test_generated_syntax_trees_never_raise(source):
    check_never_raises(HEADER + source)


@settings(max_examples=100, **FUZZ_SETTINGS)
@given(hypothesmith.from_grammar(), st.lists(st.sampled_from(AMP_LINES), max_size=8), st.randoms(use_true_random=False))
def test_generated_programs_with_amp_lines_never_raise(source, amp, rnd):
    lines = split_lines(source, keepends=True)
    for line in amp:
        lines.insert(rnd.randint(0, len(lines)), line + "\n")
    text = "import torch\n" + "".join(lines)
    found = check_never_raises(HEADER + text)
    check_fixes(HEADER + text, found)


# ------------------------------------------------------------------ mutations of real code


def corpus() -> list:
    out = []
    for path in sorted((ROOT / "fixtures").rglob("*.py")):
        out.append((f"fixture:{path.relative_to(ROOT / 'fixtures')}", path.read_text(encoding="utf-8", errors="replace")))
    for rule in all_rules():
        for kind in ("VALID", "INVALID"):
            for i, case in enumerate(getattr(rule, kind)):
                out.append((f"{rule.code}-{kind.lower()}-{i}", example_source(case.code)))
    return out


def mutate(source: str, rnd: random.Random) -> str:
    lines = split_lines(source, keepends=True) or ["\n"]
    for _ in range(rnd.randint(1, 3)):
        op = rnd.choice(("delete", "duplicate", "swap", "indent", "dedent", "truncate", "crlf", "join"))
        i = rnd.randrange(len(lines))
        j = rnd.randrange(len(lines))
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(j, lines[i])
        elif op == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "indent":
            lines[i] = "    " + lines[i]
        elif op == "dedent":
            lines[i] = lines[i][min(4, len(lines[i]) - len(lines[i].lstrip(" "))) :]
        elif op == "truncate":
            lines[i] = lines[i][: rnd.randrange(len(lines[i]) + 1)]
        elif op == "crlf":
            lines[i] = lines[i].replace("\n", "\r\n")
        elif op == "join" and i + 1 < len(lines):
            lines[i : i + 2] = [lines[i].rstrip("\r\n") + " " + lines[i + 1].lstrip()]
    return "".join(lines)


MUTANTS_PER_SOURCE = 3


@pytest.mark.parametrize("name,source", corpus(), ids=[n for n, _ in corpus()])
def test_mutated_code_never_raises_and_fixes_stay_safe(name, source):
    rnd = random.Random(f"amplint-fuzz:{name}")  # seeded: the same mutants every run
    check_fixes(source, check_never_raises(source))
    for _ in range(MUTANTS_PER_SOURCE):
        mutant = mutate(source, rnd)
        check_fixes(mutant, check_never_raises(mutant))
