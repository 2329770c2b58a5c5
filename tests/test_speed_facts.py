"""The facts gate is sound: any text that yields a project fact passes it."""
from __future__ import annotations

import glob
import os

import libcst as cst

from amplint.core.rule import example_source
from amplint.engine.parallel import FACT_TRIGGERS, passes_facts_gate
from amplint.engine.registry import all_rules
from amplint.model.context import ModuleContext
from amplint.model.facts import FileFacts

HERE = os.path.dirname(os.path.abspath(__file__))

EXTRA = [
    "import torch\nx = y.to(torch.half)\n",
    "from torch import bfloat16 as B\nx = y.to(B)\n",
    "m = AutoModel.from_pretrained('x', torch_dtype='fp16')\n",
    "import torch\nx = y.type(torch.cuda.HalfTensor)\n",
    "from torch.amp import GradScaler as GS\ns = GS('cuda')\n",
    "with accelerator.autocast():\n    pass\n",
    "import torch\nwith torch.autocast('cuda', dtype=d):\n    pass\n",
    "from torch import autocast as ac\n@ac('cpu')\ndef f():\n    pass\n",
]


def _texts():
    for rule in all_rules():
        for case in (*rule.VALID, *rule.INVALID):
            yield example_source(case.code)
    for path in sorted(glob.glob(os.path.join(HERE, "..", "fixtures", "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as fh:
            yield fh.read()
    yield from EXTRA


def test_every_text_with_facts_passes_the_facts_gate():
    with_facts = 0
    for source in _texts():
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError:
            continue
        facts = ModuleContext.build(module, source).facts
        if facts != FileFacts():
            with_facts += 1
            assert passes_facts_gate(source), (facts, source)
    assert with_facts > 30


def test_triggers_are_case_exact_substrings():
    assert all(isinstance(t, str) and t for t in FACT_TRIGGERS)
    assert not passes_facts_gate("import os\nprint(os.getcwd())\n")
