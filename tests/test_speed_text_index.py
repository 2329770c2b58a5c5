"""The project model's text index (`model/project/index.py`) is computed for every file of
a cold run, so its patterns start with a literal and word boundaries are checked by hand;
its import scan tries only lines holding "import". These tests hold it to the plain
one-regex spelling (kept here as the specification) on every fixture and rule example,
on texts built to hit the edges, and on random ones."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List

from hypothesis import given, settings, strategies as st

from amplint.engine.registry import all_rules
from amplint.model.project import index
from amplint.model.project.index import imports_of, text_index as packed


def text_index(source: str) -> Dict[str, object]:
    """The index with its imports unpacked, as the reference spells them."""
    found = packed(source)
    out = {"r": found["r"], "i": imports_of(found)}
    if "l" in found:
        out["l"] = found["l"].split()
    return out

ROOT = Path(__file__).resolve().parents[1]

_OPTIMIZER = re.compile(r"\b(?:Adam|AdamW|SGD|RMSprop|Adagrad|Adamax|NAdam|RAdam|Adadelta|LBFGS|SparseAdam|ASGD|Rprop)\s*\(")
_PROJECT_OPTIMIZER = re.compile(r"\b[A-Z]\w*(?:Adam|AdamW|SGD|RMSprop|Adagrad|Adamax|NAdam|RAdam|Adadelta|LBFGS|SparseAdam|ASGD|Rprop)\(\s*[\w.]*parameters\(")
_SETS_PRECISION = re.compile(r"autocast\s*\(|GradScaler\s*\(|precision\s*=|\b(?:fp16|bf16)\s*=\s*True|partial\s*\(\s*[\w.]*autocast\b")
_PRECISION = ("autocast", "precision", "fp16", "bf16", "GradScaler", "partial")
_REGISTERS = re.compile(r"^[ \t]*@[ \t]*[\w.]*register|^[\w.]*register\w*[ \t]*\(", re.M)
_FRAMEWORK = re.compile(
    r"\bTrainer\s*\([^)]*\bprecision\s*=|\bAccelerator\s*\([^)]*\bmixed_precision\s*=|\bTrainingArguments\s*\([^)]*\b(?:fp16|bf16)\s*=\s*True"
)


def reference(source: str) -> Dict[str, object]:
    """text_index written the slow, obvious way."""
    roles = ""
    if ("binary_cross_entropy" in source or "BCELoss" in source) and index._BCE.search(source):
        roles += "b"
    if "optim" in source and "parameters(" in source and _OPTIMIZER.search(source):
        roles += "o"
    if any(t in source for t in _PRECISION) and _SETS_PRECISION.search(source):
        roles += "a"
        if "autocast" in source and "partial" in source and index._holds_autocast(source):
            roles += "h"
        if "GradScaler(" in source:
            roles += "g"
        if _FRAMEWORK.search(source):
            roles += "f"
    # issue 22: a module cast to a dtype held in a name, next to an optimizer's parameters ("w")
    if "optim" in source and "param" in source and re.search(r"\.to\(\s*(?:[\w.]+\s*,\s*)?(?:dtype\s*=\s*)?[A-Za-z_]\w*dtype\w*\s*\)", source):
        roles += "w"
    if _REGISTERS.search(source):
        roles += "e"
    # issue 23: a distributed wrapper or precision API ("d"), a clip or a backward ("c")
    if re.search("|".join(map(re.escape, index.ANCHORS)), source):
        roles += "d"
    if re.search(r"clip_grad|\.backward\(", source):
        roles += "c"
    if re.search(r"post_accumulate_grad_hook", source):  # a per-parameter gradient hook ("k")
        roles += "k"
    if "f" not in roles and re.search(r"\bAccelerator\(", source):  # an Accelerator a launcher may make fp16 ("n")
        roles += "n"
    if re.search(r"^mixed_precision[ \t]*=[ \t]*['\"]", source, re.M):  # a config module's precision ("p")
        roles += "p"
    # issue 22 (read5): top-level functions that look a class up in a module imported by name ("l")
    lookups = []
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    for node in tree.body if tree is not None else ():
        text = ast.get_source_segment(source, node) if isinstance(node, ast.FunctionDef) else None
        if text and re.search(r"import_module\s*\(", text) and "getattr(" in text and node.name not in lookups:
            lookups.append(node.name)
    if lookups:
        roles += "l"
    if "o" not in roles and "parameters(" in source and _PROJECT_OPTIMIZER.search(source):
        roles += "q"
    imports: List[List[object]] = []
    for m in index._IMPORTS.finditer(source):
        if m.group(4) is None:
            if not m.group(1) and m.group(2).split(".")[0] in index._EXTERNAL:
                continue
            names = [n.strip().split(" as ")[0].strip() for n in m.group(3).strip("()").replace("\\\n", " ").split(",")]
            imports.append([len(m.group(1)), m.group(2), [n for n in names if n.isidentifier()]])
            continue
        for part in m.group(4).split(","):
            name = part.strip().split(" as ")[0].strip()
            if name and all(p.isidentifier() for p in name.split(".")) and name.split(".")[0] not in index._EXTERNAL:
                imports.append([0, name, []])
    out = {"r": roles, "i": imports}
    if lookups:
        out["l"] = lookups
    return out


EDGES = [
    "import importlib\n\ndef get(name):\n    m = importlib.import_module('p.' + name)\n    return getattr(m, name)\n\n\ndef other():\n    return getattr(x, 'y')\n",
    "x = importlib.import_module('a')\ngetattr(x, 'b')\n\ndef f():\n    return importlib.import_module('c')\n",
    'trainer = pl.Trainer(precision="16-mixed", accelerator="gpu")\n',
    'args = Seq2SeqTrainingArguments(fp16=True)\n',
    'amp = functools.partial(torch.autocast, "cuda", dtype=torch.float16)\n',
    "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)\n",
    "opt = MyAdam(model.parameters())  # optim\n",
    "opt = my_SGD(model.parameters())  # optim\n",
    "opt = ASGD (model.parameters())  # optim\n",
    "opt = éAdam(model.parameters())  # optim\n",
    "Adam(model.parameters())  # optim at the very start\n",
    "args = TrainingArguments(fp16=True)\n",
    "args = Args(use_fp16=True, bf16 = True)\n",
    "args = Args(use_fp16=True)\n",
    "x_bf16=True\n",
    "with torch.autocast('cuda'):\n    pass\n",
    "# mixed precision is discussed here, nothing is set\n",
    "trainer = Trainer(precision='16-mixed')\n",
    "from .losses import (\n    DiceLoss,\n    import_helper,\n)\nimport torch, segkit.models as m\n",
    "from . import a; import b\nfrom .x import y  # import z\n",
    "s = '''\nimport not_really\n'''\nfrom pkg.sub import (a,\n  b as c)\n",
    "from x import (a,\nimport y\n)\nimport z\n",
    "from x import (a,\nimport b, c) ; import z\n",
    "imports = 1\nimport\nimport  os.path as p, numpy\nfrom\t..rel\timport\tthing\n",
    "x = 1; import inline_after_semicolon\n",
    "from a import b \\\n    , c\n",
    "amp = partial(torch.autocast, device_type='cuda')\nwith amp():\n    torch.autocast('cuda')\n",
    "@MODELS.register_module()\nclass Head:\n    pass\n",
    "class A:\n    @ registry.register\n    def f(self): pass\n",
    "ARCH_REGISTRY.register(UNet)\nregister_loss(name='mse')(nn.MSELoss)\n",
    "    self.register_buffer('mask', m)\nx = y.register_hook(f)  # register(\n",
    "registered = 1\n# @register_model\n",
]


def _corpus() -> List[str]:
    texts = list(EDGES)
    for path in sorted((ROOT / "fixtures").rglob("*.py")):
        texts.append(path.read_text(encoding="utf-8"))
    for rule in all_rules():
        texts.extend(example.code for example in (*rule.VALID, *rule.INVALID))
    return texts


def test_equals_the_reference_on_fixtures_examples_and_edges():
    texts = _corpus()
    assert len(texts) > 300
    for text in texts:
        assert text_index(text) == reference(text), text[:300]
    assert any("o" in text_index(t)["r"] for t in EDGES) and any("a" in text_index(t)["r"] for t in EDGES)


def test_the_word_boundary_is_checked():
    assert "o" not in text_index("opt = MyAdam(model.parameters())  # optim\n")["r"]
    assert "q" in text_index("opt = MyAdam(model.parameters())  # optim\n")["r"]  # maybe a project optimizer
    assert "q" not in text_index("opt = myAdam(model.parameters())\n")["r"]
    assert "o" in text_index("opt = ASGD (model.parameters())  # optim\n")["r"]
    assert "a" not in text_index("args = Args(use_fp16=True)\n")["r"]
    assert "a" in text_index("args = Args(fp16=True)\n")["r"]


_PIECES = st.sampled_from(
    [
        "import ", "from ", " import ", "(", ")", ",", "\n", " ", "\t", "#", ";", ".", "..", "\\\n", "as ", "os",
        "torch", "pkg.mod", "x", "Adam", "SGD(", "AdamW (", "optim", "parameters(", "fp16", "bf16", "=", "True",
        "precision", "autocast(", "GradScaler(", "partial(", "_", "é", "BCELoss", "binary_cross_entropy(",
    ]
)


def test_the_imports_pack_into_one_string():
    found = packed("from .losses import (DiceLoss,\n  BCE as B)\nimport torch, segkit.models as m\nfrom . import a\n")
    assert isinstance(found["i"], str)
    assert imports_of(found) == [[1, "losses", ["DiceLoss", "BCE"]], [0, "torch", []], [0, "segkit.models", []], [1, "", ["a"]]]
    assert imports_of(packed("x = 1\n")) == []


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_equals_the_reference_on_random_texts(text):
    assert text_index(text) == reference(text)


def test_the_held_autocast_role_needs_a_partial_of_an_autocast():
    """Role "h" starts the project model from a file: only a `partial(` of an autocast (or of a
    name the file binds to one) gives it, not the two words in one big model file."""
    held = [
        'amp = partial(torch.autocast, "cuda")\n',
        "f = functools.partial(\n    torch.cuda.amp.autocast, enabled=True)\n",
        'from torch import autocast as ac\nx = partial(ac, "cuda")\n',
        'ac = torch.autocast\nself.a = partial(ac, device_type="cuda")\n',
        'self.ctx = torch.autocast\nf = partial(self.ctx, "cuda")\n',
    ]
    not_held = [
        'with torch.autocast("cuda"):\n    f = partial(F.gelu, approximate="tanh")\n',
        "ctx == torch.autocast\nf = partial(ctx)\n",
        "myctx = torch.autocast\nf = partial(ctx)\n",
        "ctx = torch.autocast_mode\nf = partial(ctx)\n",
        "from torch import my_autocast as ac\nx = partial(ac)\n",
    ]
    for text in held:
        assert index._holds_autocast(text), text
        assert "h" in packed(text + "with torch.autocast('cuda'):\n    pass\n")["r"]
    for text in not_held:
        assert not index._holds_autocast(text), text
        assert "h" not in packed(text + "with torch.autocast('cuda'):\n    pass\n")["r"]
