"""AMP811 fp8-backward-inside-autocast."""
from __future__ import annotations

from typing import Any, Dict, Iterator, List

from amplint.model import Diagnostic, Invalid, Rule, ScaleFinding, ScaleView, Severity, Valid, scale_file_diagnostics


class Fp8BackwardInsideAutocast(Rule):
    """
    ## What it does
    Flags `loss.backward()` (also `scaler.scale(loss).backward()`,
    `engine.backward(loss)`) and `optimizer.step()` lexically inside a
    TransformerEngine FP8 region: `with te.fp8_autocast(...)` or TE 2.x's
    `with te.autocast(...)`.

    ## Why is this bad?
    TransformerEngine wants only the forward pass inside its FP8 region: the
    backward reuses the forward's recipe state, and the region's exit is where
    TE reduces the amax history and updates the delayed-scaling factors of the
    forward (`FP8GlobalStateManager.autocast_exit` ->
    `reduce_and_update_fp8_tensors(forward=True)` in
    `transformer_engine/pytorch/quantization.py`, only while grad is enabled).
    With backward and the optimizer step inside, they run against a region
    still open, in the order TE does not expect: TE's own documentation notebook
    was fixed for "running the backward pass within an fp8_autocast. This fixed
    some runtime errors" (NVIDIA/TransformerEngine#20), and its maintainers'
    examples keep `loss.backward()` outside (NVIDIA/TransformerEngine#1422).
    CUDA only: FP8 needs a GPU of compute capability 8.9 or newer, so amplint
    cannot measure it on a CPU.

    ## Example
    ```python
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        loss = model(x).sum()
        loss.backward()
    ```

    ## Use instead
    ```python
    with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
        loss = model(x).sum()
    loss.backward()
    ```

    ## Notes
    Silent for `fp8_autocast(enabled=False)` (no FP8), for torch's own
    `torch.autocast` (AMP202 covers backward inside it) and for a backward in a
    helper function called from the region (not followed).

    ## References
    - amplint's evidence page: `amplint --explain AMP811` (docs/evidence.md#amp811)
    - NVIDIA/TransformerEngine#20, #1422
    - https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/fp8_primer.html
    """

    code = "AMP811"
    name = "fp8-backward-inside-autocast"
    severity = Severity.WARNING
    text_only = True  # reads `ast` scale summaries: no libcst parse
    message = "backward or the optimizer step inside TransformerEngine's FP8 region"
    triggers = ("fp8_autocast", "transformer_engine")
    requires = (("backward", "step("),)

    VALID = [
        Valid(
            """
import transformer_engine.pytorch as te
with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
    out = model(x)
    loss = out.sum()
loss.backward()
optimizer.step()
""",
            "only the forward inside",
        ),
        Valid(
            """
import transformer_engine.pytorch as te
with te.fp8_autocast(enabled=False):
    loss = model(x).sum()
    loss.backward()
""",
            "FP8 disabled",
        ),
        Valid(
            """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).sum()
loss.backward()
""",
            "torch's autocast",
        ),
        Valid(
            """
import transformer_engine.pytorch as te
def step(model, x, optimizer):
    with te.fp8_autocast():
        loss = model(x).sum()
    loss.backward()
    optimizer.step()
""",
            "the backward after the region",
        ),
    ]

    INVALID = [
        Invalid(
            """
import transformer_engine.pytorch as te
with te.fp8_autocast(enabled=True, fp8_recipe=recipe):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
""",
            line=4,
            count=1,
        ),
        Invalid(
            """
from transformer_engine.pytorch import fp8_autocast
def train_step(model, batch, scaler, optimizer, use_fp8):
    with fp8_autocast(enabled=use_fp8):
        loss = model(batch).mean()
        scaler.scale(loss).backward()
    scaler.step(optimizer)
""",
            line=5,
            why="an FP8 path offered by a flag",
        ),
        Invalid(
            """
import transformer_engine.pytorch as te
for batch in loader:
    with te.autocast(recipe=recipe):
        out = model(batch)
        optimizer.zero_grad()
        out.loss.backward()
""",
            line=6,
            why="TE 2.x's `te.autocast`",
        ),
    ]

    def check_text(self, source: str, path: str) -> Iterator[Diagnostic]:
        yield from scale_file_diagnostics(self, source, path, self.findings)

    def findings(self, view: ScaleView) -> Iterator[ScaleFinding]:
        for path in view.files():
            s = view.summary(path)
            assert s is not None
            regions = [e for e in s["events"] if e["e"] == "fp8" and e.get("en") is not False]
            for region in regions:
                inside: List[Dict[str, Any]] = [
                    e for e in s["events"]
                    if e["e"] in ("back", "step") and e["f"] == region["f"] and region["r"] < e["r"] <= region["end"]
                ]
                if not inside:
                    continue
                first = inside[0]
                spelled = region.get("spelled") or "fp8_autocast"
                what = "backward" if first["e"] == "back" else f"`{first['recv']}.step()`"
                message = f"{what} runs inside `{spelled}`: only the forward pass belongs in the FP8 region"
                help = f"Dedent the backward and the optimizer step out of the `with {spelled}(...)` block"
                related = [(view.place(path, region), "the FP8 region opens here")]
                related += [(view.place(path, e), "also inside") for e in inside[1:]]
                data = {"region": spelled, "inside": [e["e"] for e in inside], "enabled": region.get("en")}
                yield ScaleFinding(view.place(path, first), message, help, related, data)
