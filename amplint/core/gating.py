"""Evaluating rule gates: the one place gates are evaluated, for rule classes
and for `RuleSpec`s alike (see `engine/registry.py`, which reads gates without
importing rules). Necessary conditions on the raw text: a file that passes no
selected rule's gate is never parsed."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple


def passing(rules: Sequence[Any], source: str) -> List[Any]:
    """The rules (specs or classes) whose gate `source` passes.

    Each distinct trigger is searched for at most once per file (rules share
    triggers such as "autocast"), and a word that contains another rule's
    trigger is searched only after that one is found: most files hold
    neither, and the search for "autocast", made for other rules anyway, then
    answers "autocast_gpu_", "autocast_cpu_", ...
    """
    if rules and not_torch_code(source):
        return []
    contains, plan = _plan(tuple(rules))
    present = words_of(source)

    def has(word: str) -> bool:
        hit = present.get(word)
        if hit is None:
            for part in contains[word]:
                if not has(part):
                    hit = False
                    break
            else:
                hit = word in source
            present[word] = hit
        return hit

    out = []
    for r, clauses, regex, check in plan:
        for clause in clauses:  # each clause needs one of its words (triggers first, then requires)
            for word in clause:
                hit = present.get(word)
                if hit is None:
                    hit = has(word)
                if hit:
                    break
            else:
                break
        else:
            if regex is not None and regex.search(source) is None:
                continue
            if check is not None and not _gate_function(check)(source):
                continue
            out.append(r)
    return out


@lru_cache(maxsize=64)
def _plan(rules: Tuple[Any, ...]) -> Tuple[Dict[str, Tuple[str, ...]], Tuple[Tuple[Any, Tuple[Tuple[str, ...], ...], Any, Optional[str]], ...]]:
    """`_containment(rules)` and, per rule, (rule, its word clauses, gate regex, gate check):
    the gate read once per selection rather than per file."""
    plan = []
    for r in rules:
        clauses = tuple(tuple(c) for c in getattr(r, "requires", ()))
        if r.triggers:
            clauses = (tuple(r.triggers), *clauses)
        plan.append((r, clauses, r.gate_regex, getattr(r, "gate_check", None)))
    return _containment(rules), tuple(plan)


#: [(text, {word: whether the text holds it})] of the last few texts asked about, newest last:
#: the gates, the text index (`model/project/index.py`) and the second looks at a file's
#: excerpt ask the same file about many of the same words ("autocast", "GradScaler",
#: "deepspeed", ...), each a scan of the whole text. Keyed by the text object itself (held
#: here, so its identity cannot be reused meanwhile); a file's lint asks about its text, its
#: text without docstrings and its excerpt, so three are kept.
_LAST_WORDS: List[Tuple[str, Dict[str, bool]]] = []
_KEPT_WORDS = 3


def words_of(source: str) -> Dict[str, bool]:
    """The memo of which words `source` holds (filled by `passing` and `holds`); a new text
    starts an empty one."""
    last = _LAST_WORDS
    for text, found in reversed(tuple(last)):  # (a copy: the server may lint in another thread)
        if text is source:
            return found
    found = {}
    last.append((source, found))
    while len(last) > _KEPT_WORDS:
        try:
            del last[0]
        except IndexError:
            break
    return found


def holds(source: str, word: str) -> bool:
    """`word in source`, each word searched at most once per text (`words_of`)."""
    found = words_of(source)
    hit = found.get(word)
    if hit is None:
        hit = found[word] = word in source
    return hit


def forget_words() -> None:
    """Drop the memo (and the texts it holds)."""
    _LAST_WORDS.clear()


#: array frameworks whose tensors are not PyTorch tensors (their own mixed precision, not torch AMP)
_FOREIGN_FRAMEWORKS = frozenset(("tensorflow", "tf_keras", "keras", "jax", "jaxlib", "flax", "optax", "haiku", "paddle", "mxnet", "mindspore", "mlx", "oneflow"))
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\*)?|import[ \t]+([\w.]+(?:[ \t]*(?:as[ \t]+\w+)?[ \t]*,[ \t]*[\w.]+)*))", re.M)


def not_torch_code(source: str) -> bool:
    """The file's tensors cannot be PyTorch tensors, so no AMP rule applies to it: its text never
    names `torch`, and it imports TensorFlow, Keras, JAX/Flax, Paddle, MXNet, MindSpore or MLX
    (`modeling_tf_*.py`, `modeling_flax_*.py` next to a library's torch models). A numpy-only
    file is not one: a helper that never imports torch still operates on the torch tensors its
    callers hand it (`scores.masked_fill(mask, -1e9)` with only `import numpy as np`)."""
    if holds(source, "torch") or not holds(source, "import"):
        return False
    tops: Set[str] = set()
    for m in _IMPORT.finditer(source):
        if m.group(1) is not None:  # `from X import ...`
            tops.add(m.group(2).split(".")[0])
        else:
            tops.update(part.split()[0].split(".")[0] for part in m.group(4).split(",") if part.strip())
    return bool(tops & _FOREIGN_FRAMEWORKS)


#: short words that several triggers contain, searched first: one scan that is absent from most
#: files stands for the scans of every trigger holding it ("cale": `Scaler`, `scaler`, `unscale_`,
#: `scale(`, `scale (`; ".amp": `cuda.amp`, `cpu.amp`; "custom_": `custom_op`, `custom_fwd`,
#: `custom_bwd`; "alf": `half`, `Half`; "flash_attn_": AMP304's five flash-attn names;
#: "precision": `precision=16`, `precision="16`, `mixed_precision`; "_batch_size": DeepSpeed's
#: batch-size keys). Searched only as part of a trigger that holds them.
GUARDS = ("cale", ".amp", "custom_", "alf", "flash_attn_", "precision", "_batch_size")


@lru_cache(maxsize=64)
def _containment(rules: Tuple[Any, ...]) -> Dict[str, Tuple[str, ...]]:
    """For every word of `rules`' gates, the shorter words it contains (absent one of those, it is
    absent): other triggers, and the `GUARDS` it holds.

    Only triggers and guards serve as such: every file is searched for triggers anyway,
    while a `requires` word ("step") may be common and otherwise never searched."""
    triggers = {t for r in rules for t in r.triggers}
    words = triggers | {t for r in rules for c in getattr(r, "requires", ()) for t in c}
    out = {w: tuple(o for o in (*sorted(triggers), *GUARDS) if o != w and o in w) for w in words}
    for guard in GUARDS:
        out.setdefault(guard, ())
    return out


def _gate_function(name: str) -> Any:
    """A `gate_check`/`gate_sites` function; amplint/core/gates.py is imported on first use, so a
    warm run, which reads no file, does not import it."""
    from . import gates

    return gates.resolve(name)


def site_lines(rules: Sequence[Any], source: str) -> Optional[Set[int]]:
    """The lines the passing `rules` can fire on or depend on; None when any needs the whole file."""
    lines: Set[int] = set()
    done: Set[str] = set()  # rules share site functions (AMP202/203/204)
    for r in rules:
        name = getattr(r, "gate_sites", None)
        if name is None:
            return None
        if name in done:
            continue
        done.add(name)
        found = _site_function_lines(name, source)
        if found is None:
            return None
        lines |= found
    return lines


@lru_cache(maxsize=8)
def _site_function_lines(name: str, source: str) -> Optional[FrozenSet[int]]:
    """One site function's lines for one text, remembered for the few texts in flight: the
    pipeline asks again for the same file (the docstring look, the excerpt, its re-cut)."""
    found = _gate_function(name)(source)
    return frozenset(found) if found is not None else None
