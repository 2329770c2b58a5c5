"""An fp16-conditional finding (AMP301/AMP302: "holds when the project may run fp16") in a script
that no low-precision code can reach does not hold: pytorch/examples' gat/main.py builds its
-9e16 mask on fp32 tensors while other examples of the repository run fp16 (issue 22 shape 1)."""
from __future__ import annotations

import textwrap

from amplint import Config
from amplint.engine.run import lint_paths
from amplint.model.facts import fp32_script

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
