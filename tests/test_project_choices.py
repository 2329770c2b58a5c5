"""AMP201 across files (`model/project/choices.py`, `trained.py`): a dtype a project function
picks among literals (float16 one of them) casts a module whose parameters an optimizer gets,
directly or through a project helper that constructs a torch optimizer on what it is given."""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from amplint import Config, lint_paths
from amplint.model.project.trained import parameter_flows

HELPERS = """
import torch


def pick_dtypes(args):
    weight = torch.float32
    if args.mixed_precision == "fp16":
        weight = torch.float16
    elif args.mixed_precision == "bf16":
        weight = torch.bfloat16
    return weight, None


def only_bf16(args):
    return (torch.bfloat16 if args.bf16 else torch.float32), None


def from_config(args):
    weight = torch.float16
    if args.dtype:
        weight = args.dtype
    return weight, None


def single(args):
    if args.half:
        return torch.float16
    return torch.float32


def make_optimizer(args, params):
    if args.sgd:
        klass = torch.optim.SGD
    else:
        klass = torch.optim.AdamW
    return klass(params, lr=args.lr)


def setup_optimizer(unet, args):
    optimizer_cls = torch.optim.AdamW
    return optimizer_cls(unet.parameters(), lr=args.lr)


def setup_wrapped(unet, args):
    unet = wrap(unet)
    return torch.optim.AdamW(unet.parameters(), lr=args.lr)
"""

TRAIN = """
import torch
from helpers import pick_dtypes, only_bf16, from_config, single, make_optimizer, setup_optimizer, setup_wrapped


def train(args, model, frozen, loader):
    {body}
    for batch in loader:
        loss = model(batch).mean()
        loss.backward()
        optimizer.step()
"""


def run(tmp_path: Path, body: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "train.py").write_text(TRAIN.replace("{body}", textwrap.indent(textwrap.dedent(body), "    ").strip()))
    found = lint_paths([str(tmp_path)], Config(select=frozenset({"AMP201"}))).diagnostics
    return found, sorted(f"{Path(d.filename).name}:{d.location.row}" for d in found)


def test_a_dtype_picked_in_another_file_casts_the_optimized_model(tmp_path):
    found, rows = run(tmp_path / "a", """
        weight_dtype, _ = pick_dtypes(args)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        if args.full_fp16:
            model.to(weight_dtype)
    """)
    assert rows == ["train.py:10"]
    assert "may make the model fp16" in found[0].message and "`AdamW`" in found[0].message
    assert any(r.filename and r.filename.endswith("helpers.py") and r.location.row == 5 for r in found[0].related)


def test_single_value_returns_and_chained_names_count(tmp_path):
    _, rows = run(tmp_path / "a", """
        dtype = single(args)
        model_dtype = dtype
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.to(model_dtype)
    """)
    assert rows == ["train.py:10"]


def test_choices_without_float16_or_with_a_run_time_value_stay_silent(tmp_path):
    for i, helper in enumerate(("only_bf16", "from_config")):
        _, rows = run(tmp_path / str(i), f"""
            weight_dtype, _ = {helper}(args)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            model.to(weight_dtype)
        """)
        assert rows == [], helper


def test_an_optimizer_helper_given_a_collected_list(tmp_path):
    _, rows = run(tmp_path / "a", """
        weight_dtype, _ = pick_dtypes(args)
        models = [model]
        params = []
        for m in models:
            params.extend(m.parameters())
        optimizer = make_optimizer(args, params)
        if args.full_fp16:
            model.to(weight_dtype)
    """)
    assert rows == ["train.py:14"]
    _, rows = run(tmp_path / "b", """
        weight_dtype = torch.float16 if args.fp16 else torch.float32
        groups = []
        for name, p in model.named_parameters():
            groups.append(p)
        optimizer = make_optimizer(args, groups)
        model.to(weight_dtype)
    """)
    assert rows == ["train.py:12"], "a literal choice in the file, the optimizer from a helper: the per-file check cannot see it"


def test_frozen_modules_and_the_frozen_path_stay_silent(tmp_path):
    _, rows = run(tmp_path / "a", """
        weight_dtype, _ = pick_dtypes(args)
        frozen.requires_grad_(False)
        frozen.to(weight_dtype)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """)
    assert rows == []
    _, rows = run(tmp_path / "b", """
        weight_dtype, _ = pick_dtypes(args)
        model.requires_grad_(args.train_model)
        if not args.train_model:
            model.to(weight_dtype)
        params = []
        if args.train_model:
            params.append({"params": list(model.parameters())})
        optimizer = make_optimizer(args, params)
    """)
    assert rows == [], "a run-time freeze: the cast before the optimizer may be the frozen path's"


def test_a_rebound_name_no_step_after_or_a_master_copy_stay_silent(tmp_path):
    _, rows = run(tmp_path / "a", """
        weight_dtype, _ = pick_dtypes(args)
        model.to(weight_dtype)
        del model
        model = args.build()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """)
    assert rows == []
    _, rows = run(tmp_path / "b", """
        weight_dtype, _ = pick_dtypes(args)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer = accelerator.prepare(model, optimizer)
        model.to(weight_dtype)
    """)
    assert rows == ["train.py:10"], "accelerate's prepare returns the same module, wrapped"
    _, rows = run(tmp_path / "c", """
        weight_dtype, _ = pick_dtypes(args)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        optimizer = FP16_Optimizer(optimizer)
        model.to(weight_dtype)
    """)
    assert rows == []


def test_parameter_flows_read_lists_loops_and_freezes():
    src = """
def f(args, unet, te, net, encoders):
    models = [unet]
    params = []
    for m in models:
        params.extend(m.parameters())
    groups = [{"params": list(te.parameters())}]
    own = []
    for name, p in net.named_parameters():
        own.append(p)
    picked = list(net.prepare_optimizer_params(1e-4))
    embeds = []
    for enc in encoders:
        embeds += enc.get_input_embeddings().parameters()
    te.requires_grad_(False)
    unet.requires_grad_(args.train_unet)
    for p in net.parameters():
        p.requires_grad = False
"""
    flows = parameter_flows(ast.parse(src).body[0].body)
    assert flows["pf"] == {"params": ["unet"], "groups": ["te"], "own": ["net"], "picked": ["net"], "embeds": ["enc"]}
    assert flows["fz"] == ["net", "te"] and flows["fv"] == ["unet"] and flows["lv"] == {"m": ["unet"]}


def test_an_assigned_cast_counts_and_keeps_the_module(tmp_path):
    _, rows = run(tmp_path / "a", """
        weight_dtype, _ = pick_dtypes(args)
        model = model.to(weight_dtype)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    """)
    assert rows == ["train.py:8"]


def test_an_optimizer_helper_given_the_module_builds_on_its_parameters(tmp_path):
    """diffusers' pytorch_xla text-to-image example: `unet = unet.to(device, dtype=weight_dtype)`, the dtype
    a `--mixed_precision` choice of the file, then `setup_optimizer(unet, args)` builds AdamW on
    `unet.parameters()`; a helper that rebinds the module first (a wrapper) is not followed."""
    found, rows = run(tmp_path / "a", """
        weight_dtype = torch.float32
        if args.mixed_precision == "fp16":
            weight_dtype = torch.float16
        model = model.to(device, dtype=weight_dtype)
        optimizer = setup_optimizer(model, args)
        print(sum(p.numel() for p in model.parameters()), "parameters")
    """)
    assert rows == ["train.py:10"]
    assert "may make the model fp16" in found[0].message and "`setup_optimizer`" in found[0].message
    _, rows = run(tmp_path / "b", """
        weight_dtype = torch.float16 if args.fp16 else torch.float32
        model = model.to(device, dtype=weight_dtype)
        optimizer = setup_wrapped(model, args)
        print(sum(p.numel() for p in model.parameters()), "parameters")
    """)
    assert rows == []
    _, rows = run(tmp_path / "c", """
        weight_dtype = torch.float16 if args.fp16 else torch.float32
        model = model.to(device, dtype=weight_dtype)
        optimizer = setup_optimizer(copy.deepcopy(model).float(), args)
        print(sum(p.numel() for p in model.parameters()), "parameters")
    """)
    assert rows == []
