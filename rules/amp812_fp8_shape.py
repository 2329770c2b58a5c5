"""AMP812 fp8-shape."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

from amplint.model import Diagnostic, Invalid, Rule, ScaleFinding, ScaleView, Severity, Valid, scale_file_diagnostics


class Fp8Shape(Rule):
    """
    ## What it does
    Flags FP8 linear layers whose literal sizes the FP8 GEMM rejects:

    - a TransformerEngine `te.Linear(in_features, out_features)` or
      `te.LayerNormLinear(...)` with `in_features` not divisible by 16 or
      `out_features` not divisible by 8 (`te.LayerNormMLP(hidden, ffn)`: both
      by 16);
    - an `nn.Linear(in_features, out_features)` of a model converted with
      torchao's `convert_to_float8_training(model)` (no `module_filter_fn`)
      with either size not divisible by 16.

    ## Why is this bad?
    The FP8 GEMMs only take aligned shapes. TransformerEngine asserts on the
    weight (`out_features x in_features`) when the forward runs: "FP8 execution
    requires 2D input matrices with height divisible by 8 and width divisible by
    16" (`assert_dim_for_fp8_exec` in `transformer_engine/pytorch/utils.py`;
    NVIDIA/TransformerEngine#1422, dims=[896, 712]). torchao's float8 linear
    calls `torch._scaled_mm` on `input @ weight.t()`, which requires the
    weight's both dimensions divisible by 16 ("Expected both dimensions of mat2
    to be divisible by 16", torch 2.13's `_meta_registrations.py`; pytorch/ao#3111).
    Either way the first training step crashes, after the job got its GPUs.
    The GEMM itself is CUDA only; the shape check can be shown on CPU with meta
    tensors (docs/evidence.md).

    ## Example
    ```python
    proj = te.Linear(1000, 4096)
    ```

    ## Use instead
    ```python
    proj = te.Linear(1024, 4096)  # pad to a multiple of 16 (32 for MXFP8)
    ```
    or keep the layer out of FP8 (`te.fp8_autocast(enabled=False)` around it,
    a torchao `module_filter_fn` that skips it).

    ## Notes
    Only literal sizes are checked (a size from a config is decided at run
    time). The token dimension (batch x sequence, divisible by 8 for TE and by 16
    in torchao's backward) is not known statically. For torchao, a model the
    conversion is given and whose class this file defines is read, including
    layers in `nn.Sequential`; a `module_filter_fn` makes the rule silent.

    The assert fires in the forward, so a layer that can never run one is left
    alone: a layer built only for a type check, as the first argument of
    `isinstance`/`issubclass`/`type` or bound to a local name of a function that
    uses it only there, or not at all (MS-AMP's test that `te.Linear(4, 4)` is
    its `MSAMPLinear` after the module swap: nothing calls it, passes it on,
    returns it or stores it). A layer bound at module level (it may be
    imported), held in an attribute, passed on, returned or called is checked.
    A layer a private builder of the file returns as it builds it (`def
    _make_module(name): ... return te.Linear(1, 1)`) is left alone when every
    call of the builder in the file binds its result to a local name that only
    saves or loads its state (`module.state_dict()`,
    `module.load_state_dict(...)`, `named_parameters()`; TransformerEngine's
    checkpoint test) or checks its type: no forward runs, inside an FP8 region
    or out of it. A public builder (another file may run what it returns), or
    one whose result is called, passed on or returned, is checked.

    ## References
    - amplint's evidence page: `amplint --explain AMP812` (docs/evidence.md#amp812)
    - NVIDIA/TransformerEngine#1422, #688, #232; pytorch/ao#3111; pytorch/torchtitan#4008
    """

    code = "AMP812"
    name = "fp8-shape"
    severity = Severity.ERROR
    text_only = True  # reads `ast` scale summaries: no libcst parse
    message = "an FP8 linear layer with a size the FP8 GEMM rejects"
    triggers = ("transformer_engine", "convert_to_float8_training")
    requires = (("Linear", "LayerNormMLP"),)

    VALID = [
        Valid(
            """
import transformer_engine.pytorch as te
proj = te.Linear(1024, 4096, bias=True)
mlp = te.LayerNormMLP(hidden_size=1024, ffn_hidden_size=4096)
""",
            "aligned sizes",
        ),
        Valid(
            """
import transformer_engine.pytorch as te
proj = te.Linear(config.hidden, config.vocab)
""",
            "sizes decided at run time",
        ),
        Valid(
            """
import torch.nn as nn
from torchao.float8 import convert_to_float8_training
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(1024, 1024)
        self.head = nn.Linear(1024, 10)
model = Net()
convert_to_float8_training(model, module_filter_fn=lambda m, fqn: fqn != "head")
""",
            "the small head is filtered out",
        ),
        Valid(
            """
import torch.nn as nn
head = nn.Linear(1024, 10)
""",
            "a plain torch Linear: no FP8",
        ),
        Valid(
            """
import transformer_engine.pytorch as te
from msamp.te.modules import MSAMPLayerNormMLP, MSAMPLinear


def test_modules():
    te_linear = te.Linear(4, 4)
    assert isinstance(te_linear, MSAMPLinear)
    assert isinstance(te.LayerNormMLP(4, 4), MSAMPLayerNormMLP)
    unused = te.LayerNormLinear(4, 4)
""",
            "the blind drill (MS-AMP): layers built only for an `isinstance` check (or never used)"
            " run no forward, so no FP8 GEMM asserts",
        ),
        Valid(
            """
import torch
import transformer_engine.pytorch as te


class TestLoadCheckpoint:
    @staticmethod
    def _make_module(name):
        if name == "linear":
            return te.Linear(1, 1)
        return te.LayerNormMLP(1, 1)

    def test_module(self, name, path):
        module = self._make_module(name)
        module.load_state_dict(torch.load(path), strict=True)


def save(name, path):
    module = TestLoadCheckpoint._make_module(name)
    torch.save(module.state_dict(), path)
""",
            "the blind drill (TransformerEngine): a private builder's layers only save and load their"
            " state, no forward runs",
        ),
    ]

    INVALID = [
        Invalid(
            """
import transformer_engine.pytorch as te
proj = te.Linear(712, 896)
""",
            line=2,
        ),
        Invalid(
            """
from transformer_engine.pytorch import LayerNormLinear
class Block:
    def __init__(self):
        self.qkv = LayerNormLinear(in_features=768, out_features=2300)
""",
            line=4,
            why="out_features 2300 is not a multiple of 8",
        ),
        Invalid(
            """
import torch.nn as nn
from torchao.float8 import convert_to_float8_training
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU())
        self.head = nn.Linear(1024, 10)
model = Net()
convert_to_float8_training(model)
""",
            line=7,
        ),
        Invalid(
            """
import torch
import transformer_engine.pytorch as te
from msamp.te.modules import MSAMPLinear


def test_linear_forward():
    te_linear = te.Linear(4, 16)
    assert isinstance(te_linear, MSAMPLinear)
    with te.fp8_autocast():
        y = te_linear(torch.randn(16, 4, device="cuda"))
""",
            line=7,
            why="the layer checked for its type is also run: its forward asserts",
        ),
        Invalid(
            """
import torch
import transformer_engine.pytorch as te


def _make_module():
    return te.Linear(1, 1)


def test_forward(path):
    module = _make_module()
    module.load_state_dict(torch.load(path))
    with te.fp8_autocast():
        module(torch.randn(16, 1, device="cuda"))
""",
            line=6,
            why="the private builder's layer is also run under FP8: its forward asserts",
        ),
    ]

    def check_text(self, source: str, path: str) -> Iterator[Diagnostic]:
        yield from scale_file_diagnostics(self, source, path, self.findings)

    def findings(self, view: ScaleView) -> Iterator[ScaleFinding]:
        for path in view.files():
            s = view.summary(path)
            assert s is not None
            for e in s["events"]:
                if e["e"] == "linear" and e["lib"] == "te" and not e.get("probe"):
                    found = _te(view, path, e)
                    if found is not None:
                        yield found
            converted = _float8_classes(view, path, s)
            for e in s["events"]:
                if e["e"] == "linear" and e["lib"] == "torch" and not e.get("probe") and e["f"].split(".", 1)[0] in converted:
                    found = _torchao(view, path, e, converted[e["f"].split(".", 1)[0]])
                    if found is not None:
                        yield found


def _te(view: ScaleView, path: str, e: Dict[str, Any]) -> Optional[ScaleFinding]:
    first, second = e["dims"]
    cls = e["cls"]
    bad: List[str] = []
    names = ("hidden_size", "ffn_hidden_size") if cls == "LayerNormMLP" else ("in_features", "out_features")
    multiples = (16, 16) if cls == "LayerNormMLP" else (16, 8)
    for name, value, multiple in zip(names, (first, second), multiples):
        if value is not None and value % multiple:
            bad.append(f"{name}={value} is not a multiple of {multiple}")
    if not bad:
        return None
    message = f"`te.{cls}`: {' and '.join(bad)}; the FP8 GEMM asserts"
    if len(message) >= 100:  # both sizes wrong: one short sentence still
        message = f"`te.{cls}({first}, {second})`: both sizes miss the FP8 multiples ({multiples[0]}, {multiples[1]}); the GEMM asserts"
    help = "Pad the sizes to multiples of 16 (32 for MXFP8), or run this layer outside FP8"
    data = {"library": "transformer_engine", "module": cls, "dims": [first, second]}
    return ScaleFinding(view.place(path, e), message, help, [], data)


def _float8_classes(view: ScaleView, path: str, s: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The classes of this file whose instances torchao's `convert_to_float8_training` converts
    (no `module_filter_fn`), with the conversion call; nested classes of this file they
    build in `__init__` too."""
    out: Dict[str, Dict[str, Any]] = {}
    for e in s["events"]:
        if e["e"] != "float8" or e.get("filter") or not e.get("s"):
            continue
        for _, _, ref in view.values(path, e["f"], e["s"]):
            name = ref.get("c", "")
            if name in s["classes"]:
                for cls in _nested(s, name, set()):
                    out.setdefault(cls, e)
    return out


def _nested(s: Dict[str, Any], cls: str, seen: Set[str]) -> Set[str]:
    seen.add(cls)
    for qual, binds in s["binds"].items():
        if not qual.startswith(f"{cls}."):
            continue
        for refs in binds.values():
            for r in refs:
                inner = r.get("c", "")
                if inner in s["classes"] and inner not in seen:
                    _nested(s, inner, seen)
    return seen


def _torchao(view: ScaleView, path: str, e: Dict[str, Any], conversion: Dict[str, Any]) -> Optional[ScaleFinding]:
    bad = [f"{name}={v}" for name, v in zip(("in_features", "out_features"), e["dims"]) if v is not None and v % 16]
    if not bad:
        return None
    message = f"float8 `nn.Linear` with {' and '.join(bad)} (not a multiple of 16): `torch._scaled_mm` raises"
    help = "Pad the sizes to multiples of 16, or pass a `module_filter_fn` that keeps this layer out"
    related: List[Tuple[Any, str]] = [(view.place(path, conversion), "converted to float8 here")]
    data = {"library": "torchao", "module": "Linear", "dims": e["dims"]}
    return ScaleFinding(view.place(path, e), message, help, related, data)
