"""AMP203 across files: a function without autocast of its own whose fp32 upcast only feeds ops
autocast lowers, run under a low-precision region the project enters elsewhere (the summary's
`up` sites, `model/project/upcasts.py`; the project's `autocast_witnesses`)."""
from pathlib import Path

from amplint import lint_paths
from amplint.core.config import Config
from amplint.model.project.summary import summarize

MODEL = '''
import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 10)

    def forward(self, x):
        h = self.fc(x)
        return self.out(h.float())
'''

TRAIN = '''
import torch
from model import Head

model = Head(8).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).sum()
    loss.backward()
    optimizer.step()
'''


def _amp203(tmp_path):
    return sorted(
        (Path(d.filename).name, d.location.row)
        for d in lint_paths([str(tmp_path)], Config(select=("AMP203",))).diagnostics if d.code == "AMP203"
    )


def _sites(source):
    s = summarize(source)
    return {q: [site["r"] for site in info["up"]] for q, info in s["functions"].items() if "up" in info}


def test_upcast_in_a_model_run_under_the_trainers_autocast(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(TRAIN)
    assert _amp203(tmp_path) == [("model.py", 14)]


def test_silent_without_autocast_in_the_project(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(TRAIN.replace('with torch.autocast("cuda", dtype=torch.float16):', "if True:"))
    assert _amp203(tmp_path) == []


def test_silent_under_an_fp32_or_disabled_autocast(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(TRAIN.replace("dtype=torch.float16", "enabled=False"))
    assert _amp203(tmp_path) == []
    (tmp_path / "train.py").write_text(TRAIN.replace("torch.float16", "torch.float32"))
    assert _amp203(tmp_path) == []


def test_silent_where_the_function_handles_autocast(tmp_path):
    aware = MODEL.replace(
        "        return self.out(h.float())",
        "        with torch.autocast('cuda', enabled=False):\n            return self.out(h.float())",
    )
    (tmp_path / "model.py").write_text(aware)
    (tmp_path / "train.py").write_text(TRAIN)
    assert _amp203(tmp_path) == []


def test_silent_on_a_mask_conversion_or_an_fp32_op(tmp_path):
    # `mask.float()` converts an integer/bool tensor; `.float().softmax()` feeds an fp32-list op
    (tmp_path / "model.py").write_text(MODEL.replace(
        "        return self.out(h.float())",
        "        pooled = torch.bmm(mask.unsqueeze(1).float(), h)\n        return self.out(h).float().softmax(-1) + pooled",
    ))
    (tmp_path / "train.py").write_text(TRAIN)
    assert _amp203(tmp_path) == []


def test_silent_where_only_an_fp32_program_runs_the_model(tmp_path):
    # the same model, run by a script entering no autocast (and a test): nothing lowers the op
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "train.py").write_text(TRAIN.replace('with torch.autocast("cuda", dtype=torch.float16):', "with torch.no_grad():"))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_head.py").write_text("from model import Head\n\n\ndef test_head():\n    Head(8)(None)\n")
    (tmp_path / "bench.py").write_text("import torch\nfrom model import Head\n\nwith torch.autocast('cuda'):\n    pass\nHead(8)(None)\n")
    assert _amp203(tmp_path) == []


SPLIT = '''
import einops
import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)

    def forward(self, x):
        qkv = self.qkv(x)
        qkv = einops.rearrange(qkv, "B L (K H D) -> K B H L D", K=3, H=self.heads).float()
        q, k, v = qkv[0], qkv[1], qkv[2]
        return F.scaled_dot_product_attention(q, k, v)
'''


def test_upcast_split_into_the_attention_inputs(tmp_path):
    (tmp_path / "model.py").write_text(SPLIT)
    (tmp_path / "train.py").write_text(TRAIN.replace("from model import Head", "from model import Attention as Head"))
    assert _amp203(tmp_path) == [("model.py", 16)]


def test_silent_when_the_split_copy_is_read_elsewhere(tmp_path):
    # the fp32 copy also feeds a reduction (an fp32-list use): the cast serves it
    (tmp_path / "model.py").write_text(SPLIT.replace(
        "        return F.scaled_dot_product_attention(q, k, v)",
        "        return F.scaled_dot_product_attention(q, k, v) + qkv.sum()",
    ))
    (tmp_path / "train.py").write_text(TRAIN.replace("from model import Head", "from model import Attention as Head"))
    assert _amp203(tmp_path) == []


def test_einsum_counts_on_cuda_only(tmp_path):
    model = '''
import torch
from torch import nn


class Scores(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q = nn.Linear(dim, dim)

    def forward(self, x, k):
        q = self.q(x).float()
        return torch.einsum("bd,kd->bk", q, k)
'''
    (tmp_path / "model.py").write_text(model)
    (tmp_path / "train.py").write_text(TRAIN.replace("from model import Head", "from model import Scores as Head"))
    assert _amp203(tmp_path) == [("model.py", 12)]
    (tmp_path / "train.py").write_text(TRAIN.replace("from model import Head", "from model import Scores as Head").replace(
        'torch.autocast("cuda", dtype=torch.float16)', 'torch.autocast("cpu", dtype=torch.bfloat16)'))
    assert _amp203(tmp_path) == []


# ------------------------------------------------------------------ the summary's sites


def test_sites_read_the_copy_through_views_scalings_and_metadata():
    source = '''
import math
import torch
import torch.nn.functional as F


class A(torch.nn.Module):
    def forward(self, x):
        xq, xk = self.wq(x), self.wk(x)
        og_dtype = xq.dtype
        xq = xq.to(torch.float)
        xk = xk.to(dtype=torch.float32)
        s = torch.einsum("qd,kd->qk", xq / math.sqrt(xq.size(-1)), xk.transpose(0, 1).contiguous().T)
        return F.softmax(s, -1).to(og_dtype)
'''
    assert _sites(source) == {"A.forward": [11, 12]}


def test_sites_leave_copies_that_serve_something():
    source = '''
import torch
import torch.nn.functional as F


def norm_then_project(x, w):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True))
    return F.linear(h, w)


def in_a_loop(xs, w):
    out = []
    for x in xs:
        y = F.linear(x, w)
        y = y.float()
        out.append(F.linear(y, w))
    return out


def rebound_in_a_branch(x, w, flag):
    y = F.linear(x, w)
    y = y.float()
    if flag:
        y = y.sum()
    return F.linear(y, w) + y.mean()


def unknown_receiver(mask, h):
    return torch.bmm(mask.float(), h)


def disabled_here(x, w):
    y = F.linear(x, w).float()
    with torch.autocast("cuda", enabled=False):
        return F.linear(y, w)
'''
    assert _sites(source) == {}


def test_a_rebind_ends_the_copy():
    source = '''
import torch
import torch.nn.functional as F


def project(x, w):
    y = F.linear(x, w)
    y = y.float()
    y = F.linear(y, w)
    return y.sum()
'''
    assert _sites(source) == {"project": [8]}


def test_silent_for_an_integer_result_converted_to_float(tmp_path):
    # `F.one_hot(idx).float()` / `logits.argmax(-1).float()` turn indices into 0/1 or whole numbers
    # (exact in fp16/bf16): the einsum that lowers them loses nothing, even when the indices came
    # from a lowered op
    source = MODEL.replace(
        "        return self.out(h.float())",
        "        idx = torch.cdist(h, self.out.weight).argmin(-1)\n"
        "        onehot = torch.nn.functional.one_hot(idx, 10).float()\n"
        "        ranks = self.fc(x).argmax(-1, keepdim=True).float()\n"
        "        return torch.einsum('bk,kd->bd', onehot, self.out.weight) + self.out(ranks * h)",
    )
    (tmp_path / "model.py").write_text(source)
    (tmp_path / "train.py").write_text(TRAIN)
    assert _amp203(tmp_path) == []
    assert _sites(source) == {}
