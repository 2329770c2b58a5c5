"""An fp16-conditional finding (AMP301/AMP302: "holds when the project may run fp16") where no
fp16 the project runs can reach it does not hold (issue 22 shape 1): a script no low-precision
code can reach (pytorch/examples' gat/main.py builds its -9e16 mask on fp32 tensors while other
examples of the repository run fp16), a file only fp32 code imports, an op of a vendored
library copy the project does not use, a buffer no code reaching the file casts."""
from __future__ import annotations

import textwrap

from amplint import Config
from amplint.engine.run import lint_paths
from amplint.model.embedded import definition_reached
from amplint.model.facts import cast_unreachable, fp16_unreachable, fp32_script

GAT = textwrap.dedent(
    """\
    import torch
    import torch.nn.functional as F


    def attend(e, adj):
        connectivity_mask = -9e16 * torch.ones_like(e)
        e = torch.where(adj > 0, e, connectivity_mask)
        return F.softmax(e, dim=-1)


    if __name__ == "__main__":
        print(attend(torch.randn(3, 3), torch.ones(3, 3)))
    """
)
FP16_EXAMPLE = 'import torch\n\nmodel = torch.nn.Linear(2, 2).half()\n\nif __name__ == "__main__":\n    print(model)\n'
CONFIG = Config(select=("AMP301",))


def _found(root, config=CONFIG):
    return sorted((d.filename.replace(str(root), "").lstrip("/"), d.location.row) for d in lint_paths([str(root)], config).diagnostics)


def _tree(root, files):
    (root / "setup.py").write_text("")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_standalone_fp32_script_next_to_fp16_examples_is_silent(tmp_path):
    _tree(tmp_path, {"gat/main.py": GAT, "mnist_amp/main.py": FP16_EXAMPLE})
    assert _found(tmp_path) == []
    assert fp32_script(str(tmp_path / "gat" / "main.py"), str(tmp_path))
    assert not fp32_script(str(tmp_path / "mnist_amp" / "main.py"), str(tmp_path))


def test_the_script_itself_or_what_it_imports_may_run_fp16(tmp_path):
    _tree(tmp_path, {"gat/main.py": GAT.replace("import torch.nn.functional as F\n", "import torch.nn.functional as F\nfrom layers import build\n"),
                     "gat/layers.py": "def build(m):\n    return m.half()\n", "other/amp.py": FP16_EXAMPLE})
    assert _found(tmp_path) == [("gat/main.py", 7)]
    (tmp_path / "gat" / "layers.py").write_text("def build(m):\n    return m\n")
    assert _found(tmp_path) == []
    (tmp_path / "gat" / "main.py").write_text(GAT.replace("print(", "model = build(net).half()\n    print("))
    assert _found(tmp_path) == [("gat/main.py", 6)]


def test_a_module_with_a_test_block_imported_by_fp16_code_keeps_its_finding(tmp_path):
    _tree(tmp_path, {"models/gat.py": GAT, "train.py": "import torch\nfrom models.gat import attend\n\nwith torch.autocast('cuda'):\n    attend(e, adj)\n"})
    assert _found(tmp_path) == [("models/gat.py", 6)]


def test_not_a_script_or_no_file():
    assert not fp32_script(None)
    assert not fp32_script("<string>")


PI0_MODEL = textwrap.dedent(
    """\
    import torch
    from torch import nn


    class Pi0(nn.Module):
        def __init__(self, precision="bfloat16"):
            super().__init__()
            self.proj = nn.Linear(8, 8)
            if precision == "bfloat16":
                self.to(dtype=torch.bfloat16)
            elif precision != "float32":
                raise ValueError(precision)

        def masks(self, att_2d):
            return torch.where(att_2d[:, None], 0.0, -2.3819763e38)
    """
)
PI0_TEST = "from tests.ref.pi0 import Pi0\n\n\ndef test_parity():\n    Pi0(precision='float32').masks(att)\n"


def test_a_reference_model_only_bf16_or_fp32_reach_is_silent_next_to_fp16_code(tmp_path):
    """lerobot: a reference model under tests/ (a package), whose precisions are bf16/fp32, built
    only by a test naming no fp16, while the repository's own policies run fp16."""
    _tree(tmp_path, {"tests/__init__.py": "", "tests/ref/__init__.py": "", "tests/ref/pi0.py": PI0_MODEL,
                     "tests/test_pi0.py": PI0_TEST, "src/policy/train.py": FP16_EXAMPLE})
    assert _found(tmp_path) == []
    assert fp16_unreachable(str(tmp_path / "tests" / "ref" / "pi0.py"), str(tmp_path))


def test_fp16_a_few_importers_up_or_in_a_library_module_keeps_the_finding(tmp_path):
    _tree(tmp_path, {"tests/__init__.py": "", "tests/ref/__init__.py": "", "tests/ref/pi0.py": PI0_MODEL,
                     "tests/helpers.py": "from tests.ref.pi0 import Pi0\n\ndef make():\n    return Pi0()\n",
                     "tests/test_pi0.py": "from tests.helpers import make\n\ndef test_half():\n    make().half()\n"})
    assert _found(tmp_path) == [("tests/ref/pi0.py", 15)]
    # a module of an importable package: its users' fp16 is not in the project
    (tmp_path / "lib").mkdir()
    _tree(tmp_path / "lib", {"pkg/__init__.py": "", "pkg/pi0.py": PI0_MODEL, "train.py": FP16_EXAMPLE})
    assert not fp16_unreachable(str(tmp_path / "lib" / "pkg" / "pi0.py"), str(tmp_path / "lib"))
    assert _found(tmp_path / "lib") == [("pkg/pi0.py", 15)]


# --- issue 22 shape 1 on the read3 split: more ways no fp16 reaches a literal ---------------------

BERTABS = textwrap.dedent(
    """\
    import torch


    def attend(query, key, mask):
        scores = torch.matmul(query, key.transpose(2, 3))
        return scores.masked_fill(mask, -1e18)
    """
)
SEQ2SEQ_RUN = "def main(args):\n    if args.fp16:\n        model.half()\n"
TEST_EXAMPLES = textwrap.dedent(
    """\
    import os
    import sys

    sys.path.extend(os.path.join(os.path.dirname(__file__), d) for d in ["seq2seq"])
    import run_summarization


    def test_run_summarization():
        run_summarization.main(["--fp16"])
    """
)


def test_an_import_of_a_shared_module_name_means_the_one_the_importer_puts_on_sys_path(tmp_path):
    """microsoft/LoRA: examples/test_examples.py imports seq2seq's run_summarization (with --fp16),
    not bertabs' fp32 one of the same name, which alone imports bertabs' model."""
    _tree(tmp_path, {"examples/bertabs/__init__.py": "", "examples/bertabs/modeling_bertabs.py": BERTABS,
                     "examples/bertabs/run_summarization.py": "from modeling_bertabs import attend\n\nprint(attend)\n",
                     "examples/seq2seq/run_summarization.py": SEQ2SEQ_RUN, "examples/test_examples.py": TEST_EXAMPLES})
    assert _found(tmp_path) == []
    (tmp_path / "examples" / "test_examples.py").write_text(TEST_EXAMPLES.replace('["seq2seq"]', '["bertabs"]'))
    assert _found(tmp_path) == [("examples/bertabs/modeling_bertabs.py", 6)]


def test_an_import_naming_a_module_only_mid_path_does_not_import_it(tmp_path):
    """`from gluonnlp.model.bert import X` loads no `model.py` of the project."""
    _tree(tmp_path, {"examples/gpt/model.py": BERTABS, "examples/gpt/run.py": "from model import attend\n",
                     "tools/convert.py": "from gluonnlp.model.bert import BERTEncoder\n\nx = x.half()\n"})
    assert fp16_unreachable(str(tmp_path / "examples" / "gpt" / "model.py"), str(tmp_path))
    (tmp_path / "tools" / "convert.py").write_text("from model import attend\n\nx = x.half()\n")
    assert not fp16_unreachable(str(tmp_path / "examples" / "gpt" / "model.py"), str(tmp_path))


GPT2_ATTENTION = textwrap.dedent(
    """\
    import math
    import torch
    from torch import nn


    class Attention(nn.Module):
        def __init__(self, n_ctx):
            super().__init__()
            self.register_buffer("bias", torch.tril(torch.ones(n_ctx, n_ctx)).view(1, 1, n_ctx, n_ctx))

        def _attn(self, q, k, v, pad=None):
            w = torch.matmul(q, k) / math.sqrt(v.size(-1))
            nd, ns = w.size(-2), w.size(-1)
            b = self.bias[:, :, ns - nd : ns, :ns]
            w = w * b - 1e10 * (1 - b)
            if pad is not None:
                w = w.masked_fill(pad, -1e10)
            return torch.matmul(nn.Softmax(dim=-1)(w), v)
    """
)
GPT2_TRAIN = textwrap.dedent(
    """\
    from apex import amp
    from model import Attention

    model = Attention(1024).cuda()
    if args.fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    """
)


def test_a_buffer_promotes_the_scores_to_fp32_where_no_code_reaching_the_file_casts_modules(tmp_path):
    """microsoft/LoRA's GPT-2 under apex O1 (or autocast): `w * self.bias` is fp32, the fp32 causal
    buffer lifts the fp16 scores, and so is the masked `w` after it; a `.half()` of the model (or
    apex O2) casts the buffer too, and both constants overflow."""
    _tree(tmp_path, {"examples/gpt/model.py": GPT2_ATTENTION, "examples/gpt/train.py": GPT2_TRAIN, "other/amp.py": FP16_EXAMPLE})
    assert _found(tmp_path) == []
    assert cast_unreachable(str(tmp_path / "examples" / "gpt" / "model.py"), str(tmp_path))
    for cast in ('opt_level="O2"', 'opt_level=args.opt_level'):
        (tmp_path / "examples" / "gpt" / "train.py").write_text(GPT2_TRAIN.replace('opt_level="O1"', cast))
        assert _found(tmp_path) == [("examples/gpt/model.py", 15), ("examples/gpt/model.py", 17)], cast
    (tmp_path / "examples" / "gpt" / "train.py").write_text(GPT2_TRAIN + "model.half()\n")
    assert _found(tmp_path) == [("examples/gpt/model.py", 15), ("examples/gpt/model.py", 17)]


FPS_OP = textwrap.dedent(
    """\
    import torch
    from torch.autograd import Function


    class FurthestPointSamplingWithDist(Function):
        @staticmethod
        def forward(ctx, points_dist, num_points):
            b, n, _ = points_dist.size()
            temp = points_dist.new_zeros([b, n]).fill_(1e10)
            return ext.fps(points_dist, temp, num_points)


    furthest_point_sample_with_dist = FurthestPointSamplingWithDist.apply
    """
)
SAMPLER = textwrap.dedent(
    """\
    from torch import nn

    from .fps import furthest_point_sample_with_dist


    class FFPSSampler(nn.Module):
        def forward(self, points, features, npoint):
            return furthest_point_sample_with_dist(features @ features.transpose(1, 2), npoint)


    class PointsSampler(nn.Module):
        def __init__(self):
            super().__init__()
            self.sampler = FFPSSampler()
    """
)
OPS_INIT = 'from .fps import furthest_point_sample_with_dist\nfrom .sampler import PointsSampler\n\n__all__ = ["furthest_point_sample_with_dist", "PointsSampler"]\n'
UNIFORMER = {
    "annotator/uniformer/__init__.py": "from .mmcv.ops import PointsSampler as _unused_alias  # noqa\n\n\nclass UniformerDetector:\n    pass\n",
    "annotator/uniformer/LICENSE": "Apache-2.0\n",
    "annotator/uniformer/mmcv/__init__.py": "",
    "annotator/uniformer/mmcv/utils.py": "try:\n    import torch\n    __all__ = ['x']\nexcept ImportError:\n    __all__ = []\n",
    "annotator/uniformer/mmcv/ops/__init__.py": OPS_INIT,
    "annotator/uniformer/mmcv/ops/fps.py": FPS_OP,
    "annotator/uniformer/mmcv/ops/sampler.py": SAMPLER,
}
APP = "import torch\nfrom annotator.uniformer import UniformerDetector\n\nwith torch.autocast('cuda'):\n    UniformerDetector()\n"


def test_a_vendored_library_copy_runs_only_what_the_project_uses_of_it(tmp_path):
    """lllyasviel/ControlNet and salesforce/LAVIS vendor mmcv inside their uniformer annotator: its
    point-cloud sampler (a Function filling a buffer like the distances with 1e10) is used by no
    code of the project, and in LAVIS the annotator is not even imported by fp16 code."""
    files = dict(UNIFORMER)
    files["annotator/uniformer/__init__.py"] = "from .mmcv.ops import fps  # noqa\n\n\nclass UniformerDetector:\n    pass\n"
    _tree(tmp_path, {**files, "app.py": APP})
    path = str(tmp_path / "annotator" / "uniformer" / "mmcv" / "ops" / "fps.py")
    assert _found(tmp_path) == []
    assert not definition_reached(path, "FurthestPointSamplingWithDist", str(tmp_path))
    # what the project uses of the copy runs: through the sampler, or a registered class naming it
    (tmp_path / "app.py").write_text(APP + "\nfrom annotator.uniformer.mmcv.ops import PointsSampler\n\nPointsSampler()\n")
    assert _found(tmp_path) == [("annotator/uniformer/mmcv/ops/fps.py", 9)]
    (tmp_path / "app.py").write_text(APP)
    registered = SAMPLER.replace("class FFPSSampler", "@SAMPLERS.register_module()\nclass FFPSSampler")
    (tmp_path / "annotator" / "uniformer" / "mmcv" / "ops" / "sampler.py").write_text(registered)
    assert _found(tmp_path) == [("annotator/uniformer/mmcv/ops/fps.py", 9)]


def test_a_vendored_copy_no_fp16_code_imports_keeps_fp16_out(tmp_path):
    """salesforce/LAVIS: the copy uses its own op, but only code that names no fp16 imports it."""
    sampler = SAMPLER + "\n\nSAMPLER = PointsSampler()\n"  # runs on import: the op is used
    files = {**UNIFORMER, "annotator/uniformer/mmcv/ops/sampler.py": sampler}
    _tree(tmp_path, {**files, "app.py": APP.replace("with torch.autocast('cuda'):", "if True:"),
                     "train.py": FP16_EXAMPLE})
    assert _found(tmp_path) == []
    (tmp_path / "app.py").write_text(APP)
    assert _found(tmp_path) == [("annotator/uniformer/mmcv/ops/fps.py", 9)]


# --- issue 22, the sixth held-out split (read6): no fp16 source reaching the tensor ---------------

BEAM_TEST = textwrap.dedent(
    """\
    import unittest

    import torch

    from onmt.translate.beam import Beam


    class TestBeam(unittest.TestCase):
        def test_finished(self):
            beam = Beam(torch.tensor([[0.1, 0.2]], dtype=torch.float))
            beam.scores.masked_fill_(torch.tensor([True, False]), -1e10)
    """
)
BEAM = "import torch\n\n\nclass Beam:\n    def __init__(self, scores):\n        self.scores = scores\n"


def test_a_test_module_nothing_imports_is_a_program_of_its_own(tmp_path):
    """OpenNMT-py: `onmt/tests/test_beam_search.py` fills fp32 beam scores; no fp16 source is in it
    or in what it imports, and a test runner (not a registry building it from fp16 code) runs it,
    while the trainer elsewhere runs fp16 autocast."""
    _tree(tmp_path, {"onmt/__init__.py": "", "onmt/translate/__init__.py": "", "onmt/translate/beam.py": BEAM,
                     "onmt/tests/__init__.py": "", "onmt/tests/test_beam.py": BEAM_TEST,
                     "onmt/trainer.py": "import torch\n\nwith torch.autocast('cuda'):\n    loss = model(x)\n"})
    assert _found(tmp_path) == []
    assert fp16_unreachable(str(tmp_path / "onmt" / "tests" / "test_beam.py"), str(tmp_path))
    # look-alikes: what the test imports may run fp16; a plain package module nothing imports
    # (a registry or config may build it from fp16 code) is not known
    (tmp_path / "onmt" / "translate" / "beam.py").write_text(BEAM + "        self.scores = scores.half()\n")
    assert _found(tmp_path) == [("onmt/tests/test_beam.py", 11)]
    (tmp_path / "onmt" / "translate" / "beam.py").write_text(BEAM)
    (tmp_path / "onmt" / "tests" / "test_beam.py").rename(tmp_path / "onmt" / "tests" / "beam_checks.py")
    assert _found(tmp_path) == [("onmt/tests/beam_checks.py", 11)]


TIMING_SCRIPT = textwrap.dedent(
    """\
    import torch
    from torch import nn
    from kernels import compile_kernel


    class NormalSelfAttention(nn.Module):
        def forward(self, hidden_states):
            q = self.w_qs(hidden_states)
            k = self.w_ks(hidden_states)
            q = q.float().contiguous()
            k = k.float().contiguous()
            attn = torch.matmul(q, k.transpose(2, 3))
            attn = attn.masked_fill(self.mask, -1e9)
            return attn.softmax(-1)


    if __name__ == "__main__":
        NormalSelfAttention()(torch.ones(2, 8, 16, dtype=torch.float32))
    """
)
KERNELS = 'def compile_kernel(dtype):\n    assert dtype in ["float16", "float32"]\n    return dtype\n'


def test_a_matmul_of_float_operands_needs_an_autocast_that_reaches_it(tmp_path):
    """PatchTST's Pyraformer `graph_attention.py`: a standalone timing script `.float()`s q and k
    before the matmul, so its scores are fp32 unless an fp16 autocast runs the code; the kernel
    helper it imports names float16 (a dtype it accepts), and the project runs fp16 elsewhere."""
    _tree(tmp_path, {"pyraformer/graph_attention.py": TIMING_SCRIPT, "pyraformer/kernels.py": KERNELS,
                     "exp/train.py": "import torch\n\nmodel = model.half()\n"})
    assert _found(tmp_path) == []
    # look-alikes: operands not made fp32 keep the finding (what the script imports names fp16) ...
    (tmp_path / "pyraformer" / "graph_attention.py").write_text(TIMING_SCRIPT.replace("q = q.float().contiguous()", "q = q.contiguous()"))
    assert _found(tmp_path) == [("pyraformer/graph_attention.py", 13)]
    # ... and so does an fp16 autocast of a program that loads the script
    bench = "import torch\nfrom graph_attention import NormalSelfAttention\n\nwith torch.autocast('cuda'):\n    NormalSelfAttention()(x)\n"
    other = tmp_path / "other"
    other.mkdir()
    _tree(other, {"pyraformer/graph_attention.py": TIMING_SCRIPT, "pyraformer/kernels.py": KERNELS, "pyraformer/bench.py": bench})
    assert _found(other) == [("pyraformer/graph_attention.py", 13)]


def test_fp16_unreachable_follows_a_long_importer_chain_to_its_end(tmp_path):
    """PatchTST's Pyraformer: `Modules.py` <- `SubLayers.py` <- `Layers.py` <- `Pyraformer_LR.py` <-
    `long_range_main.py`, none naming an fp16 source, next to an fp16 trainer elsewhere."""
    chain = {"pyraformer/Modules.py": BERTABS,  # a namespace folder (no __init__.py), as in PatchTST
             "pyraformer/SubLayers.py": "from .Modules import attend\n",
             "pyraformer/Layers.py": "from .SubLayers import attend\n",
             "pyraformer/Pyraformer_LR.py": "from .Layers import attend\n",
             "long_range_main.py": "from pyraformer.Pyraformer_LR import attend\n\nattend(q, k, m)\n",
             "exp/train.py": "import torch\n\nmodel = model.half()\n"}
    _tree(tmp_path, chain)
    assert fp16_unreachable(str(tmp_path / "pyraformer" / "Modules.py"), str(tmp_path))
    assert _found(tmp_path) == []
    (tmp_path / "long_range_main.py").write_text(chain["long_range_main.py"] + "model.half()\n")
    assert _found(tmp_path) == [("pyraformer/Modules.py", 6)]
    # look-alike: the program at the chain's top names no fp16, but a trainer it imports autocasts
    other = tmp_path / "other"
    other.mkdir()
    _tree(other, {**chain, "long_range_main.py": "from pyraformer.Pyraformer_LR import attend\nfrom engine import train\n\ntrain(attend)\n",
                  "engine.py": "import torch\n\ndef train(f):\n    with torch.autocast('cuda'):\n        f(q, k, m)\n"})
    assert not fp16_unreachable(str(other / "pyraformer" / "Modules.py"), str(other))
    assert _found(other) == [("pyraformer/Modules.py", 6)]


BOXES = textwrap.dedent(
    """\
    import torch


    def masks_to_boxes(masks):
        h, w = masks.shape[-2:]
        x = torch.arange(0, w, dtype=torch.float).to(masks)
        x_mask = (masks > 128) * x
        return x_mask.masked_fill(~(masks > 128), 1e8).flatten(1).min(-1)[0]
    """
)
DETECTOR = "import torch\nfrom detkit.util.misc import nested\n\nmodel = torch.nn.Linear(2, 2).half()\n"


def test_a_dotted_import_loads_only_the_file_whose_folders_it_spells(tmp_path):
    """An fp32 training script's `utils/misc.py` (box corners of label masks, filled with 1e8)
    shares its name with a vendored detector's `detkit/util/misc.py`, which fp16 code imports as
    `from detkit.util.misc import ...`: that import finds some `detkit/util/misc.py` on
    `sys.path`, never `train/utils/misc.py`, so no fp16 reaches the script's labels."""
    _tree(tmp_path, {"train/utils/misc.py": BOXES, "train/train.py": "import utils.misc as misc\n\nif __name__ == '__main__':\n    misc.masks_to_boxes(labels)\n",
                     "vendor/detkit/__init__.py": "", "vendor/detkit/util/__init__.py": "",
                     "vendor/detkit/util/misc.py": "def nested(x):\n    return x\n",
                     "vendor/detkit/models/__init__.py": "", "vendor/detkit/models/detector.py": DETECTOR})
    assert fp16_unreachable(str(tmp_path / "train" / "utils" / "misc.py"), str(tmp_path))
    assert _found(tmp_path) == []
    (tmp_path / "vendor" / "detkit" / "models" / "detector.py").write_text(DETECTOR.replace("..util", "").replace("detkit.util.misc", "utils.misc"))
    assert _found(tmp_path) == [("train/utils/misc.py", 8)]
    (tmp_path / "vendor" / "detkit" / "models" / "detector.py").write_text(DETECTOR.replace("detkit.util.misc", "..util.misc"))
    assert _found(tmp_path) == []


BERT4REC = textwrap.dedent(
    """\
    import torch
    from lib.embedding import EmbeddingCollection


    class Attention(torch.nn.Module):
        def forward(self, query, key, mask):
            scores = torch.matmul(query, key.transpose(-2, -1))
            return scores.masked_fill(mask == 0, -1e9)
    """
)
#: a library module that names float16 only as a dtype it tests or picks for its own tables
EMBEDDING = textwrap.dedent(
    """\
    import torch


    def dtype_to_data_type(dtype):
        if dtype == torch.float16 or dtype == torch.half:
            return "FP16"
        return "FP32"


    def data_type_to_dtype(data_type):
        if data_type == "FP16":
            return torch.float16
        return torch.float32


    class EmbeddingCollection(torch.nn.Module):
        def __init__(self, tables):
            super().__init__()
            for t in tables:
                dtype = torch.float32 if t.data_type == "FP32" else torch.float16
                self.add_module(t.name, torch.nn.Embedding(t.n, t.dim, dtype=dtype))
    """
)
MAIN = "from examples.bert4rec.model import Attention\nfrom lib.parallel import wrap\n\nif __name__ == '__main__':\n    wrap(Attention())\n"
#: fp16 gradient compression: the all-reduce's dtype, not the forward's
PARALLEL = ("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n\n\ndef wrap(m, comm_precision='fp32'):\n"
            "    if comm_precision == 'fp16':\n        m.register_comm_hook(None, default_hooks.fp16_compress_hook)\n    return m\n")


def test_an_imported_library_naming_fp16_only_as_a_dtype_it_tests_or_picks_itself_is_no_fp16_source(tmp_path):
    # pytorch/torchrec's bert4rec example: its embedding library tests dtypes and picks fp16 for its
    # own tables by config; its model-parallel wrapper compresses gradients in fp16. Neither makes
    # the example's attention scores fp16.
    _tree(tmp_path, {"lib/__init__.py": "", "lib/embedding.py": EMBEDDING, "lib/parallel.py": PARALLEL,
                     "examples/bert4rec/model.py": BERT4REC, "examples/bert4rec/main.py": MAIN,
                     "other/amp.py": FP16_EXAMPLE})
    assert fp16_unreachable(str(tmp_path / "examples" / "bert4rec" / "model.py"), str(tmp_path))
    assert _found(tmp_path) == []


def test_an_imported_library_that_casts_or_autocasts_keeps_the_finding(tmp_path):
    cast = EMBEDDING + "\n\ndef to_half(m):\n    return m.to(torch.float16)\n"
    _tree(tmp_path, {"lib/__init__.py": "", "lib/embedding.py": cast, "lib/parallel.py": PARALLEL,
                     "examples/bert4rec/model.py": BERT4REC, "examples/bert4rec/main.py": MAIN})
    assert _found(tmp_path) == [("examples/bert4rec/model.py", 8)]
    (tmp_path / "lib" / "embedding.py").write_text(EMBEDDING)
    (tmp_path / "lib" / "parallel.py").write_text(PARALLEL + "\n\ndef step(m, x):\n    with torch.autocast('cuda'):\n        return m(x)\n")
    assert _found(tmp_path) == [("examples/bert4rec/model.py", 8)]
