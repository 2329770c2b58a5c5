"""The values a run-time precision choice can take, by the literal choices the code offers.

Training scripts decide precision at run time: `--precision fp16|bf16|fp32`, `--mixed_precision
no|fp16|bf16`, `--dtype float16|bfloat16`. A rule that knows nothing of the value stays silent
(precision first). But an argparse option with literal `choices=[...]` names every value it can
take, and only those: on the choices that select fp16 (or bf16) the code runs a documented,
supported path, and where the consequence on that path is certain a rule may report it, naming
the choice (`when --precision is fp16: ...`) so the user sees which run it concerns.

This module answers, for one file:

* `options(ctx)`: the file's `add_argument("--flag", choices=[...], default=...)` calls by
  destination (`dest=`, else the first long flag with dashes turned to underscores);
* `option_read(ctx, node)`: the option an expression `args.precision` reads, when its receiver
  is a name the file binds to `parser.parse_args()` (or `parse_known_args()`; `args`, `opt`,
  `self.args`; a function parameter of that name counts, the script hands it on), the file
  defines exactly one option of that destination (or several with the same choices) and its
  choices are all literals;
* `option_values(ctx, node)`: the literal values an option read may take even without `choices`
  (its literal default, and its choices when it has literal ones): `--device` with
  `default="cpu"` may be the CPU on the default run;
* `choice_precision(value)`: the precision ('fp16' | 'bf16' | 'fp32') a choice's text spells,
  in torch's, accelerate's and Lightning's spellings (`float16`, `fp16`, `16`, `16-mixed`,
  `bf16-mixed`, `no`), None for anything else (`amp`, `int8`, a `None` choice).

Precision first: an option with no `choices`, a non-literal element (`choices=DTYPES`), a
`type=` converter that is not `str`, or a destination defined twice with different choices
gives None: the value is unknown and rules keep their silence. Choices narrow what a lookup
table can return (`{"fp16": torch.float16, ...}[args.dtype]` with `choices=["bf16", "fp32"]`
never yields fp16); they never widen a value the code does not read from the option.

Only the file that reads the option is searched (a parser built in another module is the
project's knowledge, not read here). Computed on first use per file.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Tuple

import libcst as cst

from .literals import literal_string
from .names import dotted_name
from .precision_names import precision_dtype

if TYPE_CHECKING:  # pragma: no cover
    from .context import ModuleContext

#: the parser methods whose result holds the options' values
_PARSES = frozenset(("parse_args", "parse_known_args"))


@dataclass(frozen=True)
class Option:
    """One argparse option: its flag as spelled, its destination, its literal choices (strings;
    a `None` choice is dropped) and its literal default (None when absent or not a string)."""

    flag: str
    dest: str
    choices: FrozenSet[str]
    default: Optional[str]
    row: int

    def selecting(self, precision: str) -> Tuple[str, ...]:
        """The choices that spell `precision`, sorted."""
        return tuple(sorted(c for c in self.choices if choice_precision(c) == precision))


def choice_precision(value: Optional[str]) -> Optional[str]:
    """'fp16' | 'bf16' | 'fp32' for a choice's text (case-insensitive), else None."""
    return precision_dtype(value)


def options(ctx: "ModuleContext") -> Dict[str, List[Option]]:
    """The file's argparse options with literal choices, by destination."""
    cached = ctx.__dict__.get("_runtime_options")
    if cached is None:
        cached = {}
        for call in ctx.calls:
            if call.method != "add_argument":
                continue
            option = _option(ctx, call.node)
            if option is not None:
                cached.setdefault(option.dest, []).append(option)
        ctx._runtime_options = cached
    return cached


def option_read(ctx: "ModuleContext", node: Optional[cst.BaseExpression]) -> Optional[Option]:
    """The option whose value `node` (`args.precision`, `self.args.dtype`) reads; None unless the
    file defines that destination with one set of literal choices."""
    if not isinstance(node, cst.Attribute):
        return None
    spelled = dotted_name(node)
    if spelled is None or "." not in spelled or spelled.rsplit(".", 1)[0] not in _namespaces(ctx):
        return None
    found = options(ctx).get(node.attr.value)
    if not found or len({o.choices for o in found}) != 1:
        return None
    return found[0]


def option_values(ctx: "ModuleContext", node: Optional[cst.BaseExpression]) -> Optional[FrozenSet[str]]:
    """The literal values the option `node` reads (`args.device`) may take: its literal default
    and its literal choices, for an option the file defines once (a `str` option, or one with no
    `type=`); None when the file defines no such option, or any value is not a literal."""
    if not isinstance(node, cst.Attribute):
        return None
    spelled = dotted_name(node)
    if spelled is None or "." not in spelled or spelled.rsplit(".", 1)[0] not in _namespaces(ctx):
        return None
    cached = ctx.__dict__.get("_runtime_plain_options")
    if cached is None:
        cached = {}
        for call in ctx.calls:
            if call.method == "add_argument":
                option = _option(ctx, call.node, need_choices=False)
                if option is not None:
                    cached.setdefault(option.dest, []).append(option)
        ctx._runtime_plain_options = cached
    found = cached.get(node.attr.value)
    if not found or len(found) != 1 or found[0].default is None:
        return None
    return frozenset((found[0].default, *found[0].choices))


def _namespaces(ctx: "ModuleContext") -> FrozenSet[str]:
    """The names the file binds to a parser's result (`args = parser.parse_args()`, `args, _ =
    parser.parse_known_args()`, `self.args = ...`): only their attributes read an option, not a
    config object that happens to have an attribute of the same name."""
    cached = ctx.__dict__.get("_runtime_namespaces")
    if cached is None:
        names = set()
        for a in ctx.assignments:
            value = a.value
            if isinstance(value, cst.Tuple) and value.elements:
                value = value.elements[0].value
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _PARSES:
                if not a.unpacked:
                    names.add(a.target)
                elif isinstance(a.node, cst.Assign) and isinstance(a.node.targets[0].target, cst.Tuple):
                    first = dotted_name(a.node.targets[0].target.elements[0].value)  # `args, unknown = parse_known_args()`
                    if first:
                        names.add(first)
        cached = ctx._runtime_namespaces = frozenset(names)
    return cached


def _option(ctx: "ModuleContext", call: cst.Call, need_choices: bool = True) -> Optional[Option]:
    flags: List[str] = []
    keywords: Dict[str, cst.BaseExpression] = {}
    for arg in call.args:
        if arg.star:
            return None  # `**kwargs`: anything may be passed
        if arg.keyword is None:
            text = literal_string(arg.value)
            if text is None:
                return None
            flags.append(text)
        else:
            keywords[arg.keyword.value] = arg.value
    choices = _literal_strings(keywords.get("choices"))
    if choices is None and not need_choices and "choices" not in keywords:
        choices = frozenset()
    if not flags or choices is None:
        return None
    kind = keywords.get("type")
    if kind is not None and not (isinstance(kind, cst.Name) and kind.value == "str"):
        return None  # a converter may map the text to something else
    dest = literal_string(keywords["dest"]) if "dest" in keywords else None
    if dest is None:
        long = next((f for f in flags if f.startswith("--")), flags[0])
        dest = long.lstrip("-").replace("-", "_")
    if not dest.isidentifier():
        return None
    default = literal_string(keywords.get("default")) if "default" in keywords else None
    row = ctx.position(call)[0].row
    return Option(next((f for f in flags if f.startswith("--")), flags[0]), dest, choices, default, row)


def _literal_strings(node: Optional[cst.BaseExpression]) -> Optional[FrozenSet[str]]:
    """The strings of a list / tuple / set literal of string literals (`None` elements dropped),
    None when any element is something else."""
    if not isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        return None
    out = set()
    for element in node.elements:
        if isinstance(element, cst.StarredElement):
            return None
        value = element.value
        if isinstance(value, cst.Name) and value.value == "None":
            continue
        text = literal_string(value)
        if text is None:
            return None
        out.add(text)
    return frozenset(out) if out else None
