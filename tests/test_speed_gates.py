"""Gates are read without importing rule modules, agree with the classes, and are sound.

Sound means: a necessary condition. Beyond every rule's INVALID examples
(tests/test_rule_examples.py), each rule runs here with its gate bypassed on
every example of every rule, the fixtures and real files, and every finding
it makes must be in a text its gate passes.
"""
from __future__ import annotations

import glob
import os
import pickle
import re

import libcst as cst
import pytest

from amplint.core.docstrings import without_docstrings
from amplint.core.gating import passing
from amplint.core.rule import example_source
from amplint.engine.registry import RuleSpec, all_rules, rule_specs, static_specs
from amplint.model.context import ModuleContext

HERE = os.path.dirname(os.path.abspath(__file__))


def test_static_specs_equal_the_imported_classes():
    static = {s.code: s.key() for s in rule_specs()}
    imported = {r.code: RuleSpec.of(r).key() for r in all_rules()}
    assert static == imported


def test_every_rule_is_read_statically():
    """A rule in the exemplar's style never needs its module imported to gate."""
    assert _static_codes() == {r.code for r in all_rules()}


def _static_codes():
    codes = set()
    for path in glob.glob(os.path.join(HERE, "..", "rules", "amp*.py")):
        with open(path, encoding="utf-8") as fh:
            specs = static_specs(fh.read(), "x")
        assert specs is not None, f"{path}: gate not readable without importing"
        codes |= {s.code for s in specs}
    return codes


@pytest.mark.parametrize(
    "source",
    [
        # inherits its gate from a base class
        "from amplint import Rule\nclass Base(Rule):\n    triggers = ('x',)\nclass R(Base):\n    code = 'AMP999'\n",
        # a computed gate
        "from amplint import Rule\nT = ('a',)\nclass R(Rule):\n    code = 'AMP999'\n    severity = Severity.ERROR\n    triggers = T\n",
        "from amplint import Rule\nclass R(Rule):\n    code = 'AMP999'\n    severity = Severity.ERROR\n    gate_regex = make()\n",
        "from amplint import Rule\nclass R(Rule):\n    code = 'AMP999'\n    severity = Severity.ERROR\n    triggers = 'abc'\n",
    ],
)
def test_unusual_rules_fall_back_to_importing(source):
    assert static_specs(source, "x") is None


def test_static_reading_of_a_regex_gate():
    source = (
        "import re\nfrom amplint import Rule, Severity\nclass R(Rule):\n    code = 'AMP999'\n    severity = Severity.INFO\n"
        "    triggers = ('a', 'b')\n    requires = (('k', 'l'),)\n    gate_regex = re.compile(r'x\\d+', re.I | re.M)\n"
    )
    (spec,) = static_specs(source, "m")
    assert spec.key() == ("AMP999", "info", ("a", "b"), (("k", "l"),), (r"x\d+", re.I | re.M | re.U), None, None, "m")
    assert not spec.is_default()
    assert spec.passes_gate("a k X12") and not spec.passes_gate("a k y") and not spec.passes_gate("k X12")
    assert not spec.passes_gate("a X12"), "the requires clause must hold too"


def test_static_reading_of_a_gate_check():
    source = (
        "from amplint import Rule, Severity\nclass R(Rule):\n    code = 'AMP999'\n    severity = Severity.ERROR\n"
        "    gate_check = 'amplint.core.gates:overflowing_literal_site'\n"
    )
    (spec,) = static_specs(source, "m")
    assert spec.gate_check == "amplint.core.gates:overflowing_literal_site"
    assert spec.passes_gate("x = y.masked_fill(m, -1e9)")
    assert not spec.passes_gate("vocab_size: int = 151655")
    assert passing([spec], "x = y.masked_fill(m, -1e9)") == [spec]
    assert pickle.loads(pickle.dumps(spec)).gate_check == spec.gate_check


def _examples():
    for rule in all_rules():
        for i, case in enumerate((*rule.VALID, *rule.INVALID)):
            yield f"{rule.code}-{i}", example_source(case.code)


@pytest.mark.parametrize("code", [r.code for r in all_rules()])
def test_invalid_examples_pass_the_static_gate(code):
    spec = next(s for s in rule_specs() if s.code == code)
    rule = spec.load()
    for case in rule.INVALID:
        assert spec.passes_gate(example_source(case.code))


def _corpus():
    texts = dict(_examples())
    for path in sorted(glob.glob(os.path.join(HERE, "..", "fixtures", "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as fh:
            texts[os.path.basename(path)] = fh.read()
    return texts


def test_gates_are_necessary_conditions_on_the_whole_corpus():
    """Run every rule without its gate on every text; findings only where the gate passes."""
    rules = all_rules()
    specs = {s.code: s for s in rule_specs()}
    problems = []
    for name, source in _corpus().items():
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError:
            continue
        ctx = ModuleContext.build(module, source, name)
        blanked = without_docstrings(source)
        for rule in rules:
            found = list(rule().check(ctx))
            if found and not specs[rule.code].passes_gate(source):
                problems.append(f"{rule.code} fires on {name} but its gate fails")
            if found and blanked is not None and not specs[rule.code].passes_gate(blanked):
                problems.append(f"{rule.code} fires on {name} but its gate fails once docstrings are blanked")
    assert not problems, problems


def test_passing_equals_each_rule_alone():
    specs = list(rule_specs())
    for _, source in _corpus().items():
        assert passing(specs, source) == [s for s in specs if s.passes_gate(source)]
    texts = ["", "autocast", "register_autocast only", "float16 save", "x = 1e9", "x=float8_e5m2", "unscale_ .update("]
    for text in texts:
        assert passing(specs, text) == [s for s in specs if s.passes_gate(text)]


def test_every_guard_stands_for_several_triggers():
    """A guard is searched to spare the scans of the triggers holding it: one held by fewer
    than two triggers would only add a scan."""
    from amplint.core.gating import GUARDS

    triggers = {t for s in rule_specs() for t in s.triggers}
    for guard in GUARDS:
        assert sum(guard in t for t in triggers) >= 2, guard
