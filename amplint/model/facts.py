"""Project facts: what the whole project says about its precision.

Some hazards only matter if the project runs fp16 somewhere: a `-1e9` mask in a
model file is harmless in a bf16-only project. Rules emit such diagnostics with
`condition="fp16"`; the engine keeps them only if the project facts (merged
over every file, so the order files are read in never matters) or the
`precision` setting say fp16 is possible.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

#: the diagnostic holds if the project may run any code in fp16
FP16 = "fp16"
#: the diagnostic holds if the project uses autocast anywhere
AUTOCAST = "autocast"


@dataclass(frozen=True)
class FileFacts:
    fp16: bool = False  # fp16 autocast, .half(), torch.float16, an enabled GradScaler
    bf16: bool = False
    dtype_unknown: bool = False  # an autocast region whose dtype is decided at run time
    autocast: bool = False


@dataclass(frozen=True)
class ProjectFacts:
    fp16: bool = False
    bf16: bool = False
    dtype_unknown: bool = False
    autocast: bool = False

    @classmethod
    def from_files(cls, files: Iterable[FileFacts]) -> "ProjectFacts":
        fp16 = bf16 = unknown = autocast = False
        for f in files:
            fp16 |= f.fp16
            bf16 |= f.bf16
            unknown |= f.dtype_unknown
            autocast |= f.autocast
        return cls(fp16=fp16, bf16=bf16, dtype_unknown=unknown, autocast=autocast)

    @property
    def may_run_fp16(self) -> bool:
        return self.fp16 or self.dtype_unknown


def condition_holds(condition: str, facts: ProjectFacts, precision: str = "auto") -> bool:
    if condition == FP16:
        if precision == "fp16":
            return True
        if precision == "bf16":
            return False
        return facts.may_run_fp16
    if condition == AUTOCAST:
        return facts.autocast or precision in ("fp16", "bf16")
    raise ValueError(f"unknown diagnostic condition {condition!r}")
