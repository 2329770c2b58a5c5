"""What the spellings of a precision setting mean: one table for every reader.

Precision is spelled many ways: torch's dtype strings (`float16`, `half`, `bf16`),
accelerate's `mixed_precision` (`no`, `fp16`, `bf16`), Lightning's `precision`
(`16`, `16-mixed`, `bf16-true`, `32-true`; "16" is an alias of "16-mixed"), and the
same words in a YAML/JSON config or an argparse choice. This module has one job:
turn such a text into the dtype it selects ('fp16' | 'bf16' | 'fp32'), normalise
Lightning's aliases, and say what policy Lightning's FSDP plugin derives from it.
It holds data only (no syntax trees), so the per-file model (`runtime_choices.py`),
the project summaries (`project/summary.py`, `project/scale.py`) and the project
views (`project/wrappers.py`) all read the same table, and importing it creates no
cycle: it imports nothing of amplint but `torchapi`'s dtype strings.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from .torchapi import DTYPE_STRINGS

#: Lightning's aliases (`_PRECISION_INPUT_STR_ALIAS_CONVERSION`): the short spellings and what they mean
LIGHTNING_ALIASES: Dict[str, str] = {
    "16": "16-mixed", "bf16": "bf16-mixed", "32": "32-true", "64": "64-true", "half": "16-true",
}
#: every spelling of a precision setting (lower case) -> the dtype it computes in; "no" is accelerate's fp32
PRECISION_NAMES: Dict[str, str] = {
    **DTYPE_STRINGS,
    "16": "fp16", "16-mixed": "fp16", "16-true": "fp16",
    "bf16-mixed": "bf16", "bf16-true": "bf16",
    "32": "fp32", "32-true": "fp32", "no": "fp32", "fp32": "fp32",
}
#: what Lightning's FSDP precision plugin builds from `precision=` (lightning/fabric/plugins/precision/fsdp.py):
#: normalised precision -> (param_dtype, reduce_dtype)
LIGHTNING_FSDP_POLICY: Dict[str, Tuple[str, str]] = {
    "16-mixed": ("fp16", "fp16"), "16-true": ("fp16", "fp16"),
    "bf16-mixed": ("bf16", "bf16"), "bf16-true": ("bf16", "bf16"), "32-true": ("fp32", "fp32"),
}


def precision_dtype(value: Any) -> Optional[str]:
    """'fp16' | 'bf16' | 'fp32' for a precision's spelling (a string, case-insensitive, or
    Lightning's integers 16 / 32), else None (`amp`, `int8`, `None`, a bool)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        value = str(value)
    if not isinstance(value, str):
        return None
    return PRECISION_NAMES.get(value.strip().lower())


def lightning_precision(value: Any) -> str:
    """A Lightning `precision=` value normalised to its long spelling ("16" / 16 -> "16-mixed")."""
    text = str(value)
    return LIGHTNING_ALIASES.get(text, text)


def lightning_autocast_dtype(value: Any) -> Optional[str]:
    """The autocast dtype of a Lightning `precision=` ('fp16' for "16-mixed", "16", 16; 'bf16' for
    "bf16-mixed", "bf16"); None for the "-true" precisions (no autocast) and anything else."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    normal = lightning_precision(value)
    return PRECISION_NAMES.get(normal) if normal.endswith("-mixed") else None
