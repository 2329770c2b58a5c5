"""Shapes of real code from the real-code drill (docs/precision.md) that rule
examples cannot hold: AMP301's silent-overflow form is a warning, and INVALID
examples must carry the rule's (error) severity."""
from __future__ import annotations

import textwrap

from amplint import Config, Severity, lint_source


def _amp301(code: str):
    config = Config(select=("AMP301",))
    return [d for d in lint_source(textwrap.dedent(code), "example.py", config) if d.code == "AMP301"]


def test_mask_built_from_two_literals_is_flagged():
    # transformers LongT5: the mask is fp32, but `scores += position_bias` writes -1e10 into fp16 scores
    found = _amp301(
        """
        import torch
        from torch import nn

        class LongT5LocalAttention(nn.Module):
            def forward(self, hidden_states, mask=None):
                scores = torch.einsum("...qhd,...khd->...hqk", self.q(hidden_states), self.k(hidden_states))
                if mask is not None:
                    mask = torch.where(mask > 0, 0.0, -1e10)
                    position_bias = self.compute_bias() + mask.transpose(1, 2)
                scores += position_bias
                return nn.functional.softmax(scores.float(), dim=-1).type_as(scores)

        model = LongT5LocalAttention().half()
        """
    )
    assert [(d.location.row, d.severity) for d in found] == [(9, Severity.WARNING)]


def test_shift_of_matmul_scores_is_flagged():
    found = _amp301(
        """
        import torch

        def attend(q, k, v, mask):
            scores = torch.matmul(q, k.transpose(-1, -2))
            scores = scores + (1.0 - mask) * -1e9
            return scores.softmax(-1) @ v

        with torch.autocast("cuda", dtype=torch.float16):
            out = attend(q, k, v, mask)
        """
    )
    assert [(d.location.row, d.severity) for d in found] == [(6, Severity.WARNING)]


def test_shift_of_scores_of_unknown_dtype_is_not_flagged():
    # transformers beam search: the scores are fp32 (log-softmax of fp32 logits), decided elsewhere
    found = _amp301(
        """
        import torch

        def step(topk_log_probs, finished, beam_scores, is_sent_finished):
            topk_log_probs += (~finished) * -1.0e9
            worst = torch.where(is_sent_finished, torch.min(beam_scores, dim=1, keepdim=True)[0], -1.0e9)
            return topk_log_probs, worst

        model = model.half()
        """
    )
    assert found == []


_MASKS_TO_BOXES = """
import torch

def masks_to_boxes(masks):
    h, w = masks.shape[-2:]
    y = torch.arange(0, h, dtype=torch.{dtype}, device=masks.device)
    x = torch.arange(0, w, dtype=torch.{dtype}, device=masks.device)
    y, x = torch.meshgrid(y, x, indexing="ij")
    x_mask = masks * x.unsqueeze(0)
    return x_mask.masked_fill(~(masks.bool()), 1e8).flatten(1).min(-1)[0]

model = build().half()
"""


def test_fill_of_a_product_with_an_fp32_grid_is_not_flagged():
    # rfdetr `masks_to_boxes`: whatever dtype the masks have, times the fp32 grid the product is fp32
    assert _amp301(_MASKS_TO_BOXES.format(dtype="float32")) == []


def test_fill_of_a_product_with_an_fp16_grid_is_flagged():
    found = _amp301(_MASKS_TO_BOXES.format(dtype="float16"))
    assert [(d.location.row, d.severity) for d in found] == [(10, Severity.ERROR)]
