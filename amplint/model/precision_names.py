"""What the spellings of a precision setting mean: one table for every reader.

Precision is spelled many ways: torch's dtype strings (`float16`, `half`, `bf16`),
accelerate's `mixed_precision` (`no`, `fp16`, `bf16`), Lightning's `precision`
(`16`, `16-mixed`, `bf16-true`, `32-true`; "16" is an alias of "16-mixed"), and the
same words in a YAML/JSON config or an argparse choice. This module has one job:
turn such a text into the dtype it selects ('fp16' | 'bf16' | 'fp32'), normalise
Lightning's aliases, and say what policy Lightning's FSDP plugin derives from it.
It also holds the words a file's text names when low precision (or a cast to it) may reach
its tensors, read by the conditions that drop a finding no fp16 reaches (`facts.py`,
`embedded.py`). It holds data only (no syntax trees), so the per-file model (`runtime_choices.py`),
the project summaries (`project/summary.py`, `project/scale.py`) and the project
views (`project/wrappers.py`) all read the same table, and importing it creates no
cycle: it imports nothing of amplint but `torchapi`'s dtype strings.
"""
from __future__ import annotations

import re
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


# ------------------------------------------------------------------ words in a file
# What a file's text must not name for no low precision (fp16, a cast to it) to reach its
# tensors (`facts.fp32_script`, `facts.fp16_unreachable`, `facts.cast_unreachable`,
# `embedded.unreached_embedded`).

#: words that show a text may run low precision (a cast, a dtype, autocast, a loss scaler, a flag)
#: the settings a Python config module may choose a framework's precision with at its top level
#: (`mixed_precision = "fp16"`: the project model's config modules, `project/summary.config_settings`)
CONFIG_KEYS = ("mixed_precision",)
LOW_PRECISION_WORDS = re.compile(r"half|float16|fp16|bf16|bfloat16|autocast|GradScaler|mixed_precision|\bamp\b|precision")
#: words that show a text may run fp16 (bf16 does not count: it keeps fp32's range): an fp16 dtype
#: or cast, autocast (CUDA's default dtype is fp16), a loss scaler, a mixed-precision flag, a dtype
#: looked up by a name read at run time
FP16_WORDS = re.compile(
    r"(?<![bB])float16|half|fp16|autocast|GradScaler|mixed_precision|\bamp\b|16-mixed|precision\s*=\s*16|getattr\(\s*torch\s*,",
    re.M,
)
#: an fp16 spelling anywhere in a file's text (a cast, a dtype, a flag, a comment; not `bfloat16`):
#: a file without one whose autocast regions are all bf16 scales only bf16 (`scalers.scales_only_bf16`)
FP16_TEXT = re.compile(r"(?<![bB])float16|half|fp16|HalfTensor")
#: spans of an imported module's line that name fp16 without making its importer's tensors fp16:
#: a dtype test (`dtype == torch.float16`), a converter's answer (`return torch.float16`: its caller
#: picks), a dtype the module picks by a run-time test for tensors it makes itself (`torch.float32
#: if cfg.data_type == FP32 else torch.float16`), fp16 gradient compression (`fp16_compress_hook`,
#: `comm_precision == "fp16"`: the all-reduce's dtype, AMP803's). pytorch/torchrec's embedding
#: modules, imported by its fp32 bert4rec example. A line that casts (`.to(`, `.type(`, `.half(`)
#: is kept whole
_FP16_NAMED_ONLY = re.compile(
    r"(?:==|!=|\bis\s+not|\bis|\bnot\s+in|\bin)\s*[(\[]?\s*torch\.(?:float16|half)\b"
    r"|torch\.(?:float16|half)\s*(?:==|!=)|\breturn\s+torch\.(?:float16|half)\b"
    r"|\belse\s+torch\.(?:float16|half)\b|torch\.(?:float16|half)\s+if\b"
    r"|\bfp16_compress_(?:hook|wrapper)\b|\w*comm\w*\s*[!=]=\s*[\"']fp16[\"']"
)
_CASTS = re.compile(r"\.to\(|\.type\(|\.half\(")


def imported_text_matches(words: "re.Pattern[str]", text: str) -> bool:
    """`words` match what a module another file imports may do to that file's tensors: its text
    with the spans that only name fp16 (`_FP16_NAMED_ONLY`) left out. The importer's own text and
    its importers' are read whole."""
    if not words.search(text):
        return False
    for line in text.splitlines():
        if words.search(line) and (_CASTS.search(line) or words.search(_FP16_NAMED_ONLY.sub(" ", line))):
            return True
    return False


#: words that show a text fixes a low precision somewhere (fp16 or bf16; `model/facts.fp32_default`):
#: an fp16/bf16 (or fp8) dtype, cast or spelling, torch's autocast (a bare `autocast(` imported from torch;
#: not `accelerator.autocast()`, off unless the run is configured), a loss scaler, apex, a dtype
#: looked up by name or held in a `*_dtype` variable (`.to(weight_dtype)`, `torch_dtype=`),
#: `.type(`, DeepSpeed, a framework precision ("16-mixed", "bf16-true", `precision=16`), a new
#: default dtype. Deliberately broad: a word in a comment counts too
LOW_PRECISION_FIXED_WORDS = re.compile(
    r"float16|fp8|float8|\.half\b|HalfTensor|\bhalf\b\s*[=:(]|[\"']half[\"']|--half|\bbf16|\bfp16|torch\.autocast|amp\.autocast|(?<![\w.])autocast\s*\(|GradScaler|"
    r"\bamp\b|apex|\w_dtype\b|dtype\s*=\s*(?:args|cfg|config|opt|opts|hparams)\.|\.type\(|deepspeed|16-mixed|16-true|"
    r"precision\s*[=:]\s*[\"']?16|set_default_dtype|getattr\(\s*torch\s*,",
    re.M,
)
#: words that show a text may cast a module (its parameters and buffers) to fp16: an fp16 dtype
#: or `.half()`, a `.to()`/`.type()` whose dtype is chosen elsewhere, a call of an fp16 converter
#: (`convert_to_fp16()`, `wrap_fp16_model(m)`), a framework or setting that casts the model
#: (DeepSpeed, apex O2/O3 or an opt_level chosen at run time, Lightning's "16-true", HF's
#: `torch_dtype=` and `fp16_full_eval`, FSDP's `param_dtype=`), a new default dtype. Autocast, a
#: GradScaler, apex O1 or an `--fp16` flag that only selects them leave fp32 buffers fp32
FP16_CAST_WORDS = re.compile(
    r"(?<![bB])float16|[hH]alf|\.to\([^)\n]*(?:dtype|precision)|\.type\(|(?i:\w*fp16\w*)\s*\(|deepspeed|"
    r"opt_level\s*=\s*(?![\"']O[01][\"'])|[\"']O[23][\"']|16-true|torch_dtype|full_eval|param_dtype|set_default_dtype|"
    r"getattr\(\s*torch\s*,",
    re.M,
)
