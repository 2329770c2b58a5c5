"""fp16 weights from library loaders (`model/project/loaders.py`): only what their source
makes certain feeds AMP201/AMP302/AMP401; run-time devices and precisions are not guessed."""
from __future__ import annotations

import textwrap
from pathlib import Path

from amplint import Config, lint_paths
from amplint.model.project.loaders import fp16_weights
from amplint.model.project import summarize


def ref(call: str) -> dict:
    """The summary's reference to the call `call` (bound as `m = <call>`)."""
    return summarize(f"import clip, open_clip, torch\nm = {call}\n")["functions"]["<module>"]["locals"]["m"][0]


def test_the_table_reads_only_literal_arguments():
    assert fp16_weights("clip.load", ref('clip.load("ViT-B/32", device="cuda")'), first=True) == "clip.load(...)"
    assert fp16_weights("clip.load", ref('clip.load("ViT-B/32", "cuda:1")'), first=True) == "clip.load(...)"
    assert fp16_weights("clip.load", ref('clip.load("RN50", device=torch.device("cuda"))'), first=True) == "clip.load(...)"
    assert fp16_weights("clip.load", ref('clip.load("RN50", device="cuda")'), first=False) is None, "the tuple, not the model"
    for silent in ('clip.load("RN50", device="cpu")', 'clip.load("RN50", device=device)', 'clip.load("RN50")'):
        assert fp16_weights("clip.load", ref(silent), first=True) is None, silent
    made = ref('open_clip.create_model("ViT-B-32", precision="fp16")')
    assert fp16_weights("open_clip.create_model", made, first=False) == "open_clip.create_model(...)"
    pure = ref('open_clip.create_model_and_transforms("ViT-B-32", pretrained="openai", precision="pure_fp16")')
    assert fp16_weights("open_clip.create_model_and_transforms", pure, first=True)
    for precision in ("amp", "fp32", "bf16"):
        assert fp16_weights("open_clip.create_model", ref(f'open_clip.create_model("ViT-B-32", precision="{precision}")'), first=False) is None
    assert fp16_weights("torch.load", ref('torch.load("x.pt")'), first=False) is None


def run(tmp_path: Path, body: str):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (tmp_path / "train.py").write_text(textwrap.dedent(body))
    found = lint_paths([str(tmp_path)], Config(select=frozenset({"AMP201", "AMP302", "AMP401"}))).diagnostics
    return sorted(f"{d.location.row} {d.code}" for d in found)


TRAIN = """
import clip
import open_clip
import torch

def main(loader, device):
    {load}
    {after}
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-5, momentum=0.9)
    for images, texts in loader:
        loss = model(images, texts)[0].mean()
        loss.backward()
        optimizer.step()
"""


def body(load: str, after: str = "pass") -> str:
    return TRAIN.replace("{load}", load).replace("{after}", after)


def test_a_loader_in_the_optimizer_s_own_file_is_found(tmp_path):
    assert run(tmp_path / "a", body('model, preprocess = clip.load("ViT-B/32", device="cuda", jit=False)')) == ["9 AMP201"]
    assert run(tmp_path / "b", body('model = open_clip.create_model("ViT-B-32", pretrained="openai", precision="fp16", device="cuda")')) == ["9 AMP201"]


def test_cpu_run_time_devices_and_a_float_after_stay_silent(tmp_path):
    assert run(tmp_path / "cpu", body('model, preprocess = clip.load("ViT-B/32", device="cpu")')) == []
    assert run(tmp_path / "var", body('model, preprocess = clip.load("ViT-B/32", device=device)')) == []
    assert run(tmp_path / "flt", body('model, preprocess = clip.load("ViT-B/32", device="cuda")', "model.float()")) == []
    assert run(tmp_path / "amp", body('model = open_clip.create_model("ViT-B-32", precision="amp", device="cuda")')) == []


# ------------------------------------------------------------------ from_pretrained behind a flag (issue 22 shape 10)

BUILDER = """
import torch
from transformers import AutoModelForCausalLM

def build(args):
    {dtype}
    model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype)
    {after}
    return model.cuda()
"""

FIT = """
import torch
from modeling import build

def fit(args, loader):
    model = build(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    for batch in loader:
        model(**batch).loss.backward()
        optimizer.step()
    torch.save(model.state_dict(), "last.pt")
"""


def pretrained_project(root: Path, dtype: str, after: str = "pass") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (root / "modeling.py").write_text(textwrap.dedent(BUILDER.replace("{dtype}", dtype).replace("{after}", after)))
    (root / "train.py").write_text(textwrap.dedent(FIT))
    return root


def codes(root: Path):
    found = lint_paths([str(root)], Config(select=frozenset({"AMP201", "AMP302", "AMP401"}))).diagnostics
    return sorted(f"{Path(d.filename).name}:{d.location.row} {d.code}" for d in found)


def test_a_model_loaded_fp16_behind_a_flag_and_trained_in_another_file(tmp_path):
    root = pretrained_project(tmp_path / "flag", "dtype = torch.float16 if args.fp16 else torch.float32")
    assert codes(root) == ["train.py:7 AMP201"], "AMP401 stays silent: a from_pretrained fp16 checkpoint is fp16 at the source"
    found = lint_paths([str(root / "train.py")], Config(select=frozenset({"AMP201"}))).diagnostics
    assert "AutoModelForCausalLM.from_pretrained(...)" in found[0].message
    assert any(r.filename and r.filename.endswith("modeling.py") and r.location.row == 7 for r in found[0].related)
    assert codes(pretrained_project(tmp_path / "lit", "dtype = torch.float16")) == ["train.py:7 AMP201"]


def test_a_bf16_load_a_float_after_or_a_frozen_base_stay_silent(tmp_path):
    assert codes(pretrained_project(tmp_path / "bf", "dtype = torch.bfloat16 if args.bf16 else torch.float32")) == []
    assert codes(pretrained_project(tmp_path / "cfg", "dtype = args.dtype")) == []
    assert codes(pretrained_project(tmp_path / "fl", "dtype = torch.float16", "model.float()")) == []
    assert codes(pretrained_project(tmp_path / "fr", "dtype = torch.float16", "model.requires_grad_(False)")) == []
