"""AMP206 bf16-model-training beyond its own examples: the split with AMP201 (fp16), the optimizers
and wrappers it stays silent for, the shapes it shares with AMP201 through `model/training_casts.py`
(DDP and torch.compile keep the parameters; a master wrapper given the optimizer by keyword), and
the cross-file halves (`model/project/cast_training.py`)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from amplint import Config, lint_paths, lint_source


def _codes(code: str, *select: str):
    source = textwrap.dedent(code).lstrip("\n")
    return [(d.code, d.location.row) for d in lint_source(source, "t.py", Config(select=select or ("AMP201", "AMP206")))]


def test_fp16_is_amp201_bf16_is_amp206_and_a_choice_with_fp16_is_amp201_once():
    base = """
        import torch
        model = Net().cuda(){cast}
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """
    assert _codes(base.replace("{cast}", ".half()")) == [("AMP201", 2)]
    assert _codes(base.replace("{cast}", ".bfloat16()")) == [("AMP206", 2)]
    assert _codes(base.replace("{cast}", ".to(dtype=torch.bfloat16)")) == [("AMP206", 2)]
    assert _codes(base.replace("{cast}", ".float()")) == []
    choice = """
        import torch
        dtype = {choice}
        model = Net().cuda().to(dtype)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """
    assert _codes(choice.replace("{choice}", "torch.bfloat16 if args.bf16 else torch.float32")) == [("AMP206", 3)]
    assert _codes(choice.replace("{choice}", "{'fp16': torch.float16, 'bf16': torch.bfloat16}[args.precision]")) == [("AMP201", 3)]
    assert _codes(choice.replace("{choice}", "args.dtype")) == []


def test_message_names_the_cast_and_the_optimizer_and_data_feeds_the_experiment():
    source = """
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, eps=1e-6)
    """
    (d,) = lint_source(textwrap.dedent(source).lstrip("\n"), "t.py", Config(select=("AMP206",)))
    assert d.message == "`from_pretrained(..., torch_dtype=bfloat16)`: `AdamW` updates bf16 weights with no fp32 master copy"
    assert d.severity.value == "warning" and "autocast" in d.help and "stochastic rounding" in d.help
    assert d.data["dtype"] == "bf16" and d.data["optimizer_class"] == "torch.optim.AdamW"
    assert d.data["lr"] == 2e-5 and d.data["eps"] == 1e-6
    assert d.data["snippet"] == "torch.optim.AdamW(model.parameters(), lr=2e-5, eps=1e-6)"


@pytest.mark.parametrize(
    "optimizer",
    [
        "bnb.optim.AdamW8bit(model.parameters(), lr=1e-4)",  # updates the bf16 weight, but not a class amplint knows
        "apex.optimizers.FusedAdam(model.parameters(), lr=1e-4)",
        "optimi.AdamW(model.parameters(), lr=1e-4)",  # Kahan summation for bf16 parameters by default
        "torchao.optim.AdamW8bit(model.parameters(), lr=1e-4, bf16_stochastic_round=True)",
    ],
)
def test_only_torch_optim_classes_are_flagged(optimizer):
    assert _codes(
        f"""
        import torch
        import bitsandbytes as bnb
        import apex
        import optimi
        import torchao
        model = Net().cuda().bfloat16()
        optimizer = {optimizer}
        """
    ) == []


@pytest.mark.parametrize(
    "handed",
    [
        "model, optimizer = accelerator.prepare(model, optimizer)",
        "model, optimizer = fabric.setup(model, optimizer)",
        "trainer = Trainer(model=model, args=training_args, optimizers=(optimizer, None))",
        "engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer)",
    ],
)
def test_an_optimizer_handed_to_what_may_keep_fp32_masters_is_silent(handed):
    assert _codes(
        f"""
        import torch
        import deepspeed
        from transformers import Trainer
        model = Net().cuda().bfloat16()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        {handed}
        """
    ) == []


def test_amp201_hears_a_master_wrapper_given_the_optimizer_by_keyword():
    assert _codes(
        """
        import torch
        from apex.fp16_utils import FP16_Optimizer
        model = Net().cuda().half()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        optimizer = FP16_Optimizer(init_optimizer=optimizer, dynamic_loss_scale=True)
        """
    ) == []


def test_ddp_and_compile_keep_the_cast_parameters_for_both_rules():
    shape = """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = Net().cuda(){cast}
        model = DDP(model, device_ids=[rank])
        model = torch.compile(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """
    assert _codes(shape.replace("{cast}", ".bfloat16()")) == [("AMP206", 3)]
    assert _codes(shape.replace("{cast}", ".half()")) == [("AMP201", 3)]
    rebound = """
        import torch
        model = Net().cuda().bfloat16()
        model = Wrapper(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """
    assert _codes(rebound) == [], "a wrapper amplint does not know may hold other parameters"


def test_fsdp_mixed_precision_is_amp804s_and_plain_fsdp_keeps_bf16_shards():
    shape = """
        import torch
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
        def main(cfg):
            model = build(cfg)
            if cfg.pure_bf16:
                model.to(torch.bfloat16)
            if cfg.fsdp:
                model = FSDP(model{policy})
            optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    """
    assert _codes(shape.replace("{policy}", ", mixed_precision=MixedPrecision(param_dtype=torch.bfloat16)")) == []
    assert _codes(shape.replace("{policy}", "")) == [("AMP206", 6)]
    assert _codes(shape.replace("{policy}", ", mixed_precision=None")) == [("AMP206", 6)]
    assert _codes(shape.replace("{policy}", ", mixed_precision=(policy if not cfg.pure_bf16 else None)")) == [("AMP206", 6)], (
        "the pure-bf16 path wraps with no policy: AMP804 has nothing there"
    )


def test_inference_casts_frozen_bases_and_casts_back_stay_silent():
    assert _codes(
        """
        import torch
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        teacher = Teacher().cuda().bfloat16().eval()
        """
    ) == []
    assert _codes(
        """
        import torch
        model = Net().cuda().bfloat16()
        model.float()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        """
    ) == []
    assert _codes(
        """
        import torch
        model = Net().cuda().bfloat16()
        model.backbone.requires_grad_(False)
        optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, model.parameters()), lr=1e-4)
        """
    ) == []


def test_a_cast_after_the_optimizer_counts_only_with_a_step_after_it():
    late = """
        import torch
        model = Net().cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model.to(torch.bfloat16)
        {after}
    """
    assert _codes(late.replace("{after}", "torch.save(model.state_dict(), 'bf16.pt')")) == []
    assert _codes(late.replace("{after}", "for x in loader:\n            model(x).mean().backward()\n            optimizer.step()")) == [("AMP206", 4)]


# ------------------------------------------------------------------ across files

BUILDER = """
import torch
from transformers import AutoModelForCausalLM


def build(args):
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype={dtype})
    return model.cuda()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)


def make_net():
    net = Net()
    net.bfloat16()
    return net


def pick_dtype(args):
    if args.bf16:
        return torch.bfloat16
    return torch.float32
"""

TRAIN = """
import torch
from modeling import build, make_net, pick_dtype


def fit(args, loader):
    {body}
    for batch in loader:
        model(**batch).loss.backward()
        optimizer.step()
"""


def project(root: Path, body: str, dtype: str = "torch.bfloat16") -> list:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (root / "modeling.py").write_text(BUILDER.replace("{dtype}", dtype))
    (root / "train.py").write_text(TRAIN.replace("{body}", textwrap.indent(textwrap.dedent(body), "    ").strip()))
    return lint_paths([str(root)], Config(select=frozenset({"AMP201", "AMP206"}))).diagnostics


def test_a_module_made_bf16_in_another_file(tmp_path):
    found = project(tmp_path / "a", """
        model = make_net()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    """)
    assert [(Path(d.filename).name, d.location.row, d.code) for d in found] == [("train.py", 8, "AMP206")]
    assert found[0].message == "`SGD` updates the parameters of a `Net` made bf16, with no fp32 master copy"
    assert any(r.filename and r.filename.endswith("modeling.py") and r.message == "made bf16 here" for r in found[0].related)
    found = project(tmp_path / "b", """
        model = build(args)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    """)
    assert [(d.location.row, d.code) for d in found] == [(8, "AMP206")]
    assert "from_pretrained(...)" in found[0].message
    found = project(tmp_path / "c", """
        model = build(args)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    """, dtype="torch.float16")
    assert [(d.location.row, d.code) for d in found] == [(8, "AMP201")], "the fp16 load stays AMP201's"


FSDP_TRAIN = """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
from modeling import build


def fit(args, policies):
    model = build(args)
    model = FSDP(model{policy})
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
"""


@pytest.mark.parametrize("policy, found", [
    (", mixed_precision=MixedPrecision(param_dtype=torch.bfloat16)", []),
    (", mixed_precision=policies[args.dtype]", []),
    (", mixed_precision=(policies.bf16 if args.bf16 else policies.fp32)", []),
    (", mixed_precision=(bf16_policy if args.bf16 else fp32_policy)", []),
    ("", [(10, "AMP206")]),
    (", mixed_precision=None", [(10, "AMP206")]),
    (", mixed_precision=(policies.bf16 if not args.pure_bf16 else None)", [(10, "AMP206")]),
])
def test_across_files_an_fsdp_policy_is_amp804s_as_in_one_file(tmp_path, policy, found):
    root = tmp_path / "p"
    project(root, "model = build(args)")
    (root / "train.py").write_text(FSDP_TRAIN.replace("{policy}", policy))
    diagnostics = lint_paths([str(root)], Config(select=frozenset({"AMP206"}))).diagnostics
    assert [(d.location.row, d.code) for d in diagnostics] == found, "the scale view's policy_wraps, as the per-file check reads it"


def test_across_files_a_prepared_optimizer_and_a_frozen_base_stay_silent(tmp_path):
    assert project(tmp_path / "a", """
        model = make_net()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        model, optimizer = accelerator.prepare(model, optimizer)
    """) == []
    assert project(tmp_path / "b", """
        model = build(args)
        model.requires_grad_(False)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    """) == []


def test_a_dtype_picked_by_a_helper_in_another_file(tmp_path):
    found = project(tmp_path / "a", """
        model = args.model
        weight_dtype = pick_dtype(args)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model.to(weight_dtype)
    """)
    assert [(d.location.row, d.code) for d in found] == [(10, "AMP206")]
    assert "may make the model bf16" in found[0].message
