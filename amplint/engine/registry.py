"""Every shipped rule, discovered from the `amplint.rules` package.

A rule is a `Rule` subclass in a module of `rules/` (shipped as
`amplint.rules`); dropping a file there is all it takes to add one.

Gates without imports
---------------------
Rule modules import `amplint.model`, whose model imports libcst (about a third of
a second to import). Most runs never need it: a file that passes no selected
rule's gate is never parsed. So the engine does not import rule modules to
learn their gates; `rule_specs()` reads each rule module's *source* with the
stdlib `ast` and takes `code`, `severity`, `triggers`, `requires`
and `gate_regex` from the class body, where the exemplar's anatomy puts them as
literals (`gate_regex = re.compile(r"...", re.I)` is understood). A module
whose rule class does not spell these as literals (inherits them, computes
them) is simply imported, so the result is always what importing would give;
`tests/test_speed_gates.py` proves that for every shipped rule. Rule authors
need to do nothing beyond the exemplar's style.

A `RuleSpec` stands in for its rule class: `passes_gate` works without the
class, and any other attribute (or calling it) imports the module.
"""
from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import re
from functools import lru_cache
from typing import Any, Dict, Iterable, List, Optional, Pattern, Tuple, Type

from ..core.diagnostics import Severity
from ..core.gating import passing
from ..core.rule import Rule

PACKAGE = "amplint.rules"


class RuleSpec:
    """What the engine needs to know about a rule before parsing anything."""

    __slots__ = ("code", "severity", "triggers", "requires", "gate_regex", "gate_check", "gate_sites", "module", "text_only", "_cls")

    def __init__(
        self,
        code: str,
        severity: Severity,
        triggers: Tuple[str, ...],
        gate_regex: Optional[Pattern[str]],
        module: str,
        cls: Optional[Type[Rule]] = None,
        requires: Tuple[Tuple[str, ...], ...] = (),
        gate_check: Optional[str] = None,
        gate_sites: Optional[str] = None,
        text_only: bool = False,
    ) -> None:
        self.code = code
        self.text_only = text_only
        self.gate_check = gate_check
        self.gate_sites = gate_sites
        self.severity = severity
        self.triggers = tuple(triggers)
        self.requires = tuple(tuple(c) for c in requires)
        self.gate_regex = gate_regex
        self.module = module
        self._cls = cls

    def passes_gate(self, source: str) -> bool:
        return bool(passing((self,), source))

    def is_default(self) -> bool:
        return self.severity is not Severity.INFO

    def load(self) -> Type[Rule]:
        """The rule class (imports its module, and so libcst)."""
        if self._cls is None:
            module = importlib.import_module(self.module)
            for value in vars(module).values():
                if _is_rule_class(value, module.__name__) and value.code == self.code:
                    self._cls = value
                    break
            else:  # pragma: no cover - the static reading and the module disagree
                raise RuntimeError(f"{self.module} defines no rule {self.code}")
        return self._cls

    def __call__(self, *args: Any, **kwargs: Any) -> Rule:
        return self.load()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.load(), name)

    def __getstate__(self) -> tuple:
        return (
            self.code, self.severity, self.triggers, self.requires, self.gate_regex, self.gate_check, self.gate_sites,
            self.module, self.text_only,
        )

    def __setstate__(self, state: tuple) -> None:
        (
            self.code, self.severity, self.triggers, self.requires, self.gate_regex, self.gate_check, self.gate_sites,
            self.module, self.text_only,
        ) = state
        self._cls = None

    def __repr__(self) -> str:
        return f"RuleSpec({self.code}, {self.module})"

    def key(self) -> tuple:
        """What decides the gate (for tests and the cache fingerprint)."""
        regex = (self.gate_regex.pattern, self.gate_regex.flags) if self.gate_regex is not None else None
        key = (
            self.code, self.severity.value, self.triggers, self.requires, regex, self.gate_check, self.gate_sites,
            self.module,
        )
        return key + ("text-only",) if self.text_only else key

    @classmethod
    def of(cls, rule: Type[Rule]) -> "RuleSpec":
        requires = tuple(tuple(c) for c in getattr(rule, "requires", ()))
        return cls(
            rule.code, rule.severity, tuple(rule.triggers), rule.gate_regex, rule.__module__, rule, requires,
            getattr(rule, "gate_check", None), getattr(rule, "gate_sites", None), bool(getattr(rule, "text_only", False)),
        )


def _is_rule_class(value: object, module: str) -> bool:
    return isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.__module__ == module


# ------------------------------------------------------------------ discovery


def _modules() -> List[Tuple[str, Optional[str]]]:
    """(module name, path of its .py source or None) for every rule module, sorted."""
    import amplint.rules as package

    out = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        path = None
        folder = getattr(info.module_finder, "path", None)
        if folder and not info.ispkg:
            candidate = os.path.join(folder, info.name + ".py")
            if os.path.isfile(candidate):
                path = candidate
        out.append((f"{package.__name__}.{info.name}", path))
    return out


@lru_cache(maxsize=None)
def all_rules() -> Tuple[Type[Rule], ...]:
    """Every rule class (imports every rule module, and so libcst)."""
    found: Dict[str, Type[Rule]] = {}
    for name, _ in _modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if _is_rule_class(value, module.__name__):
                if value.code in found:
                    raise RuntimeError(f"two rules claim {value.code}: {found[value.code]} and {value}")
                found[value.code] = value
    return tuple(found[c] for c in sorted(found))


@lru_cache(maxsize=None)
def rule_specs() -> Tuple[RuleSpec, ...]:
    """Every rule's code, severity and gate, read without importing rule modules when possible."""
    found: Dict[str, RuleSpec] = {}
    for name, path in _modules():
        specs = None
        if path is not None:
            try:
                with open(path, encoding="utf-8") as fh:
                    source = fh.read()
                try:
                    specs = static_specs(_gate_part(source), name)
                except SyntaxError:
                    specs = static_specs(source, name)
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
                specs = None
        if specs is None:  # not readable as literals: import it
            module = importlib.import_module(name)
            specs = [RuleSpec.of(v) for v in vars(module).values() if _is_rule_class(v, module.__name__)]
        for spec in specs:
            if spec.code in found:
                raise RuntimeError(f"two rules claim {spec.code}: {found[spec.code].module} and {spec.module}")
            found[spec.code] = spec
    return tuple(found[c] for c in sorted(found))


def rules_by_code() -> Dict[str, Type[Rule]]:
    return {r.code: r for r in all_rules()}


def all_codes() -> List[str]:
    return [r.code for r in rule_specs()]


def default_codes() -> List[str]:
    return [r.code for r in rule_specs() if r.is_default()]


def select_rules(codes: Iterable[str]) -> List[Type[Rule]]:
    wanted = set(codes)
    return [r for r in all_rules() if r.code in wanted]


def select_specs(codes: Iterable[str]) -> List[RuleSpec]:
    wanted = set(codes)
    return [r for r in rule_specs() if r.code in wanted]


# ------------------------------------------------------------------ static reading


class _NotLiteral(Exception):
    pass


def _gate_part(source: str) -> str:
    """The rule class's header and attributes, up to its first example or method: where the
    exemplar's anatomy puts the gate. Parsing that instead of the whole module (docstring,
    examples, check code) keeps a warm run's start-up short; when the cut does not parse, the
    caller parses the whole text. (Leaving out what precedes an attribute only loosens a
    gate, never tightens it: tests/test_speed_gates.py compares with importing every rule.)"""
    header = re.search(r"^class \w+\((?:amplint\.)?Rule\):[^\n]*\n", source, re.M)
    if header is None:
        return source
    start = header.end()
    docstring = re.compile(r'[ \t]*(?:"""|\'\'\')').match(source, start)
    if docstring is not None:  # the rule's documentation: most of the text, none of the gate
        close = source.find(docstring.group(0).strip(), docstring.end())
        if close == -1:
            return source
        start = close + 3
    ends = [source.find(marker, start) for marker in ("\n    VALID", "\n    INVALID", "\n    def ", "\n    @")]
    ends = [e for e in ends if e != -1]
    if not ends:
        return source
    body = source[start : min(ends)]
    return header.group(0) + "    pass" + body + "\n"


def static_specs(source: str, module: str) -> Optional[List[RuleSpec]]:
    """The specs of the rule classes in `source`, or None when they are not plain literals.

    None makes the caller import the module, so an unusual rule costs time,
    never correctness.
    """
    tree = ast.parse(source)
    out: List[RuleSpec] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [_base_name(b) for b in node.bases]
        attrs: Dict[str, ast.expr] = {}
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                attrs[stmt.targets[0].id] = stmt.value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                attrs[stmt.target.id] = stmt.value
        if bases == ["Rule"] and "code" in attrs:
            try:
                out.append(
                    RuleSpec(
                        code=_string(attrs["code"]),
                        severity=_severity(attrs.get("severity")),
                        triggers=_triggers(attrs.get("triggers")),
                        gate_regex=_regex(attrs.get("gate_regex")),
                        module=module,
                        requires=_requires(attrs.get("requires")),
                        gate_check=_optional_string(attrs.get("gate_check")),
                        gate_sites=_optional_string(attrs.get("gate_sites")),
                        text_only=_bool(attrs.get("text_only")),
                    )
                )
            except _NotLiteral:
                return None
        elif "code" in attrs:
            # derives from another class (maybe a rule base that carries the
            # gate): import the module to be sure
            return None
    return out


def _base_name(node: ast.expr) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "amplint":
        return node.attr
    return None


def _string(node: Optional[ast.expr]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise _NotLiteral


def _bool(node: Optional[ast.expr]) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return node.value
    raise _NotLiteral


def _optional_string(node: Optional[ast.expr]) -> Optional[str]:
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return None
    return _string(node)


def _severity(node: Optional[ast.expr]) -> Severity:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Severity"
        and node.attr in Severity.__members__
    ):
        return Severity[node.attr]
    raise _NotLiteral


def _triggers(node: Optional[ast.expr]) -> Tuple[str, ...]:
    if node is None:
        return ()
    if not isinstance(node, (ast.Tuple, ast.List)):
        raise _NotLiteral
    try:
        value = ast.literal_eval(node)
    except ValueError:
        raise _NotLiteral from None
    if not all(isinstance(v, str) for v in value):
        raise _NotLiteral
    return tuple(value)


def _requires(node: Optional[ast.expr]) -> Tuple[Tuple[str, ...], ...]:
    if node is None:
        return ()
    if not isinstance(node, (ast.Tuple, ast.List)) or not all(isinstance(e, (ast.Tuple, ast.List)) for e in node.elts):
        raise _NotLiteral
    return tuple(_triggers(e) for e in node.elts)


def _regex(node: Optional[ast.expr]) -> Optional[Pattern[str]]:
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return None
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "re"
        and node.func.attr == "compile"
        and 1 <= len(node.args) <= 2
    ):
        raise _NotLiteral
    pattern = _string(node.args[0])
    flags_node = node.args[1] if len(node.args) == 2 else None
    for kw in node.keywords:
        if kw.arg == "flags" and flags_node is None:
            flags_node = kw.value
        else:
            raise _NotLiteral
    return re.compile(pattern, _flags(flags_node) if flags_node is not None else 0)


def _flags(node: ast.expr) -> int:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _flags(node.left) | _flags(node.right)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "re":
        value = getattr(re, node.attr, None)
        if isinstance(value, int):
            return int(value)
    raise _NotLiteral
