"""Code actions and hover for findings: a rule's fix (safe ones also in
`source.fixAll.amplint`, unsafe ones only as a labelled quick fix), "add
`# noqa: AMPxxx`", and the rule's explanation in short form."""
from __future__ import annotations

import re
from typing import AbstractSet, Any, Callable, Dict, List, Optional, Sequence, Set

from lsprotocol import types as lsp

from ..core.diagnostics import Applicability, Diagnostic, Location
from ..core.noqa import _NOQA  # the engine's own reading of a `# noqa` comment
from .protocol import Lines, text_edits, whole_document
from .verdicts import hover_line

FIX_ALL = "source.fixAll.amplint"


def overlaps(d: Diagnostic, start: Location, end: Location) -> bool:
    """Whether the finding's span touches [start, end] (an empty range: the cursor)."""
    return d.location <= end and start <= d.end_location


def withdrawn(findings: Sequence[Diagnostic], source: str, lint: Callable[[str], List[Diagnostic]], cache: Dict[str, Any]) -> Set[tuple]:
    """The fix keys (`fix.apply.fix_key`) of the fixes of `findings` that `amplint --fix` would
    drop on `source`, checked by the CLI's own code (`fix.fixer.dropped_fixes`, re-linted with
    the buffer's `lint`): safe fixes as `--fix` applies them, unsafe ones as `--fix
    --unsafe-fixes` does. `cache`: the document's lint's memo (one check per text)."""
    if "dropped" not in cache:
        from ..fix.fixer import dropped_fixes

        cache["dropped"] = set(dropped_fixes(source, lint, [d for d in findings if d.fix is not None], unsafe=False))
    return cache["dropped"]


def fix_action(d: Diagnostic, lines: Lines, uri: str, dropped: AbstractSet[tuple] = frozenset()) -> Optional[lsp.CodeAction]:
    """The finding's fix, offered only when `amplint --fix` would apply it (`dropped`: see
    `withdrawn`; a notebook cell's fixes are checked on `--fix`)."""
    if d.fix is None:
        return None
    from ..fix.apply import fix_key

    if fix_key(d) in dropped:
        return None
    safe = d.fix.applicability == Applicability.SAFE
    label = d.fix.message if safe else f"{d.fix.message} (unsafe: review the change)"
    return lsp.CodeAction(
        title=f"{d.code}: {label}",
        kind=lsp.CodeActionKind.QuickFix,
        is_preferred=safe,
        edit=lsp.WorkspaceEdit(changes={uri: text_edits(d.fix.edits, lines)}),
    )


def noqa_action(d: Diagnostic, lines: Lines, uri: str) -> Optional[lsp.CodeAction]:
    """Append the code to the `# noqa` of the finding's noqa row (or add one)."""
    row = d.noqa_row or d.location.row
    if row - 1 >= len(lines.lines):
        return None
    line = lines.lines[row - 1]
    m = _NOQA.search(line) if "#" in line else None
    if m is not None and m.group("codes") is None:
        return None  # a bare `# noqa` already silences every code
    if m is not None:
        new_line = line[: m.end()] + f", {d.code}" + line[m.end():]
    else:
        new_line = line.rstrip() + f"  # noqa: {d.code}"
    edit = lsp.TextEdit(range=lines.range(Location(row, 1), Location(row, len(line) + 1)), new_text=new_line)
    return lsp.CodeAction(
        title=f"{d.code}: add `# noqa: {d.code}`",
        kind=lsp.CodeActionKind.QuickFix,
        edit=lsp.WorkspaceEdit(changes={uri: [edit]}),
    )


def fix_all_action(source: str, uri: str, lint: Callable[[str], List[Diagnostic]]) -> Optional[lsp.CodeAction]:
    """Every safe fix, applied until the text is stable (as `amplint --fix`); None: nothing to fix."""
    from ..fix.apply import fix_until_stable

    fixed, done, _ = fix_until_stable(source, lint, False)  # checks each pass as --fix does
    if not done or fixed == source:
        return None
    return lsp.CodeAction(
        title="amplint: fix all safe fixes",
        kind=FIX_ALL,
        edit=lsp.WorkspaceEdit(changes={uri: [whole_document(source, fixed)]}),
    )


def actions_for(
    diagnostics: Sequence[Diagnostic], lines: Lines, uri: str, start: Location, end: Location, dropped: Callable[[], AbstractSet[tuple]] = frozenset
) -> List[lsp.CodeAction]:
    """The quick fixes for the findings at [start, end]; `dropped()`: the fixes `--fix` would
    drop (asked only when a finding there has a fix)."""
    out: List[lsp.CodeAction] = []
    here = [d for d in diagnostics if overlaps(d, start, end)]
    withheld = dropped() if any(d.fix is not None for d in here) else frozenset()
    for d in here:
        for action in (fix_action(d, lines, uri, withheld), noqa_action(d, lines, uri)):
            if action is not None:
                out.append(action)
    return out


def hover_text(d: Diagnostic) -> str:
    """The finding's message and its rule's page, short form (`--explain` up to the example)."""
    from ..engine.registry import rules_by_code

    head = f"**{d.code}** `{d.name}` ({d.severity.value})\n\n{_escape(d.message)}"
    verdict = hover_line(d)
    if verdict is not None:
        head += f"\n\n{_escape(verdict)}"
    rule = rules_by_code().get(d.code)
    if rule is None:
        return head
    docs = rule.docs()
    short = docs.split("\n## Example", 1)[0].strip()
    link = f"\n\n[{d.code} documentation]({d.url})" if d.url else ""
    return f"{head}\n\n{short}{link}"


def _escape(text: str) -> str:
    """Markdown-escape a message: it quotes the user's code, which may hold markup."""
    return re.sub(r"([\\`*_{}\[\]<>()#+!|])", r"\\\1", text)
