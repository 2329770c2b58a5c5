"""What a rule is: one class with its code, docs, examples, gate and detector.

A rule reads the shared AMP model (`ModuleContext`) instead of walking the tree
itself, so every rule of a run costs one traversal in total.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable, Iterator, Optional, Pattern, Sequence, Tuple

from .diagnostics import Diagnostic, Severity

if TYPE_CHECKING:  # pragma: no cover
    from ..model.context import ModuleContext

DOCS_URL = "https://github.com/amplint/amplint/blob/main/docs/rules/{code}.md"


def example_source(code: str) -> str:
    """An example's text as a file: dedented, without the leading blank line."""
    import textwrap  # not at import: a run over cached results shows no example

    return textwrap.dedent(code).lstrip("\n")


@dataclass(frozen=True)
class Valid:
    """Code the rule must stay silent on."""

    code: str
    why: str = ""


@dataclass(frozen=True)
class Invalid:
    """Code the rule must flag.

    `line`: the 1-based row the first finding must start on (optional).
    `fixed`: the source after applying this rule's fixes (unsafe ones included).
    `count`: how many findings of this rule (default: at least one).
    """

    code: str
    line: Optional[int] = None
    fixed: Optional[str] = None
    count: Optional[int] = None
    why: str = ""


class Rule:
    """Base class of every rule. Subclasses set the class attributes and `check`."""

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity]
    message: ClassVar[str]
    #: substrings of which at least one must occur in a file for the rule to be
    #: able to fire; a file passing no selected rule's gate is never parsed
    triggers: ClassVar[Tuple[str, ...]] = ()
    #: more substring clauses that must all hold too: each is "at least one of
    #: these occurs" (`requires = (("autocast",),)`: the file also mentions
    #: autocast). Cheaper than a regex: every substring is searched once per
    #: file for all rules together.
    requires: ClassVar[Tuple[Tuple[str, ...], ...]] = ()
    #: an optional regex that must also match (after the substrings matched)
    gate_regex: ClassVar[Optional[Pattern[str]]] = None
    #: an optional text-level check, checked last: the name of a function in
    #: amplint/core/gates.py (`"amplint.core.gates:overflowing_literal_site"`), for a
    #: necessary condition that substrings and one regex cannot say
    gate_check: ClassVar[Optional[str]] = None
    #: optional: a function in amplint/core/gates.py returning the lines the rule can fire
    #: on or depends on (None: the whole file). When every rule a file passes has
    #: one, only the definitions holding those lines are parsed (amplint/engine/excerpt.py):
    #: top-level functions, and inside classes only the methods holding them; a
    #: `class` line among the lines keeps that class whole. Set it only if a
    #: finding never depends on other functions, or on more of its class than that
    gate_sites: ClassVar[Optional[str]] = None
    #: True for a rule that reads the file's text, not libcst's tree (`check_text`): a file whose
    #: passing rules are all such is never parsed by libcst (the wrapper rules of issue 23 read
    #: `ast` scale summaries); its `check(ctx)` runs `check_text(ctx.source, ctx.path)` when
    #: another rule had the file parsed anyway
    text_only: ClassVar[bool] = False
    VALID: ClassVar[Sequence[Valid]] = ()
    INVALID: ClassVar[Sequence[Invalid]] = ()

    def check(self, ctx: "ModuleContext") -> Iterable[Diagnostic]:  # pragma: no cover - abstract
        if self.text_only:
            return self.check_text(ctx.source, ctx.path)
        raise NotImplementedError

    def check_text(self, source: str, path: str) -> Iterable[Diagnostic]:  # pragma: no cover - abstract
        """A `text_only` rule's findings in one file's text."""
        raise NotImplementedError

    # ----------------------------------------------------------------- helpers

    @classmethod
    def passes_gate(cls, source: str) -> bool:
        from .gating import passing  # the one place gates are evaluated

        return bool(passing((cls,), source))

    @classmethod
    def url(cls) -> str:
        return DOCS_URL.format(code=cls.code)

    @classmethod
    def docs(cls) -> str:
        import inspect
        import textwrap

        return textwrap.dedent(inspect.getdoc(cls) or "").strip()

    @classmethod
    def summary(cls) -> str:
        """The first line of the docstring (used in rule tables)."""
        doc = cls.docs()
        for section in _sections(doc):
            if section[0].lower() == "what it does":
                return section[1].strip().split("\n\n")[0].replace("\n", " ")
        return doc.split("\n", 1)[0]

    @classmethod
    def is_default(cls) -> bool:
        return cls.severity is not Severity.INFO


def _sections(doc: str) -> Iterator[Tuple[str, str]]:
    parts = re.split(r"^## (.+)$", doc, flags=re.M)
    for i in range(1, len(parts) - 1, 2):
        yield parts[i].strip(), parts[i + 1]
