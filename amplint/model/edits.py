"""Building and applying fixes.

Rules build edits from nodes (`replace_node`, `insert_line_before`); the
engine applies them as text edits. A set of edits is applied only when the
result still parses, so a fix can never turn working code into a syntax error.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from ..core.diagnostics import Applicability, Edit, Fix, Location
from ..core.text import _LINE_BREAK, split_lines

if TYPE_CHECKING:  # pragma: no cover
    import libcst as cst

    from .context import ModuleContext


# ----------------------------------------------------------------- building


def replace_node(ctx: "ModuleContext", node: "cst.CSTNode", text: str) -> Edit:
    start, end = ctx.position(node)
    return Edit(start, end, text)


def insert_line_before(ctx: "ModuleContext", statement: "cst.CSTNode", line: str) -> Edit:
    """Insert `line` as a new statement before `statement`, at its indentation
    and with the line ending that row uses (a CRLF file stays CRLF)."""
    start, _ = ctx.position(statement)
    indent = _indent_of_row(ctx.source, start.row)
    return Edit(Location(start.row, 1), Location(start.row, 1), f"{indent}{line}{_ending_of_row(ctx.source, start.row)}")


def _indent_of_row(source: str, row: int) -> str:
    lines = split_lines(source)
    if 0 < row <= len(lines):
        line = lines[row - 1]
        return line[: len(line) - len(line.lstrip(" \t\x0c"))]
    return ""


def _ending_of_row(source: str, row: int) -> str:
    lines = split_lines(source, keepends=True)
    if 0 < row <= len(lines):
        m = _LINE_BREAK.search(lines[row - 1])
        if m is not None:
            return m.group(0)
    return "\n"


def make_fix(message: str, edits: Sequence[Edit], safe: bool) -> Fix:
    return Fix(Applicability.SAFE if safe else Applicability.UNSAFE, message, tuple(edits))


# ----------------------------------------------------------------- imports
#
# Fixes that rewrite `autocast(...)` (imported with `from torch.cuda.amp import
# autocast`) to `torch.amp.autocast("cuda", ...)` need a usable `torch` binding
# and should drop the import that becomes unused. These helpers only touch
# module-level import statements, where the binding is visible everywhere.


def _top_level_imports(ctx: "ModuleContext"):
    """(SimpleStatementLine, Import|ImportFrom) for every module-level import."""
    import libcst as cst

    for line in ctx.module.body:
        if isinstance(line, cst.SimpleStatementLine):
            for stmt in line.body:
                if isinstance(stmt, (cst.Import, cst.ImportFrom)):
                    yield line, stmt


def _nested_imports(ctx: "ModuleContext"):
    """(SimpleStatementLine, Import|ImportFrom) for every import inside a function, class or block."""
    import libcst as cst

    found = []
    top = set(id(line) for line in ctx.module.body)

    class Collect(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, line: cst.SimpleStatementLine) -> bool:
            if id(line) not in top:
                found.extend((line, s) for s in line.body if isinstance(s, (cst.Import, cst.ImportFrom)))
            return False

    ctx.module.visit(Collect())
    return found


def module_alias(ctx: "ModuleContext", module: str) -> Optional[str]:
    """The local name under which a module-level `import module` / `import
    module as alias` / `import module.sub` makes `module` usable, or None.

    A name that is also rebound in the file (assigned, a parameter...) does not count.
    """
    import libcst as cst

    from .names import dotted_name

    for _, stmt in _top_level_imports(ctx):
        if not isinstance(stmt, cst.Import):
            continue
        for alias in stmt.names:
            full = dotted_name(alias.name) or ""
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
                if full != module:
                    continue
            else:
                local = full.split(".")[0]
                if local != module:
                    continue
            if ctx.imports.qualnames(cst.Name(local)) == frozenset({module}) and not ctx.is_rebound(local):
                return local
    return None


def can_bind(ctx: "ModuleContext", name: str) -> bool:
    """True when `name` is free in the file: adding `import name` shadows nothing."""
    return not ctx.imports.is_imported(name) and not ctx.is_rebound(name)


def ensure_import(ctx: "ModuleContext", module: str) -> Optional[Edit]:
    """An Edit adding `import module` at the top of the file, or None when a
    module-level import already binds it under its own name (see `module_alias`).

    The line goes before the first module-level import that is not
    `from __future__`, else after the docstring and `__future__` imports.
    Callers check `can_bind` first when the name may be taken.
    """
    import libcst as cst

    if module_alias(ctx, module) == module:
        return None
    row = None
    after = None
    for i, line in enumerate(ctx.module.body):
        if isinstance(line, cst.SimpleStatementLine):
            stmt = line.body[0] if line.body else None
            if isinstance(stmt, cst.ImportFrom) and _is_future(stmt):
                after = line
                continue
            if isinstance(stmt, (cst.Import, cst.ImportFrom)):
                row = ctx.position(line)[0].row
                break
            if i == 0 and isinstance(stmt, cst.Expr) and isinstance(stmt.value, (cst.SimpleString, cst.ConcatenatedString)):
                after = line
                continue
        break
    text = f"import {module}\n"
    if row is None:
        if after is None:
            # before the first statement, so a shebang / coding line / license header stays first
            row = ctx.position(ctx.module.body[0])[0].row if ctx.module.body else len(ctx.source.splitlines()) + 1
        else:
            row = ctx.position(after)[1].row + 1
            if row > len(split_lines(ctx.source)) and not ctx.source.endswith("\n"):
                return Edit(Location(row, 1), Location(row, 1), "\n" + text)
    return Edit(Location(row, 1), Location(row, 1), text)


def _is_future(stmt) -> bool:
    from .names import dotted_name

    return stmt.module is not None and dotted_name(stmt.module) == "__future__"


def name_uses(ctx: "ModuleContext", name: str) -> list:
    """Every reference whose chain starts with the imported name `name`."""
    return [r for r in ctx.references() if r.root == name]


def drop_imported_name(ctx: "ModuleContext", name: str, prefix: str = "", nested: bool = False) -> Optional[Edit]:
    """An Edit removing `name` from the module-level `from m import ...` (or
    `import m as name`) that binds it (the whole line when nothing else is left), with `prefix`
    (e.g. "import torch\\n") written in its place. None when `name` is not bound
    by exactly one such statement, the statement shares its line with another
    statement, or the module re-exports names (`__all__`, `__init__.py`).
    `nested`: look at the imports inside functions and blocks instead (the line
    is replaced by `prefix`, indented like it).
    """
    import libcst as cst

    if "__all__" in ctx.source or ctx.path.replace("\\", "/").endswith("__init__.py"):
        return None
    found = []
    for line, stmt in _nested_imports(ctx) if nested else _top_level_imports(ctx):
        if isinstance(stmt.names, cst.ImportStar):
            continue
        for alias in stmt.names:
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            elif isinstance(stmt, cst.ImportFrom) and isinstance(alias.name, cst.Name):
                local = alias.name.value
            else:
                local = None  # `import a.b` binds `a`, which other code may use
            if local == name:
                found.append((line, stmt, alias))
    if len(found) != 1:
        return None
    line, stmt, alias = found[0]
    if len(line.body) != 1:
        return None
    kept = [a for a in stmt.names if a is not alias]
    if not kept:
        start, _ = ctx.position(line)
        _, end = ctx.position(line)
        if nested and _sole_statement(ctx, line):
            prefix = _indent_of_row(ctx.source, start.row) + "pass\n"  # a block cannot be empty
        # the statement's whole line, with its newline
        return Edit(Location(start.row, 1), Location(end.row + 1, 1), prefix)
    kept = list(kept)
    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    new_stmt = stmt.with_changes(names=kept)
    start, end = ctx.position(stmt)
    text = ctx.module.code_for_node(new_stmt)
    if prefix and not nested:
        indent_row = start.row
        return Edit(Location(indent_row, 1), end, prefix + _indent_of_row(ctx.source, indent_row) + text)
    return Edit(start, end, text)


def _sole_statement(ctx: "ModuleContext", line) -> bool:
    """Whether `line` is the only statement of its block (removing it would empty the block)."""
    block = ctx.parent(line)
    body = getattr(block, "body", None)
    return isinstance(body, (list, tuple)) and len(body) == 1


def is_suppressed(ctx: "ModuleContext", node: "cst.CSTNode", code: str) -> bool:
    """True when a `# noqa` (bare or naming `code`) on the node's first row
    suppresses a finding there: a fix must not rely on such a finding being fixed."""
    from ..core.noqa import noqa_map

    rows = noqa_map(ctx.source)
    if not rows:
        return False
    row = ctx.position(node)[0].row
    return row in rows and (rows[row] is None or code in rows[row])


def call_is_plain(call: "cst.Call") -> bool:
    """No `*args`/`**kwargs` and no parentheses around the call itself, so its
    arguments can be mapped and edited one by one."""
    return not call.lpar and not call.rpar and all(not a.star for a in call.args)


def insert_keyword_edits(ctx: "ModuleContext", call: "cst.Call", keywords: Sequence[Optional[str]], first: str = "") -> List[Edit]:
    """Edits turning the positional arguments of `call` into keyword arguments.

    `keywords[i]` names the i-th positional argument (None keeps it positional);
    `first` is text inserted before the first argument (e.g. '"cuda", ').
    Formatting and comments between arguments are kept.
    """
    edits: List[Edit] = []
    positional = [a for a in call.args if a.keyword is None]
    for i, arg in enumerate(positional):
        kw = keywords[i] if i < len(keywords) else None
        start, _ = ctx.position(arg)
        text = (first if arg is call.args[0] else "") + (f"{kw}=" if kw else "")
        if text:
            edits.append(Edit(start, start, text))
    if first and call.args and call.args[0].keyword is not None:
        start, _ = ctx.position(call.args[0])
        edits.append(Edit(start, start, first))
    return edits


def append_argument_edit(ctx: "ModuleContext", call: "cst.Call", text: str) -> Edit:
    """An Edit adding `text` (e.g. 'device_type="cuda"') as the call's last argument."""
    import libcst as cst

    _, end = ctx.position(call)
    before_paren = Location(end.row, end.column - 1)
    if not call.args:
        return Edit(before_paren, before_paren, text)
    last = call.args[-1]
    if isinstance(last.comma, cst.Comma):
        return Edit(before_paren, before_paren, text)
    _, last_end = ctx.position(last)
    return Edit(last_end, last_end, f", {text}")


def torch_prefix(ctx: "ModuleContext", root: Optional[str] = None) -> Tuple[Optional[str], bool]:
    """(the name to spell `torch` with, whether `import torch` must be added).

    `root` is the first name of the reference being rewritten: when it is
    itself bound to `torch` it is used. (None, False) when no name is usable
    (`torch` is taken by something else).
    """
    import libcst as cst

    if root is not None and ctx.imports.qualnames(cst.Name(root)) == frozenset({"torch"}) and not ctx.is_rebound(root):
        return root, False
    alias = module_alias(ctx, "torch")
    if alias is not None:
        return alias, False
    if can_bind(ctx, "torch"):
        return "torch", True
    return None, False


def rewrite_with_imports(ctx: "ModuleContext", code: str, ref, flagged: Sequence, rewrite) -> Optional[List[Edit]]:
    """The edits of one fix that rewrites the reference `ref` to a `torch.`-spelled
    API, keeping imports right.

    `flagged` are the references this rule flags in the file and `rewrite(r,
    prefix)` returns the edits rewriting reference `r` with `prefix` for `torch`
    (None if `r` cannot be rewritten). When `ref`'s first name comes from a
    `from ... import` that every one of its uses is flagged, fixable and not
    `# noqa`-suppressed, the fix rewrites all those uses at once and drops the
    import (writing `import torch` in its place when needed); otherwise it
    rewrites `ref` alone and adds `import torch` when the file lacks it.
    """
    prefix, need_import = torch_prefix(ctx, ref.root)
    if prefix is None:
        return None
    own = rewrite(ref, prefix)
    if own is None:
        return None
    if prefix != ref.root:
        uses = name_uses(ctx, ref.root)
        flagged_ids = {id(r.node) for r in flagged}
        if uses and all(id(u.node) in flagged_ids for u in uses) and not any(is_suppressed(ctx, u.node, code) for u in uses):
            group: List[Edit] = []
            for u in uses:
                edits = own if u is ref else rewrite(u, prefix)
                if edits is None:
                    group = []
                    break
                group.extend(edits)
            if group:
                drop = drop_imported_name(ctx, ref.root, "import torch\n" if need_import else "")
                if drop is not None:
                    return group + [drop]
                # a function-local import: the uses now name `torch`, bound at the top
                drop = drop_imported_name(ctx, ref.root, nested=True)
                added = ensure_import(ctx, prefix) if need_import else None
                if drop is not None and (added is not None or not need_import):
                    return group + [drop] + ([added] if added is not None else [])
    if need_import:
        added = ensure_import(ctx, prefix)
        if added is not None:
            return own + [added]
    return own
