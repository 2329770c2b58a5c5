"""An fp16-conditional finding (AMP301/AMP302: "holds when the project may run fp16") in a script
that no low-precision code can reach does not hold: pytorch/examples' gat/main.py builds its
-9e16 mask on fp32 tensors while other examples of the repository run fp16 (issue 22 shape 1)."""
from __future__ import annotations

import textwrap

from amplint import Config
from amplint.engine.run import lint_paths
from amplint.model.facts import fp16_unreachable, fp32_script

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
