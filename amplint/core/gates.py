"""Text-level gates that substrings and one regex cannot express.

A rule's gate is a necessary condition for it to fire, checked on the raw text
before anything is parsed (docs/performance.md). Most rules say it with
`triggers` / `requires` / `gate_regex`. A rule whose condition is "a token of
this kind, in one of these surroundings" names a function here with
`gate_check = "amplint.core.gates:function_name"`.

Everything here must stay cheap and must not import libcst: these functions
run on every file of a monorepo, and a file that fails its gates is never
parsed. Each function must be *sound*: it returns True for every text on
which its rule can fire (tests/test_speed_gates.py holds every rule to that on
its examples and the fixtures); a False positive only costs a parse.
"""
from __future__ import annotations

import re
import warnings
from bisect import bisect_left
from functools import lru_cache
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple, Union

try:  # CPython's symbol table, made in C (`_defined_by_scopes`); other interpreters: the ast tree
    import _symtable
except ImportError:  # pragma: no cover
    _symtable = None  # type: ignore[assignment]

FP16_MAX = 65504.0

# -------------------------------------------------------------------- prose
#
# Gates look for words, and ML code says its words in comments, docstrings and
# error messages too ("use `torch.autocast(...)`", ">>> torch.load(file)").
# `in_prose` tells those apart where that is certain from the line alone.


def in_prose(source: str, at: int) -> bool:
    """Whether source[at] certainly lies in a comment, a doctest line or a string literal.

    Read from the start of its line, which is code or inside a string: either
    way a position the quotes put inside a string or after a `#` is no code.
    False when unsure (a triple quote before it on the line, a line continued
    with a backslash, an f-string's `{field}`), so a gate never loses code.
    """
    line_start = source.rfind("\n", 0, at) + 1
    return _prose_head(source[line_start:at], source[max(0, line_start - 2) : line_start] == "\\\n")


def _in_prose_bytes(data: bytes, at: int) -> bool:
    """`in_prose` for the encoded text (`at` on an ASCII character)."""
    line_start = data.rfind(b"\n", 0, at) + 1
    head = data[line_start:at].decode("utf-8", "replace")
    return _prose_head(head, data[max(0, line_start - 2) : line_start] == b"\\\n")


def _prose_head(head: str, continued: bool) -> bool:
    """Whether the end of `head`, the text of a line before a position, is in prose."""
    if head.lstrip().startswith(">>>"):
        return True
    if continued or '"""' in head or "\'\'\'" in head:
        return False
    quote = ""
    formatted = False
    i = 0
    while i < len(head):
        c = head[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
            elif c == "{" and formatted:
                if head[i + 1 : i + 2] == "{":  # a literal brace
                    i += 2
                    continue
                close = _field_end(head, i)
                if close == -1 or quote in head[i:close]:
                    return False  # the position may be code inside the field
                i = close
        elif c == "#":
            return True
        elif c in "\"\'":
            quote = c
            j = i
            while j > 0 and head[j - 1] in "rRbBuUfF":
                j -= 1
            formatted = "f" in head[j:i].lower()
        i += 1
    return bool(quote)


def _field_end(text: str, i: int) -> int:
    """The index of the `}` closing the f-string field opened at text[i]; -1 if not in `text`."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return -1


# -------------------------------------------------------------------- AMP301

#: digits -> "0", and the letters of exponents and of hex/octal/binary prefixes to one
#: letter each, so a few substring searches find every run of five digits, every
#: digit-exponent pair, digit group and number prefix, whatever the digits are
_NUMBER_SHAPE = bytes.maketrans(b"123456789EXoObB", b"000000000exxxxx")
#: in the translated text: substrings that every number literal above 65504 contains
#: (5+ digits, an exponent, a digit group, or a hex/octal/binary prefix)
_BIG_NUMBER_HINTS = (b"00000", b"0e0", b".e0", b"e+0", b"0_0", b"0x")
#: what `[\w.]` matches in a bytes pattern: a number token is a run of these (and exponent signs)
_WORD_BYTE = tuple(chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_.") for c in range(256))
_WORD_RUN = re.compile(rb"[\w.]*")
#: one number literal, with token boundaries
_NUMBER = re.compile(
    rb"(?<![\w.])(?:0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+"
    rb"|(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?)(?![\w.])"
)
#: a call of a fill-like function or method AMP301 knows (or an import alias of one)
_FILL_CALL = re.compile(
    rb"\b(?:masked_fill_?|fill_|new_full|index_fill_?|full(?:_like)?|where)\s*\("
    rb"|\b(?:masked_fill_?|index_fill_?|full(?:_like)?|where)\s+as\s"
)
_FILL_NAMES = (b"masked_fill", b"masked_fill_", b"fill_", b"new_full", b"index_fill", b"index_fill_", b"full", b"full_like", b"where")
#: keywords that name a fill value in those calls
_FILL_KEYWORDS = (b"value", b"fill_value", b"other", b"input")
_SPACE = b" \t\r\n\\"
_OPERAND_END = re.compile(rb"[\w)\]'\"]")
_ASSIGNED_NAME = re.compile(rb"[ \t]*([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?")


def overflowing_literal_site(source: str) -> bool:
    """AMP301's gate: a number literal beyond fp16's range, where AMP301 looks for one.

    The rule flags such a constant only (a) as an argument of a fill-like call
    (`masked_fill(m, -1e9)`, `torch.full(s, 1e10)`, `torch.where(m, -1e9, x)`),
    (b) as an operand of `+`/`-` inside a softmax, (c) multiplied into an
    additive mask (`(1 - m) * -1e9`), (d) in `x += c` / `x -= c`, or (e) as the
    whole value of `NAME = c` where NAME is later passed to a fill call. (b)-(d)
    never flag integers. Config defaults (`vocab_size: int = 151655`),
    comparisons (`cp >= 0x20000`), docstrings ("defaults to 100000") and
    containers are none of these, and they are most of the big numbers in
    model code, so this reads the characters around each big literal.
    """
    return bool(_overflowing_literal_site_list(source))


def overflowing_literal_lines(source: str) -> Optional[Set[int]]:
    """The lines AMP301 can flag, or depends on: each candidate literal's line and, for
    `NAME = literal`, every line that mentions NAME (its uses and any reassignment); for a
    site in a private module-level function, every line that names the function (its calls);
    for a site in a class, the `class` line of it and of its bases defined in the file (the
    buffers `__init__` registers, the helper methods whose results it reads); and the
    `def` line of every module-level function a kept definition calls, transitively (what
    such a helper returns).

    What the rule reads about a literal is in those definitions (the tensor's assignments,
    its autocast region) and module-level imports, so only they are parsed
    (amplint/engine/excerpt.py: a `class` line keeps its class whole)."""
    data = source.encode("utf-8", "surrogatepass")
    row = _Rows(data)
    lines: Set[int] = set()
    for start, name in _overflowing_literal_site_list(source):
        lines.add(row(start))
        if name:
            lines |= _mentions(data, name, row)
    if not lines:
        return lines
    tops = [(m.start(), m.group(1), m.group(2), m.group(3) or b"") for m in _TOP_LEVEL_DEFINITION.finditer(data)]
    starts = [row(at) for at, _, _, _ in tops]
    by_name = {name: i for i, (_, _, name, _) in enumerate(tops)}
    kept: Set[int] = set()
    for line in sorted(lines):
        i = bisect_left(starts, line + 1) - 1
        if i < 0:
            continue
        kind, name = tops[i][1], tops[i][2]
        if kind == b"def" and name.startswith(b"_") and not name.startswith(b"__"):
            # a tensor that is a parameter of a private module-level function takes its dtype
            # from the calls in this file: keep every line naming the function
            lines |= _mentions(data, name, row)
        kept.add(i)
    todo = sorted(kept)
    while todo:
        i = todo.pop()
        at, kind, _, bases = tops[i]
        end = tops[i + 1][0] if i + 1 < len(tops) else len(data)
        wanted = set(re.findall(rb"\w+", bases)) if kind == b"class" else set()  # its bases
        called = set(_CALLED.findall(data, at, end))  # the module-level functions it calls
        for n in wanted | called:
            j = by_name.get(n)
            if j is not None and j not in kept and (n in wanted or tops[j][1] == b"def"):
                kept.add(j)
                todo.append(j)
    lines.update(starts[i] for i in kept)
    return lines


#: a `def` or `class` at column 0 (its kind, name and the text of a class's bases): the
#: definition holding the lines below it, up to the next one
_TOP_LEVEL_DEFINITION = re.compile(rb"^(?:async[ \t]+)?(def|class)[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?", re.M)
#: a name called (`helper(x)`, `self._shift(x)`'s `_shift`)
_CALLED = re.compile(rb"(\w+)[ \t]*\(")


def _mentions(data: bytes, name: bytes, row: "_Rows") -> Set[int]:
    return {row(m.start()) for m in re.finditer(rb"\b%s\b" % re.escape(name), data)}


class _Rows:
    """The 1-based line of a byte offset, by bisection in the offsets of the newlines (found
    once): counting the newlines before each site cost the file's size per site, quadratic
    in a file where every line holds one."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.newlines: Optional[List[int]] = None

    def __call__(self, offset: int) -> int:
        if self.newlines is None:
            self.newlines = [m.start() for m in re.finditer(b"\n", self.data)]
        return bisect_left(self.newlines, offset) + 1


@lru_cache(maxsize=4)
def _overflowing_literal_site_list(source: str) -> Tuple[Tuple[int, bytes], ...]:
    """(byte offset, NAME or b"") of every literal that passes `_big_site`.

    Cached for the few texts in flight: the gate and the site function of a
    file that passes ask for the same scan (a str caches its own hash)."""
    data = source.encode("utf-8", "surrogatepass")
    facts = _FileFacts(source, data)
    sites = []
    for start, end in _number_tokens(data, _BIG_NUMBER_HINTS):
        value, is_int = _value(data[start:end])
        if value is None or value <= FP16_MAX:
            continue
        site = _big_site(data, start, end, is_int, facts)
        if site and not _in_prose_bytes(data, start):
            sites.append((start, site if isinstance(site, bytes) else b""))
    return tuple(sites)


def _number_tokens(data: bytes, hints: Tuple[bytes, ...]) -> Iterator[Tuple[int, int]]:
    """(start, end) of each number token that contains one of `hints` (in `_NUMBER_SHAPE` terms), once each.

    A token begins where its run of `[\\w.]` bytes begins (`_NUMBER` wants no
    such byte before it), so each hint found is read back to that start and
    matched there once; the rest of the run cannot start another token, so the
    search goes on after it. Hints inside identifiers (`layer_0_0`, `fp16b`)
    cost one failed match each.
    """
    shape = data.translate(_NUMBER_SHAPE)
    seen = set()
    for hint in hints:
        at = shape.find(hint)
        while at != -1:
            start = at
            while start and _WORD_BYTE[data[start - 1]]:
                start -= 1
            if start not in seen:
                seen.add(start)
                m = _NUMBER.match(data, start)
                if m is not None and m.end() > at:
                    yield start, m.end()
            at = shape.find(hint, max(at + 1, _WORD_RUN.match(data, at).end()))


class _FileFacts:
    """File-wide conditions, computed at most once and only when a literal needs them."""

    def __init__(self, source: str, data: bytes) -> None:
        self.source = source
        self.data = data
        self._fill: Optional[bool] = None

    @property
    def fill_call(self) -> bool:
        if self._fill is None:
            data = self.data
            maybe = b"fill" in data or b"full" in data or b"where" in data  # a cheap necessary condition first
            self._fill = maybe and _FILL_CALL.search(data) is not None
        return self._fill

    def passed_to_a_call(self, name: bytes) -> bool:
        """`name` is a positional argument somewhere, or a fill keyword's value (`value=NEG`).

        Read around each occurrence of `name` rather than with one regex: a
        pattern that starts with a character class makes `re` try every
        position of the file (~1.5 ms on a big model file, for each name).
        """
        data = self.data
        at = data.find(name)
        while at != -1:
            right = _skip_code_blanks(data, at + len(name))
            if data[right : right + 1] in (b",", b")"):
                left, _ = _skip_left(data, at - 1, parens=False)
                before = data[left : left + 1]
                if before in (b"(", b","):
                    return True
                if before == b"=":
                    end, _ = _skip_left(data, left - 1, parens=False)
                    keyword = _word_before(data, end)
                    start = end - len(keyword)
                    if keyword in _FILL_KEYWORDS and not (start >= 0 and _WORD_BYTE[data[start]]):
                        return True
            at = data.find(name, at + 1)
        return False

    @property
    def softmax(self) -> bool:
        return "softmax" in self.source


def _value(text: bytes) -> Tuple[Optional[float], bool]:
    """(|value|, is_integer) of a number token; (None, _) when it is not one."""
    text = text.replace(b"_", b"")
    try:
        if text[:2].lower() in (b"0x", b"0o", b"0b"):
            return float(int(text, 0)), True
        if any(c in text for c in b".eE"):
            return abs(float(text)), False
        return float(int(text)), True
    except (ValueError, OverflowError):
        return None, False


def _big_site(data: bytes, start: int, end: int, is_int: bool, facts: _FileFacts) -> Union[bool, bytes]:
    """Whether AMP301 could flag this literal; for `NAME = literal`, NAME."""
    i, opened = _skip_left(data, start - 1)
    while i >= 0 and data[i] in b"-+":  # a unary sign, or a binary +/- with the literal as right operand
        j, opened_more = _skip_left(data, i - 1)
        if j >= 0 and not opened_more and _OPERAND_END.match(data, j):
            if not is_int and facts.softmax:  # (b)
                return True
            break
        i, opened = j, opened or opened_more
    left = data[i : i + 1] if i >= 0 else b""
    if opened and _word_before(data, i) in _FILL_NAMES:  # (a): the first argument, `x.fill_(-1e9)`
        return True
    if left == b"*" and not is_int:  # (c)
        return True
    if left == b"," and facts.fill_call:  # (a)
        return True
    if left == b"=":
        found = _after_equals(data, i, end, is_int, facts)
        if found:
            return found
    k = _skip_right(data, end)
    right = data[k : k + 1]
    if right == b"*" and not is_int:  # (c), the literal on the left
        return True
    if right in (b"+", b"-") and data[k + 1 : k + 2] != b"=" and not is_int and facts.softmax:  # (b)
        return True
    return False


def _after_equals(data: bytes, i: int, end: int, is_int: bool, facts: _FileFacts) -> Union[bool, bytes]:
    """The literal follows the `=` at `i`: an augmented assignment, a keyword or `NAME = literal`."""
    before = data[i - 1 : i] if i > 0 else b""
    if before in (b"=", b"<", b">", b"!"):
        return False  # a comparison
    if before in (b"+", b"-"):
        return not is_int  # (d)
    if before in (b"*", b"/", b"%", b"&", b"|", b"^", b"@", b":"):
        return False  # other augmented assignments, walrus
    if not facts.fill_call:
        return False
    j, _ = _skip_left(data, i - 1, parens=False)
    name = _word_before(data, j)
    k, _ = _skip_left(data, j - len(name), parens=False)
    if k >= 0 and data[k : k + 1] in (b",", b"("):
        return name in _FILL_KEYWORDS  # a keyword argument
    # `NAME = literal` (or `NAME: T = literal`) alone on its line: (e)
    line_start = data.rfind(b"\n", 0, i) + 1
    target = _ASSIGNED_NAME.fullmatch(data, line_start, i)
    if target is None:
        return False
    after = _skip_right(data, end, parens=False)
    if after < len(data) and data[after : after + 1] not in (b"\n", b"\r", b";", b"#"):
        return False
    name = target.group(1)
    return name if facts.passed_to_a_call(name) else False


def _word_before(data: bytes, i: int) -> bytes:
    """The identifier that ends at index `i` (empty if none)."""
    j = i
    while j >= 0 and (data[j : j + 1].isalnum() or data[j : j + 1] == b"_"):
        j -= 1
    return data[j + 1 : i + 1]


def _skip_left(data: bytes, i: int, parens: bool = True) -> Tuple[int, bool]:
    """Index of the first character at or left of `i` that is not blank (or `(`); whether a `(` was passed."""
    opened = False
    while i >= 0:
        c = data[i]
        if c in _SPACE:
            if c == 10:  # a newline: the previous line may end in a comment
                line_start = data.rfind(b"\n", 0, i) + 1
                hash_at = data.find(b"#", line_start, i)
                if hash_at != -1:
                    i = hash_at
            i -= 1
        elif parens and c == 40:  # (
            opened = True
            i -= 1
        else:
            break
    return i, opened


def _skip_right(data: bytes, i: int, parens: bool = True) -> int:
    n = len(data)
    while i < n and (data[i] in b" \t\\" or (parens and (data[i] in _SPACE or data[i] == 41))):
        i += 1
    return i


# -------------------------------------------------------------------- AMP302

#: fp16 rounds anything below this to 0
FP16_FLUSH_TO_ZERO = 2.9802322387695312e-08
#: in the translated text: substrings every literal below 3e-8 contains (a negative exponent, or 7 zeros)
_TINY_NUMBER_HINTS = (b"e-0", b"0.0000000")
#: a call (or import alias) of an optimizer whose update divides by sqrt(v) + eps
_EPS_OPTIMIZERS = (b"Adam", b"AdamW", b"Adamax", b"NAdam", b"RAdam", b"SparseAdam", b"RMSprop", b"Adagrad")


def underflowing_eps_site(source: str) -> bool:
    """AMP302's gate: an eps-taking optimizer is constructed, or a literal below 3e-8 sits where AMP302 looks.

    The rule flags (a) an Adam-family / RMSprop / Adagrad constructor (its default
    eps is 1e-8, so no literal is needed), (b) a tiny literal as an operand of
    `+`/`-` (`x / (norm + 1e-8)`) and (c) one passed to `clamp`/`clamp_min` as
    `min`. Config defaults (`layer_norm_eps: float = 1e-12`) and keyword
    arguments (`LayerNorm(d, eps=1e-12)`) are neither and are skipped.
    """
    data = source.encode("utf-8", "surrogatepass")
    return (
        _constructs_eps_optimizer(data)
        or bool(_tiny_literal_site_list(source))
        or bool(_absorbed_bound_sites(source))
        or _ema_decay_site(data)
    )


#: a decimal just below 1 (`0.9999`, `.99995`): a candidate EMA decay
_DECAY_NUMBER = re.compile(rb"(?<![\w.])0?\.999\d*(?![\w.])")


def _ema_decay_site(data: bytes) -> bool:
    """AMP302's EMA form: an in-place `mul_(` or `lerp_(` in a file spelling a decimal that
    fp16 rounds to 1.0 (`0.9999`, `1 - 1e-4`; a `lerp_` weight `1e-4` is `1 - 0.9999`)."""
    if b"mul_(" not in data and b"lerp_(" not in data:
        return False
    for m in _DECAY_NUMBER.finditer(data):
        try:
            value = float(m.group())
        except ValueError:
            continue
        if 1 - value <= 2.0**-12 and not _in_prose_bytes(data, m.start()):
            return True
    if b"lerp_(" in data and re.search(rb"\b[1-9]e-0*(?:[4-9]|\d\d)\b", data):
        return True
    return bool(re.search(rb"\b1(?:\.0*)?[ \t]*-[ \t]*[1-9]e-0*(?:[4-9]|\d\d)\b", data))


def _constructs_eps_optimizer(data: bytes) -> bool:
    """An Adam-family / RMSprop / Adagrad name called (`AdamW(`) or imported under an alias (`AdamW as A`)."""
    for anchor in (b"Ada", b"RMSprop"):
        at = data.find(anchor)
        while at != -1:
            start = at
            while start and _WORD_BYTE[data[start - 1]] and data[start - 1] != 46:  # identifier bytes, not "."
                start -= 1
            end = _WORD_RUN.match(data, at).end()
            end = min([end] + [i for i in (data.find(b".", at, end),) if i != -1])
            if data[start:end] in _EPS_OPTIMIZERS and not _in_prose_bytes(data, start):
                after = _skip_code_blanks(data, end)
                if data[after : after + 1] == b"(" or (
                    after > end and data[after : after + 2] == b"as" and data[after + 2 : after + 3].isspace()
                ):
                    return True
            at = data.find(anchor, max(at + 1, end))
    return False


def underflowing_eps_lines(source: str) -> Optional[Set[int]]:
    """The lines of AMP302's candidate literals; None (the whole file) when an optimizer is
    constructed, since that form relates casts and constructors anywhere in the file."""
    data = source.encode("utf-8", "surrogatepass")
    if _constructs_eps_optimizer(data) or _ema_decay_site(data):
        return None  # (the EMA form relates a cast, a loop and an update helper's callers, too)
    row = _Rows(data)
    sites = {row(start) for start in _tiny_literal_site_list(source)} | {
        source.count("\n", 0, at) + 1 for at in _absorbed_bound_sites(source)
    }
    # the callers of a function are read for its parameters (AMP302's `_from_callers`), never for
    # a dunder's; nor for a name the file defines twice or more: each definition's name is a use,
    # so the uses are never the calls and one `def` (the answer is "unknown" at once), and any
    # two of the definitions give an excerpt the same answer as the file
    names = {n for n in _enclosing_functions(source, sites) if not n.startswith("__")}
    defs = _defined_twice(source, names)
    names -= defs.keys()
    return sites | {line for lines in defs.values() for line in lines[:2]} | _naming_lines(source, names, row)


def _defined_twice(source: str, names: Set[str]) -> Dict[str, List[int]]:
    """name -> the lines of its `def`s, for the `names` that two or more functions of
    `source` are defined as (read by CPython's parser; none when it cannot parse the text)."""
    if not names:
        return {}
    if sum(source.count("def " + n) for n in names) < 2:
        return {}  # (a `def` spelled with a tab is rare: read as one definition, the old way)
    found = _defined_by_scopes(source, names)
    if found is None:
        found = _defined_by_tree(source, names)
    return {n: sorted(lines) for n, lines in found.items() if len(lines) >= 2}


#: the names CPython's symbol table gives a lambda's or a comprehension's scope (a `def`'s name may be one)
_COMPREHENSION_SCOPES = frozenset({"lambda", "listcomp", "setcomp", "dictcomp", "genexpr"})


def _defined_by_scopes(source: str, names: Set[str]) -> Optional[Dict[str, List[int]]]:
    """`_defined_by_tree`'s answer read off CPython's symbol table instead of an `ast` tree
    (about half the CPU: the table's scopes are made in C, one a function, class or
    comprehension, where the tree has a Python object for every node). A function's scope
    holds the `lineno` of its `def` statement, as the tree's node does (a decorated one's
    `def` line, an `async def`'s `async`), dead code included (`if 0:`). None, for the tree to
    answer, when the table refuses a text the parser takes (a misplaced `nonlocal`) or a name
    is one a comprehension's scope is also given."""
    if _symtable is None or not names.isdisjoint(_COMPREHENSION_SCOPES):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            top = _symtable.symtable(source, "<amplint>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None
    function = _symtable.TYPE_FUNCTION
    found: Dict[str, List[int]] = {}
    stack = [top]
    while stack:
        for scope in stack.pop().children:
            stack.append(scope)
            if scope.type == function and scope.name in names:
                found.setdefault(scope.name, []).append(scope.lineno)
    return found


def _defined_by_tree(source: str, names: Set[str]) -> Dict[str, List[int]]:
    """name -> the lines of the `def`s of `names` in `source`'s `ast` tree."""
    import ast

    from .pyast import parse, statements

    tree = parse(source)
    if tree is None:
        return {}
    found: Dict[str, List[int]] = {}
    for node in statements(tree.body):  # a `def` is a statement: expressions need no walk
        if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef) and node.name in names:
            found.setdefault(node.name, []).append(node.lineno)
    return found


_DEF_LINE = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)")


def _enclosing_functions(source: str, lines: Set[int]) -> Set[str]:
    """The names of the `def`s holding `lines` (innermost, read off the indentation): AMP302
    reads a parameter's dtype at the function's callers in the file."""
    rows = source.split("\n")
    names: Set[str] = set()
    for line in lines:
        if not 1 <= line <= len(rows):
            continue
        text = rows[line - 1]
        indent = len(text) - len(text.lstrip(" \t"))
        m = _DEF_LINE.match(text)
        if m is not None:  # the site is in the def's own header (a default eps)
            names.add(m.group(2))
            continue
        for i in range(line - 2, -1, -1):
            m = _DEF_LINE.match(rows[i])
            if m is not None and len(m.group(1)) < indent:
                names.add(m.group(2))
                break
            stripped = rows[i].lstrip(" \t")
            if stripped and not stripped.startswith("#"):
                indent = min(indent, len(rows[i]) - len(stripped)) if stripped[:1] not in (")", "]", "}") else indent
    return names


def _naming_lines(source: str, names: Set[str], row: "_Rows") -> Set[int]:
    """The lines where any of `names` occurs as a word (a call, a use as a value); `row` maps
    the byte offsets of `source`'s UTF-8 text to lines."""
    if not names:
        return set()
    pattern = re.compile(rb"\b(?:" + b"|".join(re.escape(n.encode()) for n in sorted(names)) + rb")\b")
    return {row(m.start()) for m in pattern.finditer(row.data)}


#: largest eps that fp16 absorbs next to 1: 1 + 2**-11 and 1 - 2**-12 round to 1.0
_ABSORBED_NEXT_TO_ONE = 2.0**-11
#: `1 - 1e-4`, `1.0 - EPS`: one minus (or plus) a number or a name, not part of a longer operand
#: (the `1` must not end one either: `_one_and_eps` checks the character before it, since a
#: pattern starting with a lookbehind makes `re` try every position of the file)
_ONE_AND_EPS = re.compile(r"1(?:\.0*)?[ \t]*[-+][ \t]*(?:(\d[\d_]*\.?[\d_]*(?:[eE][-+]?\d+)?)|([A-Za-z_]\w*))(?![\w.(\[])")
_OPERAND_CHAR = re.compile(r"[\w.]")


def _one_and_eps(source: str) -> Iterator["re.Match[str]"]:
    """The matches `(?<![\\w.])` + `_ONE_AND_EPS` finds, left to right: a match whose `1` ends a
    longer operand is passed over by one character, as the lookbehind would."""
    search, operand = _ONE_AND_EPS.search, _OPERAND_CHAR.match
    m = search(source)
    while m is not None:
        start = m.start()
        if start and operand(source, start - 1):
            m = search(source, start + 1)
            continue
        yield m
        m = search(source, m.end())


@lru_cache(maxsize=4)
def _absorbed_bound_sites(source: str) -> Tuple[int, ...]:
    """(d) Offsets of `1 - eps` constants that fp16 rounds to 1.0 (eps a number below 2**-11, or
    a name the module assigns one), in a file that clamps: AMP302 checks them as clamp bounds
    (`p.clamp(min=1e-4, max=1 - 1e-4)` lets p reach 1.0 in fp16)."""
    if "clamp" not in source and "clip" not in source:
        return ()
    found = []
    constants: Optional[Dict[str, float]] = None
    for m in _one_and_eps(source):
        number, name = m.group(1), m.group(2)
        if number is not None:
            value, _ = _value(number.encode())
        else:
            if constants is None:
                constants = {}
                for c in re.finditer(r"^(\w+)[ \t]*(?::[^=\n]*)?=[ \t]*(\d[\d_]*\.?[\d_]*(?:[eE][-+]?\d+)?)[ \t]*(?:#[^\n]*)?\r?$", source, re.M):
                    v, _ = _value(c.group(2).encode())
                    if v is not None:
                        constants[c.group(1)] = v
            value = constants.get(name)
        if value is not None and 0 < value <= _ABSORBED_NEXT_TO_ONE and not in_prose(source, m.start()):
            found.append(m.start())
    return tuple(found)


@lru_cache(maxsize=4)
def _tiny_literal_site_list(source: str) -> Tuple[int, ...]:
    """Byte offsets of the literals below 3e-8 where AMP302 looks (cached like AMP301's)."""
    return tuple(_tiny_literal_sites(source.encode("utf-8", "surrogatepass")))


def _tiny_literal_sites(data: bytes) -> Iterator[int]:
    clamp = b"clamp" in data
    for start, end in _number_tokens(data, _TINY_NUMBER_HINTS):
        value, _ = _value(data[start:end])
        if value is None or not 0 < value < FP16_FLUSH_TO_ZERO:
            continue
        i, opened = _skip_left(data, start - 1)
        binary = False
        while i >= 0 and data[i] in b"-+":
            j, opened_more = _skip_left(data, i - 1)
            if j >= 0 and not opened_more and _OPERAND_END.match(data, j):
                binary = True  # (b), the literal on the right
                break
            i, opened = j, opened or opened_more
        k = _skip_right(data, end)
        if binary or (data[k : k + 1] in (b"+", b"-") and data[k + 1 : k + 2] != b"="):
            if not _in_prose_bytes(data, start):
                yield start  # (b)
        elif clamp and (opened or data[i : i + 1] in (b",", b"=")):
            if not _in_prose_bytes(data, start):
                yield start  # (c)


# -------------------------------------------------------------------- AMP201

#: `torch.optim.AdamW(`, `bnb.optim.AdamW8bit(`, `optim.SGD(`: an optimizer class called through its module path
#: `torch.optim.AdamW(`, or the class bound to a name to be called later (`optimizer_class =
#: torch.optim.AdamW` at the end of its line: diffusers' `--use_8bit_adam` choice)
_OPTIMIZER_PATH_CALL = re.compile(r"optim\w*\.[A-Z]\w*[ \t]*(?:\(|\r?$)", re.M)
_FROM_IMPORT = re.compile(r"[ \t]*from[ \t]+([\w.]+)[ \t]+import\b([^\n]*)")
_PLAIN_IMPORT = re.compile(r"[ \t]*import[ \t]([^\n]*)")
#: what a from-import line imports that can be an optimizer class or its module
_CLASS_OR_CONTINUED = re.compile(r"\b[A-Z]|[(\\*]")
_OPTIM_MODULE = re.compile(r"\boptim\w*")


def optimizer_class_used(source: str) -> bool:
    """AMP201's gate: an optimizer class (a name from a module whose path says optim) is used.

    Either called through that path (`torch.optim.AdamW(`), bound to a name at the end of a
    line (`optimizer_class = torch.optim.AdamW`, called through the name), or imported on a line
    that names it (`from torch.optim import AdamW`, `import torch.optim as O`,
    `from torch import optim as opt`); "optimizer" in prose is neither.
    """
    at = source.find("optim")
    while at != -1:
        if _OPTIMIZER_PATH_CALL.match(source, at) and not in_prose(source, at):
            return True
        line_start = source.rfind("\n", 0, at) + 1
        if _imports_optimizer(source, line_start) and not in_prose(source, at):
            return True
        at = source.find("optim", at + 5)
    return False


def _imports_optimizer(source: str, line_start: int) -> bool:
    """The import line at `line_start` may bind an optimizer class, or a module path to one."""
    m = _FROM_IMPORT.match(source, line_start)
    if m is not None:
        path, names = m.groups()
        if "optim" in path and _CLASS_OR_CONTINUED.search(names):
            # from torch.optim import AdamW: the rule needs that class *called* (`class X(Optimizer)` is not)
            bound = _bound_names(names)
            return bound is None or any(re.search(r"\b%s\s*\(" % re.escape(b), source) for b in bound if b[:1].isupper())
        return _binds_optim_module_alias(source, names)  # from torch import optim as opt
    m = _PLAIN_IMPORT.match(source, line_start)
    return m is not None and "optim" in m.group(1)  # import torch.optim as O


def _binds_optim_module_alias(source: str, names: str) -> bool:
    """`from torch import optim as O` (or `from bitsandbytes import optim`) used as `O.AdamW(...)`.

    An imported name that keeps "optim" in its local name (`optim`, `bnb_optim`)
    is found where it is used, by the caller's search for "optim" and
    `_OPTIMIZER_PATH_CALL`; only an alias without it (`as O`) needs its uses
    read here. A function such as `optimize_for_ort`, imported and called, is
    neither.
    """
    if _bound_names(names) is None:  # continued on the next lines, or *: not read here
        return _OPTIM_MODULE.search(names) is not None
    for part in names.split("#", 1)[0].split(","):
        words = part.split()
        if len(words) == 3 and words[1] == "as" and "optim" in words[0] and "optim" not in words[2]:
            if re.search(r"\b%s\s*\.\s*[A-Z]\w*\s*\(" % re.escape(words[2]), source):
                return True
    return False


def _bound_names(names: str) -> Optional[List[str]]:
    """The local names a one-line `import a, b as c` list binds; None when it continues (`(`, `\\`) or is `*`."""
    names = names.split("#", 1)[0]
    if any(c in names for c in "(\\*"):
        return None
    out = []
    for part in names.split(","):
        words = part.split()
        if words:
            out.append(words[-1])  # `AdamW` or the alias in `AdamW as A`
    return out


# -------------------------------------------------------------------- calls: AMP101, AMP106, AMP401, AMP402
#
# These rules need a call the model resolves (`torch.save`, `torch.load`) or a
# GradScaler method (`.scale(`, `.step(`). Words like "save", "load", "step"
# and "scaler" fill ML code for other reasons (`model_card.save(...)`, a
# doctest's `>>> batch = torch.load(file)`, a time-series model's
# `self.scaler = MeanScaler(config)`), so these read each call's shape.

_IDENT_BYTE = tuple(chr(c).isascii() and (chr(c).isalnum() or chr(c) == "_") for c in range(256))
#: `import torch as th` (also in `import os, torch as th`)
_TORCH_ALIAS = re.compile(rb"\btorch\s+as\s+(\w+)")
_FROM_TORCH_IMPORT = re.compile(rb"\bfrom\s+torch\s+import\b")


def torch_save_called(source: str) -> bool:
    """AMP401's gate: `torch.save` may be called (the rule reads only `torch.save` calls)."""
    return _torch_function_called(source.encode("utf-8", "surrogatepass"), b"save")


#: a name that says save, then an opening bracket: `x.save_pretrained(`, `save_file(`, `torch.save(`
_SAVE_CALL = re.compile(rb"\b(?:def\s+)?\w*save\w*\s*\(")


def fp16_checkpoint_io(source: str) -> bool:
    """AMP401's gate: `torch.save` may be called, or a call named for saving (not a `def`, not in
    prose) sits in a file that trains (`x.backward(`, `x.step(`) and may cast a model back
    (`.float(`, `.to(`, `.type(`) after casting it to fp16 for the save, or that takes a
    `state_dict(` and calls `.half(` (a resume checkpoint handed to a `save_checkpoint(ckpt)` helper)."""
    if torch_save_called(source):
        return True
    data = source.encode("utf-8", "surrogatepass")
    if not (_method_called(data, b"backward") or _method_called(data, b"step")):
        return False
    if not (_method_called(data, b"float") or _method_called(data, b"to") or _method_called(data, b"type")):
        if not (_method_called(data, b"half") and _method_called(data, b"state_dict")):
            return False
    return any(not m.group().startswith(b"def") and not _in_prose_bytes(data, m.start()) for m in _SAVE_CALL.finditer(data))


def scaler_checkpoint_io(source: str) -> bool:
    """AMP402's gate: a GradScaler may be built or used, and `torch.save` or `torch.load` may be
    called, or the file names a restore (`load_state_dict`, a `restore_model(...)` helper) after
    which the scaler may be replaced by a fresh one, or builds a `...Checkpointer(` that saves
    what it is given; or apex's `amp.initialize` (its loss scalers) and a save or load; or a
    Lightning `Fabric` that may run 16-mixed (its precision plugin's scaler) and `torch.save` or
    a `x.save(` method call (`fabric.save(path, state)`, which leaves that scaler out)."""
    data = source.encode("utf-8", "surrogatepass")
    if b"apex" in data and b"initialize" in data and (b"save" in data or b"load" in data):
        return True
    if _fabric_fp16_possible(data) and (_torch_function_called(data, b"save") or _method_called(data, b"save")):
        return True  # Fabric's 16-mixed precision builds the GradScaler itself
    if not _scaler_may_exist(data):
        return False
    if b"GradScaler" in data and (b"load" in data or b"restore" in data or b"resume" in data):
        return True
    if b"Checkpointer(" in data:  # fvcore / detectron2 `Checkpointer(model, dir, optimizer=...)`
        return True
    return _torch_function_called(data, b"save") or _torch_function_called(data, b"load")


def scaler_stepped(source: str) -> bool:
    """AMP106's gate: `x.unscale_(` or `x.step(` may be a GradScaler's (the rule reads only those),
    or an accelerate `Accelerator` whose fp16 mode the file tests (`mixed_precision == "fp16"`)
    and an optimizer's `x.step(`: the prepared optimizer's step unscales with accelerate's scaler."""
    data = source.encode("utf-8", "surrogatepass")
    if b"unscale_" in data:
        return True
    if not _method_called(data, b"step"):
        return False
    return _scaler_may_exist(data) or (b"Accelerator" in data and b"mixed_precision" in data and b"fp16" in data)


def scaled_backward_possible(source: str) -> bool:
    """AMP101's gate: a `x.scale(` call, or an accelerate `Accelerator` and the string "fp16"
    (any case: accelerate lower-cases it) for `Accelerator(mixed_precision="fp16")`, whose
    `backward` scales, or an `Accelerator` whose `x.autocast(` the file enters (its precision
    then from accelerate's config: `config_scaling_accelerator`), or a Lightning
    `self.manual_backward(` under manual optimization; without any there is no scaled backward
    to clip after."""
    data = source.encode("utf-8", "surrogatepass")
    if _method_called(data, b"scale"):
        return True
    if b"Accelerator" in data and (b"fp16" in data.lower() or _method_called(data, b"autocast")):
        return True
    return _fabric_fp16_possible(data) or _manual_backward_possible(data)


def _manual_backward_possible(data: bytes) -> bool:
    """A LightningModule optimizing by hand (`self.automatic_optimization = False`) and its
    `self.manual_backward(`, which scales under an fp16 mixed Trainer (AMP101's Lightning shape)."""
    return b"manual_backward" in data and b"automatic_optimization" in data


def _fabric_fp16_possible(data: bytes) -> bool:
    """A Lightning `Fabric` and a "16" (`precision="16-mixed"`, `"16"`, `16`), whose `backward`
    scales (AMP101's Fabric shape, amplint/model/fabrics.py)."""
    return b"Fabric" in data and b"16" in data


def _torch_function_called(data: bytes, name: bytes) -> bool:
    """`torch.NAME(` (or through `import torch as T`), a bare `NAME(` in a file that imports from
    torch, or an alias (`NAME as N`, then called as `N(`): every way the model resolves `torch.NAME`."""
    aliases: Optional[Set[bytes]] = None
    for _, receiver in _calls(data, name):
        if receiver is None:
            if _FROM_TORCH_IMPORT.search(data) is not None:
                return True
            continue
        if aliases is None:
            aliases = {b"torch", *_TORCH_ALIAS.findall(data)}
        if receiver in aliases:
            return True
    return re.search(rb"\b%s\s+as\s" % name, data) is not None


def _method_called(data: bytes, name: bytes) -> bool:
    return any(receiver is not None for _, receiver in _calls(data, name))


def _calls(data: bytes, name: bytes) -> Iterator[Tuple[int, Optional[bytes]]]:
    """(offset, receiver) of each `NAME(` that may be a call in code: the identifier before
    the `.` of a method call (b"" when that is no identifier: `f().NAME(`), None for a bare
    call. Comment and doctest lines are skipped; blanks, line breaks and comments may sit
    between the parts, as Python allows inside brackets."""
    n = len(data)
    at = data.find(name)
    while at != -1:
        end = at + len(name)
        if (at == 0 or not _IDENT_BYTE[data[at - 1]]) and (end >= n or not _IDENT_BYTE[data[end]]):
            after = _skip_code_blanks(data, end)
            if data[after : after + 1] == b"(" and not _in_prose_bytes(data, at):
                left, _ = _skip_left(data, at - 1, parens=False)
                if left >= 0 and data[left] == 46:  # "."
                    j, _ = _skip_left(data, left - 1, parens=False)
                    yield at, _word_before(data, j)
                elif _word_before(data, left) != b"def":
                    yield at, None
        at = data.find(name, at + 1)


def _skip_code_blanks(data: bytes, i: int) -> int:
    """The first index from `i` that is not whitespace, a line continuation or a comment."""
    n = len(data)
    while i < n:
        c = data[i]
        if c in b" \t\r\n\x0c\\":
            i += 1
        elif c == 35:  # "#": a comment runs to the line end
            nl = data.find(b"\n", i)
            i = n if nl == -1 else nl
        else:
            break
    return i


def _scaler_may_exist(data: bytes) -> bool:
    """Whatever the model takes for a GradScaler: a `GradScaler` constructor, the receiver of
    `.scale(...)` or `.unscale_(`, or a parameter whose name contains "scaler" in any case."""
    if b"GradScaler" in data or b"unscale_" in data or _method_called(data, b"scale"):
        return True
    lower = data.lower()
    at = lower.find(b"scaler")
    while at != -1:
        start = at
        while start and _IDENT_BYTE[data[start - 1]]:
            start -= 1
        end = at + 6
        while end < len(data) and _IDENT_BYTE[data[end]]:
            end += 1
        if _may_be_parameter(data, start, end):
            return True
        at = lower.find(b"scaler", end)
    return False


def _may_be_parameter(data: bytes, start: int, end: int) -> bool:
    """The identifier at data[start:end] sits where a parameter can: after `(`, `,`, `*` or
    `lambda`, and before `,`, `)`, `:` or a default's `=`."""
    after = _skip_code_blanks(data, end)
    follower = data[after : after + 1]
    if follower not in (b",", b")", b":", b"=") or data[after : after + 2] == b"==":
        return False
    left, _ = _skip_left(data, start - 1, parens=False)
    return (left >= 0 and data[left] in b"(,*") or _word_before(data, left) == b"lambda"


# -------------------------------------------------------------------- AMP304

#: the flash-attn entry points AMP304 resolves calls to (its `_FLASH_FUNCTIONS`, by last name)
_FLASH_FUNCTION_NAMES = (
    b"flash_attn_func", b"flash_attn_varlen_func", b"flash_attn_qkvpacked_func", b"flash_attn_kvpacked_func",
    b"flash_attn_varlen_qkvpacked_func", b"flash_attn_varlen_kvpacked_func", b"flash_attn_with_kvcache",
    b"FlashSelfAttention", b"FlashCrossAttention",  # flash_attn.modules.mha's modules, constructed
)


def flash_attention_possible(source: str) -> bool:
    """AMP304's gate: a call the rule resolves to a flash-attn function, or SDPA and a `with`
    forcing it onto the fp16/bf16-only kernels.

    A call resolves through the file's imports only (`amplint/model/names.py`: a star import
    binds nothing), so the function's own name is spelled either right before the call's `(`
    (`flash_attn_func(`, `fa.flash_attn_func (`) or in the import that renames it
    (`flash_attn_func as attend`). The forced region is `sdpa_kernel(...)` whose backends all
    spell `FLASH_ATTENTION` or `CUDNN_ATTENTION`, or the legacy `sdp_kernel(...)` with
    `enable_math` and `enable_mem_efficient` `False`, around a
    `scaled_dot_product_attention` call. transformers names the flash-attn functions in
    docstrings, comments and longer names (`npu_flash_attn_func`, `flash_attn_with_kvcache_fn`)
    and forces SDPA onto the math kernel (`sdpa_kernel(SDPBackend.MATH)`): none of those."""
    data = source.encode("utf-8", "surrogatepass")
    if any(_named_call_or_alias(data, name) for name in _FLASH_FUNCTION_NAMES if name in data):
        return True
    if b"scaled_dot_product_attention" not in data:
        return False
    if (b"FLASH_ATTENTION" in data or b"CUDNN_ATTENTION" in data) and _named_call_or_alias(data, b"sdpa_kernel"):
        return True
    return b"False" in data and _named_call_or_alias(data, b"sdp_kernel")


def _named_call_or_alias(data: bytes, name: bytes) -> bool:
    """The identifier `name` in code, followed by a call's `(` (`_calls`) or by `as` (an import
    that renames it)."""
    if next(_calls(data, name), None) is not None:
        return True
    at = data.find(name)
    n = len(data)
    while at != -1:
        end = at + len(name)
        if (at == 0 or not _IDENT_BYTE[data[at - 1]]) and (end >= n or not _IDENT_BYTE[data[end]]):
            after = _skip_code_blanks(data, end)
            if data[after : after + 2] == b"as" and (after + 2 >= n or not _IDENT_BYTE[data[after + 2]]) and not _in_prose_bytes(data, at):
                return True
        at = data.find(name, end)
    return False


# -------------------------------------------------------------------- class lines and import aliases

#: a `class` line: its indent, name and the text of its bases
_CLASS_LINE = re.compile(r"^([ \t]*)class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?", re.M)
_AS_ALIAS = re.compile(r"\s+as\s+(\w+)")


def _aliases(source: str, word: str) -> List[str]:
    """The names of `import ... WORD as NAME`, read after each WORD (a regex led by `\\b`
    would try every position of the file)."""
    found = set()
    at = source.find(word)
    while at != -1:
        m = _AS_ALIAS.match(source, at + len(word))
        if m is not None and not (at and _is_identifier_char(source[at - 1])):
            found.add(m.group(1))
        at = source.find(word, at + len(word))
    return sorted(found)


def _is_identifier_char(c: str) -> bool:
    return c.isalnum() or c == "_"


# -------------------------------------------------------------------- AMP501


def autograd_function_lines(source: str) -> Optional[Set[int]]:
    """AMP501's sites: the `class` lines of autograd Functions, and of classes derived from them.

    A finding depends only on the Function class itself and module-level names
    (imports, extension loaders), so the rest of a model file need not be parsed;
    a `class` line keeps its class whole (amplint/engine/excerpt.py).
    A base counts when it spells `Function` (`torch.autograd.Function`,
    `Function`), an alias of it (`Function as F`), or a class found so.
    """
    headers = [(m.start(), m.group(2), m.group(3)) for m in _CLASS_LINE.finditer(source) if m.group(3)]
    if not headers:
        return set()
    bases = {"Function", *_aliases(source, "Function")}
    found: Set[int] = set()
    changed = True
    while changed:
        changed = False
        for start, name, spelled in headers:
            if start not in found and any(b in bases for b in re.findall(r"\w+", spelled)):
                found.add(start)
                bases.add(name)
                changed = True
    lines = {source.count("\n", 0, start) + 1 for start in found}
    kernels: Optional[re.Pattern] = None
    # a test module or a script applying a Function: the rule reads whether only its own entry
    # points (a `test*` function, the top level) apply it, through the functions calling its
    # callers, so it reads the file whole
    program = _TEST_DEF.search(source) is not None or "__main__" in source
    # mmcv's `@force_fp32()` or torch's `@custom_fwd(cast_inputs=...)` on the methods applying a
    # Function: the rule reads them all
    forced = "force_fp32" in source or "cast_inputs" in source
    for i, (start, name, _) in enumerate(headers):
        if start not in found:
            continue
        # its callers matter for a compiled-kernel call (inputs cast by hand), a private one's only then
        if kernels is None:
            kernels = _kernel_call_pattern(source)
        end = headers[i + 1][0] if i + 1 < len(headers) else len(source)
        kernel = kernels.search(source, start, end) is not None
        if program and re.search(rf"\b{re.escape(name)}\s*\.\s*apply\b", source):
            return None
        if forced:
            lines |= _apply_lines(source, name, every=True)  # each application's method: `@force_fp32()`?
        elif name.startswith("_") and not kernel:
            continue
        else:
            lines |= _apply_lines(source, name, every=kernel)
        if kernel:
            lines |= _integer_attribute_lines(source)
    if forced:
        lines |= {source.count("\n", 0, m.start()) + 1 for m in _MMCV_FLAG.finditer(source)}
    return lines


#: what AMP501 reads of mmcv's fp16 flag (`amplint/model/mmcv_fp16.py`): the class setting
#: `self.fp16_enabled`, and what turns it on (a superset of that module's `_FLIPS`)
_MMCV_FLAG = re.compile(r"\bfp16_enabled\b|\bwrap_fp16_model\b|\bFp16OptimizerHook\b|^fp16\s*=", re.M)


_INTEGER_ATTRIBUTE = re.compile(
    r"^[ \t]*[\w.]+\.(\w+)[ \t]*(?::[^=\n]*)?=[^=\n].*\b(?:dtype[ \t]*=[ \t]*torch\.(?:u?int\d*|long|short|bool)\b"
    r"|\.(?:long|int|short|byte|bool)\(\))", re.M,
)


def _integer_attribute_lines(source: str) -> Set[int]:
    """The assignments to each attribute some line sets to an integer tensor (`self.handle =
    torch.empty(n, dtype=torch.uint8)`), all of them: AMP501 counts a kernel's input that every
    application hands such an attribute as no float input, when every assignment agrees."""
    names = set(_INTEGER_ATTRIBUTE.findall(source))
    if not names:
        return set()
    spelled = "|".join(sorted(re.escape(n) for n in names))
    pattern = re.compile(rf"\.\s*(?:{spelled})\b[ \t]*(?::[^=\n]*)?=(?!=)")
    return {source.count("\n", 0, m.start()) + 1 for m in pattern.finditer(source)}


_TEST_DEF = re.compile(r"^[ \t]*def[ \t]+test", re.M)


def _kernel_call_pattern(source: str) -> "re.Pattern[str]":
    """A call through `torch.ops`, a compiled-looking module (`_C.f(`, `*_cuda.f(`) or a name
    bound to one at module level (`ext = load(...)`, `import foo_cuda as fk`): where AMP501
    sees a Function's compiled kernel (a superset: the rule decides)."""
    names = {"_C", "_ext", "_cuda", "_kernels"}
    names.update(re.findall(r"^(\w+)\s*=\s*[\w.]*load(?:_inline|_ext|_extension)?\s*\(", source, re.M))
    for m in re.finditer(r"^[ \t]*(?:from[ \t]+\S+[ \t]+)?import[ \t]+([^\n#]+)", source, re.M):
        for item in m.group(1).replace("(", " ").replace(")", " ").split(","):
            parts = item.split()
            if not parts:
                continue
            imported = parts[0].rsplit(".", 1)[-1]
            if imported in ("_C", "_ext", "_cuda", "_kernels") or imported.endswith(("_cuda", "_ext", "_C", "_cpp")):
                names.add(parts[2] if len(parts) == 3 and parts[1] == "as" else imported)
    spelled = "|".join(sorted(re.escape(n) for n in names))
    return re.compile(rf"torch\s*\.\s*ops\s*\.|\b(?:{spelled}|\w*(?:_C|_ext|_cuda|_cpp|_kernels))\s*\.\s*\w+\s*\(")


def _apply_lines(source: str, name: str, every: bool = False) -> Set[int]:
    """The lines that apply a Function (`_F.apply(x)`, `f = _F.apply`, `f(x)`): AMP501 reads its
    callers. All of them for a Function around a compiled kernel (`every`: inputs they cast by
    hand); otherwise a public one's only when each is in a `def backward` (an application only
    inside another Function's backward): other callers would have it reported anyway, and
    parsing them costs."""
    at = [m.start() for m in re.finditer(rf"\b{re.escape(name)}\s*\.\s*apply\b", source)]
    for alias in re.findall(rf"^(\w+)\s*=\s*{re.escape(name)}\s*\.\s*apply\s*$", source, re.M):
        at += [m.start() for m in re.finditer(rf"\b{re.escape(alias)}\b", source)]
    rows = {source.count("\n", 0, i) + 1 for i in at}
    if every or name.startswith("_") or not rows:
        return rows
    lines = source.split("\n")
    for row in rows:
        if lines[row - 1].lstrip().startswith("class ") or re.match(rf"\s*\w+\s*=\s*{re.escape(name)}\s*\.\s*apply\s*$", lines[row - 1]):
            continue  # the class line, an alias's assignment
        if _enclosing_def(lines, row) != "backward":
            return set()
    return rows


def _enclosing_def(lines: List[str], row: int) -> Optional[str]:
    """The name of the `def` whose body holds line `row` (by indentation), None at module level."""
    text = lines[row - 1].expandtabs()
    indent = len(text) - len(text.lstrip())
    for i in range(row - 2, -1, -1):
        line = lines[i].expandtabs()
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        if len(line) - len(stripped) < indent:
            m = re.match(r"(?:async\s+)?def\s+(\w+)", stripped)
            if m:
                return m.group(1)
            if stripped.startswith("class "):
                return None
            indent = len(line) - len(stripped)
    return None


# -------------------------------------------------------------------- AMP202, AMP203, AMP204

def autocast_region_lines(source: str) -> Optional[Set[int]]:
    """The sites of the rules about what happens inside autocast regions.

    Regions are lexical (a `with` block or a decorated function), and what the
    rules read about a site is in its own function, module-level statements
    and, for `self.fc`-style modules, the class the site is in and its base
    classes defined in the file. So: every line that mentions autocast, and
    the `class` line of every class that may hold one of them, of every class
    named as a base of those (transitively), and of every class so named: a
    `class` line keeps its whole class in the excerpt (amplint/engine/excerpt.py).
    A name imported as autocast (`from torch import autocast as ac`) counts as
    a mention of it; a mention that is certainly inside a comment or a
    one-line string (an error message's "use `torch.autocast(...)`") does not.
    """
    mentions = []
    for word in ("autocast", *_aliases(source, "autocast")):
        at = source.find(word)
        while at != -1:
            end = at + len(word)
            whole = word == "autocast" or (
                not (at and _is_identifier_char(source[at - 1])) and not (end < len(source) and _is_identifier_char(source[end]))
            )
            line_start = source.rfind("\n", 0, at) + 1
            if whole and not in_prose(source, at):
                text = source[line_start:at].expandtabs()
                mentions.append((line_start, len(text) - len(text.lstrip(" "))))
            at = source.find(word, end)
    lines = {source.count("\n", 0, start) + 1 for start, _ in mentions}
    if not mentions:
        return lines
    headers = [(m.start(), len(m.group(1).expandtabs()), m.group(2), re.findall(r"\w+", m.group(3) or "")) for m in _CLASS_LINE.finditer(source)]
    wanted: Set[str] = set()
    for start, indent in mentions:
        stack: List[Tuple[int, str]] = []  # the classes that may still be open at `start`
        for h_start, h_indent, name, _ in headers:
            if h_start >= start:
                break
            while stack and stack[-1][0] >= h_indent:
                stack.pop()
            stack.append((h_indent, name))
        wanted.update(name for h_indent, name in stack if h_indent < indent)
    grown = True
    while grown:
        grown = False
        for _, _, name, bases in headers:
            if name in wanted:
                for b in bases:
                    if b not in wanted:
                        wanted.add(b)
                        grown = True
    lines.update(source.count("\n", 0, h_start) + 1 for h_start, _, name, _ in headers if name in wanted)
    return lines


def cuda_autocast_possible(source: str) -> bool:
    """AMP002's gate, after its words: the file may spell a CUDA-only autocast. Both halves of the
    rule read one: the crash half a call of `torch.cuda.amp.autocast` / `torch.cpu.amp.autocast`
    (or their `autocast_mode` spellings), the device half a region whose device is CUDA, i.e.
    that constructor (`AUTOCAST_CONTEXTS` gives it the device) or the generic one with the
    device a string literal `"cuda"` (`literal_string`: a plain string, not a name or an
    f-string) given as the call's first argument or as `device_type=`. Every such qualified name has the component `amp`, and names resolve through the
    file's imports only (`amplint/model/names.py`), so the identifier `amp` is spelled somewhere
    (`torch.cuda.amp.autocast(`, `from torch.cuda import amp`, `import torch.cuda.amp as A`);
    else the text holds `"cuda"` or `'cuda'` where such an argument starts (prefixes, triple
    quotes and brackets included; a device string spelled by escapes is out of reach, as for the
    words `cpu`/`mps` the rule requires).
    transformers' model files pass the words on `torch.autocast(device_type=device_type,
    enabled=False)` and a `"cpu"`: neither. Also the MPS half's two-way mapping of a device onto
    a CUDA or a CPU autocast (`amp_device = "cuda" if device.startswith("cuda") else "cpu"`):
    both arms are the strings "cuda" and "cpu" (`cpu_mapped_mps`), so after the first arm comes
    an `else` whose arm is one of them (`"cpu" if rank == 0 else "meta"` is no such mapping)."""
    return _cuda_device_argument(source) or _identifier_in(source, "amp") or _device_mapping(source)


#: `"cuda" if ... else "cpu"` / `'cpu' if ... else 'cuda'`: a device type chosen by a conditional
_DEVICE_MAPPING = re.compile(r"""["'](?:cuda|cpu)["']\s+if\b""")
#: the mapping's other arm: `else` then blanks, line continuations, comments or `(`, then the
#: string "cuda" or "cpu" (any prefix, any quotes); starts with a literal, so `re` looks for it (a
#: comment runs to its line's end: one way to read each, no backtracking over its `#`s)
_DEVICE_ELSE = re.compile(r"""else(?:[\s(]|\\|#[^\n]*\n)*[rRuUbBfF]{0,2}(?:"|')(?:""|'')?(?:cuda|cpu)["']""")


def _device_mapping(source: str) -> bool:
    """A conditional expression may map a device onto "cuda" or "cpu": an arm `"cuda" if` /
    `"cpu" if`, and after it an `else` whose arm is `"cuda"` or `"cpu"` (the mapping's `else`
    follows its first arm, so it lies after the first such arm in the text)."""
    first = _DEVICE_MAPPING.search(source)
    return first is not None and _DEVICE_ELSE.search(source, first.end()) is not None


#: what may stand right before a string literal: its prefix and its opening quotes
_STRING_HEAD = frozenset("\"'rRuUbBfF")


def _cuda_device_argument(source: str) -> bool:
    """A string `"cuda"` / `'cuda'` where autocast's device may be read from it: the call's first
    argument (right after its `(`, unless that opens a call of an attribute other than
    `autocast`), after `device_type=`, or first on its line (the line before may end in either, or
    in a comment); `== "cuda"`, `[..., "cuda"]`, `x.to("cuda")` are none."""
    for quote in ('"cuda"', "'cuda'"):
        at = source.find(quote)
        while at != -1:
            j = at
            while j > 0 and source[j - 1] in _STRING_HEAD:
                j -= 1
            j = _blanks_back(source, j)
            before = source[j - 1] if j > 0 else "\n"
            if before in "\n\r\\" or (before == "(" and not _method_not_autocast(source, j - 1)):
                return True
            if before == "=":
                k = _blanks_back(source, j - 1)
                if k == 0 or source[k - 1] in "\n\r\\" or (source.endswith("device_type", 0, k) and (k == 11 or not _is_identifier_char(source[k - 12]))):
                    return True
            at = source.find(quote, at + 1)
    return False


def _method_not_autocast(source: str, paren: int) -> bool:
    """The `(` at `paren` opens a call of an attribute other than `autocast` (`x.to(`, `t.cuda(`):
    every qualified name `AUTOCAST_CONTEXTS` knows ends in `.autocast`, and an attribute call
    resolves to its import's target plus the attributes spelled."""
    end = _blanks_back(source, paren)
    start = end
    while start > 0 and _is_identifier_char(source[start - 1]):
        start -= 1
    if start == end or source[start:end] == "autocast" or (start > 0 and not source[start - 1].isascii()):
        return False
    return _blanks_back(source, start) > 0 and source[_blanks_back(source, start) - 1] == "."


def _blanks_back(source: str, j: int) -> int:
    """The index after the last character before `j` that is not a space or a tab."""
    while j > 0 and source[j - 1] in " \t\f":
        j -= 1
    return j


def _identifier_in(source: str, name: str) -> bool:
    """Whether `name` occurs with no identifier character on either side (every use of the
    identifier `name` does; so do some others, in prose)."""
    at = source.find(name)
    n, size = len(source), len(name)
    while at != -1:
        end = at + size
        if (at == 0 or not _is_identifier_char(source[at - 1])) and (end >= n or not _is_identifier_char(source[end])):
            return True
        at = source.find(name, end)
    return False


#: gate functions by the name rules give in `gate_check`
GATES: dict = {
    "overflowing_literal_site": overflowing_literal_site,
    "overflowing_literal_lines": overflowing_literal_lines,
    "underflowing_eps_site": underflowing_eps_site,
    "underflowing_eps_lines": underflowing_eps_lines,
    "optimizer_class_used": optimizer_class_used,
    "autograd_function_lines": autograd_function_lines,
    "autocast_region_lines": autocast_region_lines,
    "torch_save_called": torch_save_called,
    "fp16_checkpoint_io": fp16_checkpoint_io,
    "scaler_checkpoint_io": scaler_checkpoint_io,
    "scaler_stepped": scaler_stepped,
    "scaled_backward_possible": scaled_backward_possible,
    "flash_attention_possible": flash_attention_possible,
    "cuda_autocast_possible": cuda_autocast_possible,
}


def resolve(name: str) -> Callable[[str], Any]:
    """The gate (or site) function named `amplint.core.gates:NAME` (or just `NAME`)."""
    return GATES[name.rsplit(":", 1)[-1]]
