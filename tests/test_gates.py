"""amplint/core/gates.py: text-level gates are sound (pass wherever the rule fires) and selective.

Each SOUND case is run through the rule itself with its gate bypassed, so the
test proves the rule fires there, then that the gate lets the text through.
SKIPPED cases are the big numbers model code is full of, which the gate must
keep from being parsed.
"""
from __future__ import annotations

import libcst as cst
import pytest

from amplint.core.gates import overflowing_literal_site, underflowing_eps_site
from amplint.engine.registry import rules_by_code
from amplint.model.context import ModuleContext

HEAD = "import torch\nimport torch.nn.functional as F\n"

AMP301_SOUND = [
    "def f(x: torch.HalfTensor, m):\n    return x.masked_fill(m, -1e9)\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(\n        m,\n        -1e10,\n    )\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m, value=-100000)\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m,  # the mask\n        -1e9)\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m, (-1e9))\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m, - -1e9)\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m, 0x1_0000)\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m, 1_000_000)\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m, 7E+4)\n",
    "def f(x):\n    x = x.half()\n    return x.fill_(1e9)\n",
    "def f(x):\n    x = x.half()\n    return x.fill_(-1e9)\n",
    "def f(n):\n    return torch.full((n, n), -1e9, dtype=torch.float16)\n",
    "def f(n):\n    return torch.full((n, n), fill_value=-1e9, dtype=torch.float16)\n",
    "from torch import full as filled\ndef f(n):\n    return filled((n, n), -1e9, dtype=torch.float16)\n",
    "NEG = -1e9\ndef f(x, m):\n    x = x.half()\n    return x.masked_fill(m, NEG)\n",
    "NEG: float = -1e9  # mask value\ndef f(x, m):\n    x = x.half()\n    return x.masked_fill(m, NEG)\n",
    "NEG = -1e9\ndef f(x, m):\n    x = x.half()\n    return x.masked_fill(m, value = NEG )\n",
    "NEG = -1e9\ndef f(x, m):\n    x = x.half()\n    return x.masked_fill(\n        m,\n        NEG\n    )\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m, 1E9)\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m, 0X10000)\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m, 0B10000000000000000)\n",
    "def f(x, m):\n    x = x.half()\n    return x.masked_fill(m, 1.E9)\n",
    "def f(q, k, m):\n    with torch.autocast('cuda', dtype=torch.float16):\n        s = q @ k\n        return torch.where(m, -1e9, s)\n",
    "def f(q, k, mask):\n    with torch.autocast('cuda', dtype=torch.float16):\n        s = q @ k\n        return F.softmax(s + (1.0 - mask) * -1e9, -1)\n",
    "def f(q, k, mask):\n    with torch.autocast('cuda', dtype=torch.float16):\n        s = q @ k\n        return F.softmax(s + (1.0 - mask) * \\\n            -1e9, -1)\n",
    "def f(q, k, mask):\n    with torch.autocast('cuda', dtype=torch.float16):\n        s = q @ k\n        return F.softmax(s - 1e9 * mask, -1)\n",
    "def f(q, k, mask):\n    with torch.autocast('cuda', dtype=torch.float16):\n        s = q @ k\n        s += mask * -1e9\n        return s.softmax(-1)\n",
    "def f(q, k, mask):\n    with torch.autocast('cuda', dtype=torch.float16):\n        s = q @ k\n        s -= 1e9\n        return s.softmax(-1)\n",
    "def f(q, k):\n    with torch.autocast('cuda', dtype=torch.float16):\n        s = q @ k\n        return torch.softmax(s - 1e9, -1)\n",
]

AMP301_SKIPPED = [
    "class Config:\n    vocab_size: int = 151655\n    max_position_embeddings: int = 131072\n",
    "def __init__(self, vocab_size=250002, rope_theta=1000000.0):\n    self.vocab_size = vocab_size\n",
    "def is_cjk(cp):\n    return (cp >= 0x4E00 and cp <= 0x9FFF) or (cp >= 0x20000 and cp <= 0x2A6DF)\n",
    '"""Args:\n    image_token_id (`int`, *optional*, defaults to 151655):\n"""\n',
    "# see https://github.com/pytorch/pytorch/issues/100000\nx = y.masked_fill(m, float('-inf'))\n",
    "SIZES = [100000, 200000]\nLIMITS = {'a': 1e9}\n",
    "def f(index):\n    return torch.where(index > 0, index + 100000, index)\n",
    "x = foo(timeout=1e9)\nif n == 1e9:\n    pass\n",
    "NEG = -1e9\nx = y.masked_fill(m, my_value=NEG2)\nz = NEG == w\n",
    "layer_0_0 = conv2x(fp16b_100000)\nh = 0x1F\nx = y.masked_fill(m, 0)\n",
    # the words of a finding, in prose
    "def f(x, m):\n    x = x.half()\n    raise ValueError('masked_fill(m, -1e9) overflows fp16')  # or x.fill_(1e9)\n",
    "def f(x, m):\n    x = x.half()\n    '''\n    >>> x.masked_fill(m, -1e9)\n    '''\n",
]


def _fires(source: str, code: str = "AMP301") -> bool:
    """Whether rule `code` flags `source`, run directly (its gate bypassed)."""
    ctx = ModuleContext.build(cst.parse_module(source), source, "case.py")
    return bool(list(rules_by_code()[code]().check(ctx)))


@pytest.mark.parametrize("body", AMP301_SOUND)
def test_amp301_gate_passes_where_the_rule_fires(body):
    source = HEAD + body
    assert _fires(source), "the case must be one the rule flags"
    assert overflowing_literal_site(source)


@pytest.mark.parametrize("body", AMP301_SKIPPED)
def test_amp301_gate_skips_big_numbers_the_rule_never_flags(body):
    source = HEAD + body
    assert not _fires(source)
    assert not overflowing_literal_site(source)


@pytest.mark.parametrize("body", AMP301_SOUND)
def test_amp301_gate_reads_crlf_files(body):
    source = (HEAD + body).replace("\n", "\r\n")  # the linter reads files with their own line ends
    assert _fires(source)
    assert overflowing_literal_site(source)


def test_amp301_gate_reads_non_ascii_text():
    source = HEAD + "# ÄÖÜ 注意\ndef f(x, m):\n    x = x.half()\n    return x.masked_fill(m, -1e9)  # 遮罩\n"
    assert overflowing_literal_site(source)
    assert not overflowing_literal_site("s = '\udc80'\n")


AMP302_SOUND = [
    "model = Net().half()\nopt = torch.optim.Adam(model.parameters())\n",
    "from torch.optim import AdamW as Opt\nmodel = Net().half()\nopt = Opt(model.parameters(), lr=1e-4)\n",
    "from torch import optim\nmodel = Net().half()\nopt = optim.RMSprop(model.parameters())\n",
    "from torch.optim import Adagrad\nmodel = Net().half()\nopt = Adagrad (model.parameters())\n",
    "def f(x):\n    x = x.half()\n    return x / (x.norm() + 1e-8)\n",
    "def f(x):\n    x = x.half()\n    return x / (1e-10 + x.abs())\n",
    "def f(x):\n    x = x.half()\n    return x / x.abs().clamp(min=1e-8)\n",
    "def f(x):\n    x = x.half()\n    return x / x.abs().clamp(0.00000001)\n",
    "def f(x):\n    x = x.half()\n    return x.clamp_min(+1e-8)\n",
    "def f(p):\n    p = p.half()\n    return p.clamp(min=1e-4, max=1 - 1e-4)\n",
    "EPS = 1e-6\ndef f(p):\n    p = p.half()\n    return torch.clamp(p, EPS, 1.0 - EPS)\n",
    # a default eps used as a clamp's min (lucidrains' `log(t, eps=1e-20)` on an fp16 tensor)
    "def log(t, eps=1e-20):\n    t = t.half()\n    return torch.log(t.clamp(min=eps))\n",
    "def log(\n    t,\n    eps: float = 1e-20,\n):\n    return torch.log(t.half().clamp_min(eps))\n",
    # the values of a (values, indices) reduction keep the dtype
    "def f(y):\n    y = y.half()\n    return y / (y.abs().max(dim=-1, keepdim=True)[0] + 1e-9)\n",
    # a parameter read at the file's callers, each in a definition of its own (an excerpt keeps them)
    "def log(t, eps=1e-20):\n    return torch.log(t.clamp(min=eps))\n\n\ndef _unrelated_a(z):\n    return z\n\n\n"
    "def loss(spec, fb):\n    with torch.autocast('cuda'):\n        return log(torch.matmul(spec, fb)).mean()\n",
    "class Disc(torch.nn.Module):\n    def preprocess(self, y):\n        y = y - y.mean(dim=-1, keepdim=True)\n"
    "        return y / (y.abs().max(dim=-1, keepdim=True)[0] + 1e-9)\n\n    def other(self):\n        return 1\n\n"
    "    def forward(self, x):\n        return self.preprocess(x.half())\n",
    # an EMA decay fp16 rounds to 1.0, on the parameters of an fp16 module (inline, through a helper)
    "ema = Net().half()\nfor e, p in zip(ema.parameters(), net.parameters()):\n    e.mul_(0.9999).add_(p, alpha=1e-4)\n",
    "ema = Net().half()\nfor e, p in zip(ema.parameters(), net.parameters()):\n    e.lerp_(p, 1e-4)\n",
    "ema = Net().half()\nfor e in ema.parameters():\n    e.data.mul_(1 - 1e-4)\n",
    "def upd(t, s, rate=0.99):\n    for a, b in zip(t, s):\n        a.detach().mul_(rate).add_(b, alpha=1 - rate)\n\n\n"
    "ref = Net()\nref.to('cuda', dtype=torch.float16)\nupd(ref.parameters(), net.parameters(), .99995)\n",
]

AMP302_SKIPPED = [
    "ema = Net().half()\nfor e, p in zip(ema.parameters(), net.parameters()):\n    e.mul_(0.999).add_(p, alpha=1e-3)\n",
    "x = torch.zeros(3, dtype=torch.float16)\nclass Config:\n    layer_norm_eps: float = 1e-12\n",
    "x = torch.zeros(3, dtype=torch.float16)\nnorm = torch.nn.LayerNorm(8, eps=1e-12)\n",
    'x = torch.zeros(3, dtype=torch.float16)\n"""Uses Adam with its default eps 1e-8."""\n',
    "x = torch.zeros(3, dtype=torch.float16)\nopt = AdamWScheduleFree(params)\nMyAdam(params)\n",
    'x = torch.zeros(3, dtype=torch.float16)\n"""\n- `"adamw_torch"`: PyTorch\'s AdamW (recommended default)\n"""\n',
    "x = torch.zeros(3, dtype=torch.float16)\nhelp = 'x / (norm + 1e-10) underflows'  # y + 1e-9\n",
    "x = torch.zeros(3, dtype=torch.float16)\ny = x.clamp(min=1e-3, max=1 - 1e-3)\n",
    "x = torch.zeros(3, dtype=torch.float16)\ny = x * (1 - 1e-4)  # a product, not a bound\n",
]


@pytest.mark.parametrize("body", AMP302_SOUND)
def test_amp302_gate_passes_where_the_rule_fires(body):
    source = HEAD + body
    assert _fires(source, "AMP302"), "the case must be one the rule flags"
    assert underflowing_eps_site(source)


@pytest.mark.parametrize("body", AMP302_SOUND)
def test_amp302_gate_reads_crlf_files(body):
    source = (HEAD + body).replace("\n", "\r\n")
    assert _fires(source, "AMP302")
    assert underflowing_eps_site(source)


@pytest.mark.parametrize("body", AMP302_SKIPPED)
def test_amp302_gate_skips_eps_the_rule_never_flags(body):
    source = HEAD + body
    assert not _fires(source, "AMP302")
    assert not underflowing_eps_site(source)


# ------------------------------------------------------------------ excerpts


def _texts():
    from tests.test_speed_gates import _corpus

    texts = dict(_corpus())
    for i, body in enumerate(AMP301_SOUND + AMP301_SKIPPED + AMP302_SOUND + AMP302_SKIPPED):
        texts[f"case{i}.py"] = HEAD + body
    texts.update(CLASS_FAMILY_TEXTS)
    # every text again between definitions it does not need, so that there is something to cut
    for name, source in list(texts.items()):
        texts[f"padded-{name}"] = FILLER + source + "\n" + FILLER.replace("_helper", "_helper2").replace("_Block", "_Block2").replace("_unrelated", "_unrelated2").replace("_Plain", "_Plain2")
    return texts


CLASS_FAMILY_TEXTS = {
    # `self.fc` is read from the class the site is in and its bases in the file, never from unrelated classes
    "base-class.py": HEAD + (
        "class Base(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, 4)\n\n\n"
        "class Unrelated(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.LayerNorm(4)\n\n\n"
        "def helper(x):\n    return x.sum()\n\n\n"
        "class Child(Base):\n    def forward(self, x):\n        with torch.autocast('cuda', dtype=torch.float16):\n"
        "            h = self.fc(x)\n            return self.fc(h.float())\n"
    ),
    # an AMP301 / AMP302 site in one method of a big class: the other methods are cut, the answers stay
    "one-method.py": HEAD + (
        "NEG = -1e9\n\n\nclass Attention(torch.nn.Module):\n    scale = 0.125\n\n"
        "    def __init__(self):\n        super().__init__()\n        self.proj = torch.nn.Linear(4, 4)\n\n"
        "    def forward(self, q, k, mask):\n        s = (q @ k).half()\n        s = s.masked_fill(mask, -1e9)\n"
        "        s = s.masked_fill(mask, NEG)\n        return s / (s.norm() + 1e-10)\n\n"
        "    @property\n    def size(self):\n        return self.proj.out_features * 100000\n\n"
        "    def extra_repr(self):\n        return 'attention'\n"
    ),
    # a region opened through an import alias: its line never says autocast
    "alias.py": HEAD + (
        "from torch import autocast as ac\n\n\ndef unrelated(y):\n    return y\n\n\n"
        "def train(model, x):\n    with ac('cuda', dtype=torch.float16):\n        loss = model(x)\n        loss.backward()\n"
        "        h = torch.nn.functional.linear(x, w)\n        with ac('cuda', enabled=False):\n            return h @ w\n"
    ),
    # AMP302 reads a parameter at the file's callers only when the function is never handed on as a
    # value: the `map(log, ...)` in a definition far away must be in the excerpt too
    "helper-as-value.py": HEAD + (
        "def log(t, eps=1e-20):\n    return torch.log(t.clamp(min=eps))\n\n\n"
        "def loss(spec, fb):\n    with torch.autocast('cuda'):\n        return log(torch.matmul(spec, fb)).mean()\n\n\n"
        "def _unrelated_b(z):\n    return z\n\n\n"
        "def both(a, b):\n    return list(map(log, (a, b)))\n"
    ),
    # autocast only named in an error message: the class is not kept whole for it
    "message-mention.py": HEAD + (
        "class Model(torch.nn.Module):\n    def check(self, dtype):\n        if dtype == torch.float16:\n"
        "            raise ValueError(f\"{self.name}: use `with torch.autocast(device_type='cuda'):` instead\")\n\n"
        "    def forward(self, q, k, m):\n        s = (q @ k).half()\n        return s.masked_fill(m, -1e9)\n\n"
        "    def other(self):\n        with torch.autocast('cuda', enabled=False):\n            return self.fc(self.x)\n"
    ),
    # a function the file defines twice: its callers cannot decide (each `def` is a use), so two
    # of its definitions stand for every line naming it; the callers of a dunder are never read
    "defined-twice.py": HEAD + (
        "class Disc(torch.nn.Module):\n    def preprocess(self, y):\n        y = y - y.mean(dim=-1, keepdim=True)\n"
        "        return y / (y.abs().max(dim=-1, keepdim=True)[0] + 1e-9)\n\n    def other(self):\n        return 1\n\n"
        "    def forward(self, x):\n        return self.preprocess(x.half())\n\n\n"
        "def unrelated(y):\n    return y\n\n\n"
        "class Other(torch.nn.Module):\n    def preprocess(self, y):\n        return y\n\n"
        "    def forward(self, x):\n        return self.preprocess(x.half())\n\n\n"
        "class Third(torch.nn.Module):\n    def preprocess(self, y):\n        return y + 1\n\n"
        "    def run(self, x):\n        return self.preprocess(x)\n"
    ),
    "defined-once.py": HEAD + (
        "class Disc(torch.nn.Module):\n    def preprocess(self, y):\n        y = y - y.mean(dim=-1, keepdim=True)\n"
        "        return y / (y.abs().max(dim=-1, keepdim=True)[0] + 1e-9)\n\n    def other(self):\n        return 1\n\n\n"
        "def unrelated(y):\n    return y\n\n\n"
        "class Disc2(Disc):\n    def forward(self, x):\n        return self.preprocess(x.half())\n"
        "    # def preprocess(self, y): a comment is no definition\n"
    ),
    "dunder-site.py": HEAD + (
        "class Norm(torch.nn.Module):\n    def __call__(self, y):\n        return y / (y.abs().max(dim=-1, keepdim=True)[0] + 1e-9)\n\n\n"
        "def unrelated(y):\n    return y\n\n\n"
        "class User(torch.nn.Module):\n    def forward(self, x):\n        return Norm().__call__(x.half())\n"
    ),
    "nested-class.py": HEAD + (
        "class Outer(torch.nn.Module):\n    class Inner:\n        x = 1\n\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = torch.nn.Linear(4, 4)\n\n"
        "    def forward(self, x):\n        with torch.autocast('cuda', dtype=torch.float16):\n"
        "            with torch.autocast('cuda', enabled=False):\n                return self.fc(self.fc(x))\n\n\n"
        "def unrelated(y):\n    return y\n"
    ),
}


FILLER = """\
def _helper(x):
    return x * 2 + 1e-12


def _unrelated(y):
    return y.sum() / y.numel()


class _Plain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.LayerNorm(4)


class _Block(torch.nn.Module):
    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            return self.proj(x).masked_fill(x > 0, 0.0).half()


"""


def test_an_excerpt_gives_the_diagnostics_of_the_whole_file():
    """For rules with `gate_sites`, parsing the excerpt finds exactly what parsing the whole file finds."""
    from amplint.core.config import Config
    from amplint.engine.pipeline import FileResult, _excerpt_checked, _parse_and_check, run_guarded
    from amplint.core.gating import passing
    from amplint.engine.registry import rule_specs

    config = Config()
    local = [s for s in rule_specs() if s.gate_sites is not None]
    assert {s.code for s in local} >= {"AMP301", "AMP302"}
    codes = frozenset(s.code for s in rule_specs())
    cut = with_findings = 0
    for name, source in _texts().items():
        active = passing(local, source)
        if not active:
            continue
        partial = _excerpt_checked(source, name, config, active, codes, FileResult(path=name))
        if partial is None:
            continue
        cut += 1
        with_findings += bool(partial)
        whole = run_guarded(_parse_and_check, source, name, config, active, codes, FileResult(path=name))
        assert partial == whole, name  # positions, messages, fixes, conditions, verifier data
    assert cut >= 100 and with_findings >= 20, "the corpus must exercise excerpts"


def test_amp302_lines_keep_two_definitions_of_a_name_defined_twice():
    from amplint.core.gates import underflowing_eps_lines

    rows = CLASS_FAMILY_TEXTS["defined-twice.py"].split("\n")
    lines = underflowing_eps_lines(CLASS_FAMILY_TEXTS["defined-twice.py"])
    named = [i + 1 for i, row in enumerate(rows) if "preprocess" in row]
    defs = [i + 1 for i, row in enumerate(rows) if "def preprocess" in row]
    assert set(defs[:2]) <= lines and defs[2] not in lines
    assert not (set(named) - set(defs[:2])) & lines  # no call line: only the two definitions
    once = CLASS_FAMILY_TEXTS["defined-once.py"]
    rows = once.split("\n")
    assert {i + 1 for i, row in enumerate(rows) if "preprocess" in row} <= underflowing_eps_lines(once)
    dunder = CLASS_FAMILY_TEXTS["dunder-site.py"]
    assert not any("__call__" in dunder.split("\n")[i - 1] and "def" not in dunder.split("\n")[i - 1] for i in underflowing_eps_lines(dunder))



DEFINED_TWICE_SHAPES = [
    # a decorated definition (its `def` line, not its decorator's), an `async def`, one under `if 0:`
    "import torch\n\n@torch.no_grad()\ndef step(x):\n    return x\n\nif 0:\n    def step(x):\n        return x\n\n"
    "async def step(x):\n    return x\n",
    # a docstring's `def step` is no definition; a lambda and a comprehension are no `def`
    'def step(x):\n    """Use as:\n\n    def step(x): ...\n    """\n    return [y for y in x]\n\nf = lambda: 0\n',
    # a text CPython's parser takes and its symbol table refuses (a module-level `nonlocal`)
    "def step(x):\n    return x\n\ndef step(x):\n    return x\n\nnonlocal q\n",
    # names a comprehension's or a lambda's scope also has
    "def genexpr():\n    return (y for y in x)\n\ndef genexpr():\n    return 1\n\ndef listcomp():\n    return [y for y in x]\n",
]


@pytest.mark.parametrize("source", DEFINED_TWICE_SHAPES)
def test_amp302_definitions_read_off_the_symbol_table_are_the_trees(source):
    from amplint.core.gates import _defined_by_tree, _defined_twice

    names = {"step", "q"} if "genexpr" not in source else {"genexpr", "listcomp"}
    tree = {n: sorted(lines) for n, lines in _defined_by_tree(source, names).items() if len(lines) >= 2}
    assert _defined_twice(source, names) == tree


TRICKY_LAYOUTS = [
    # a column-0 `class` line inside a module docstring
    '"""Usage:\n\nclass Example:\n    pass\n"""\nimport torch\n\ndef a():\n    return 1\n\n\ndef b():\n    return 2\n',
    # column-0 string content inside a function
    'def a():\n    q = """\nSELECT *\nclass X:\n"""\n    return q\n\n\ndef b():\n    return 2\n',
    # a column-0 comment inside a function, `else` at column 0, a name that starts like a keyword
    "def a():\n    x = 1\n# a comment at column 0\n    return x\n\n\nif A:\n    B = 1\nelse:\n    B = 2\nelsewhere = 3\n\n\ndef b():\n    return B\n",
    # a class whose docstring has body-indented lines that look like methods
    'class A:\n    """Example:\n\n    def fake(self):\n        pass\n    """\n\n    def a(self):\n        return 1\n\n    def b(self):\n        return 2\n',
    # a continuation at the class body's indent inside a method, decorated methods, a nested class
    "class A:\n    X = 1\n\n    def a(self):\n        y = f(\n    1)\n        return y\n\n    @property\n    @cache\n    def b(self):\n        return 2\n\n"
    "    class Inner:\n        z = 3\n\n    async def c(self):\n        return 4\n\n\ndef top():\n    return 5\n",
    # methods only (cutting them all would leave no body), a decorated class, a multi-line class line
    "class A:\n    def a(self):\n        return 1\n\n    def b(self):\n        return 2\n\n\n@dataclass\nclass B:\n    def a(self):\n        return 1\n\n    def b(self):\n        return 2\n\n\n"
    "class C(\n    Base,\n):\n    def a(self):\n        return 1\n\n    def b(self):\n        return 2\n",
    # a tab-indented class and a method whose body holds a column-0 string line
    'class A:\n\tdef a(self):\n\t\treturn 1\n\n\tdef b(self):\n\t\ts = """\nclass X:\n"""\n\t\treturn s\n\n\tdef c(self):\n\t\treturn 3\n',
    # decorators, a column-0 bracket continuation and a matmul at column 0
    "import functools\n\n@functools.lru_cache()\n@staticmethod\ndef a():\n    return 1\n\n\nx = (a\n@ b\n)\n\n\nclass C:\n    y = [\n1,\n]\n\n\ndef b():\n    return 2\n",
]


@pytest.mark.parametrize("source", TRICKY_LAYOUTS)
def test_excerpt_cut_by_columns_equals_the_exact_cut(source):
    from amplint.engine.excerpt import _by_ast, excerpt

    rows = source.split("\n")
    for last in range(1, len(rows) + 1):
        for wanted in ({last}, {1, last}, set()):
            cut = excerpt(source, wanted)
            if cut is None:
                continue  # the whole file: always right
            assert cut.count("\n") == source.count("\n")
            # the cut is an exact cut: for the code it kept (a `class` line would ask for the whole class) ...
            kept = {i + 1 for i in _code_rows(cut) if not rows[i].lstrip().startswith("class ")}
            assert _code_rows(cut) == _code_rows(_by_ast(source, rows, sorted(kept)) or source), (wanted, source)
            # ... and, for wanted lines of code (sites are), it blanks no code the exact cut keeps
            if all(i - 1 in _code_rows(source) for i in wanted):
                exact = _by_ast(source, rows, sorted(wanted)) or source
                assert _code_rows(exact) <= _code_rows(cut), (wanted, source)


def _code_rows(text):
    return {i for i, row in enumerate(text.split("\n")) if row.strip() and not row.lstrip().startswith("#")}


PROSE_MENTIONS = [
    ('x = "use torch.autocast"', True),
    ("x = 'use torch.autocast'", True),
    ("# with torch.autocast('cuda'):", True),
    ("y = 1  # autocast", True),
    ("    >>> with torch.autocast('cuda'):", True),
    ('msg = f"{a} {{b}} torch.autocast"', True),
    ("msg = f\"{a['k']} torch.autocast\"", True),
    ("with torch.autocast('cuda'):", False),
    ('s = "a" + torch.autocast', False),
    ("s = '\\'' + autocast", False),
    ('x = f"{torch.autocast}"', False),
    ('x = f"{a" + autocast', False),
    ('x = """a""" + torch.autocast', False),  # a triple quote: the line may start inside a string
]


@pytest.mark.parametrize("line,prose", PROSE_MENTIONS)
def test_autocast_mentions_in_prose_are_told_from_code(line, prose):
    from amplint.core.gates import in_prose

    assert in_prose(line, line.index("autocast")) is prose
    assert in_prose("x = 1\n" + line, 6 + line.index("autocast")) is prose
    # a line continued from the previous one may start inside a string: never certain (but a
    # doctest prompt is no code anywhere)
    continued = 'x = "a \\\n' + line
    assert in_prose(continued, continued.index("autocast")) is (">>>" in line)


def test_autograd_function_lines_keep_the_callers_of_a_function():
    """AMP501 reads the calls of a Function (inputs cast by hand, applied in a backward), so they
    are sites too."""
    from amplint.core.gates import autograd_function_lines

    source = (
        "import torch\n"
        "class _Op(torch.autograd.Function):\n"
        "    forward = lambda ctx, x: _C.kernel(x)\n"
        "op = _Op.apply\n"
        "def wrap(x):\n"
        "    return op(x.float())\n"
        "def other(x):\n"
        "    return _Op.apply(x)\n"
        "class Public(torch.autograd.Function):\n"
        "    pass\n"
        "def uses_public(x):\n"
        "    return Public.apply(x)\n"
        "class Helper(torch.autograd.Function):\n"
        "    pass\n"
        "class Outer(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return Helper.apply(g)\n"
    )
    # a public Function's applications only when each is in a backward (Helper, not Public);
    # a private one's when it calls a compiled kernel (its callers may cast the inputs)
    assert autograd_function_lines(source) == {2, 4, 6, 8, 9, 13, 15, 18}
    assert autograd_function_lines(source.replace("_C.kernel(x)", "x.clone()")) == {2, 9, 13, 15, 18}
    # a public Function around a compiled kernel: all its applications (each may cast the inputs)
    kernel = source.replace("class Public(torch.autograd.Function):\n    pass\n", "class Public(torch.autograd.Function):\n    forward = lambda ctx, x: _C.kernel(x)\n")
    assert autograd_function_lines(kernel) == {2, 4, 6, 8, 9, 12, 13, 15, 18}


def test_autocast_region_lines_follow_import_aliases():
    from amplint.core.gates import autocast_region_lines

    source = "from torch import autocast as ac\n\ndef f(x):\n    with ac('cuda'):\n        return x\nacc = 1\n"
    assert autocast_region_lines(source) == {1, 4}


def test_excerpt_blanks_only_definitions_without_wanted_lines():
    from amplint.engine.excerpt import excerpt

    source = "import torch\n\n@dec\ndef a():\n    return 1\n\nX = 2\n\nclass B:\n    y = 3\n"
    cut = excerpt(source, {10})
    assert cut == "import torch\n\n\n\n\n\nX = 2\n\nclass B:\n    y = 3\n"
    assert cut.count("\n") == source.count("\n")
    assert excerpt(source, {4, 10}) is None  # nothing to blank
    assert excerpt("def f(:\n", {1}) is None  # CPython cannot parse it: lint it whole
    assert excerpt("def f():\r\n    pass\r\n", {9}) is None  # \r line ends: not cut


AMP201_OPTIMIZER_USES = [
    ("opt = torch.optim.AdamW(model.parameters())\n", True),
    ("from torch.optim import AdamW\nopt = AdamW(params)\n", True),
    ("from torch.optim import AdamW as A, SGD  # optimizers\nopt = A(params)\n", True),
    ("from torch.optim.optimizer import Optimizer\nclass Lion(Optimizer):\n    pass\n", False),
    ("from torch.optim import (\n    AdamW,\n)\n", True),
    ("import torch.optim as O\n", True),
    ("from torch import optim as O\nopt = O.AdamW(params)\n", True),
    ("from torch import optim as O  # never used\n", False),
    ("from bitsandbytes import optim as bnb_optim\nopt = bnb_optim.AdamW8bit(params)\n", True),
    ("from onnxscript.rewriter.ort_fusions import optimize_for_ort\nmodel = optimize_for_ort(model)\n", False),
    ("import bitsandbytes as bnb\nopt = bnb.optim.AdamW8bit(params)\n", True),
    ("from ..utils import is_optimum_available\n", False),
    ('"""The optimizer (e.g. AdamW) is built by the Trainer."""\n', False),
    ("def create_optimizer(self):\n    return self.optimizer\n", False),
    ('msg = "build it with torch.optim.AdamW(params)"  # or optim.SGD(params)\n', False),
    ('"""\n>>> from torch.optim import AdamW\n>>> opt = AdamW(params)\n"""\n', False),
]


@pytest.mark.parametrize("text,expected", AMP201_OPTIMIZER_USES)
def test_amp201_gate_reads_optimizer_imports_and_calls(text, expected):
    from amplint.core.gates import optimizer_class_used

    assert optimizer_class_used(text) is expected


# ------------------------------------------------------------------ calls: AMP101, AMP106, AMP304, AMP401, AMP402

CALL_GATES_SOUND = [
    # AMP401: torch.save however the model resolves it
    ("AMP401", "model = Net().half()\ntorch.save(model.state_dict(), 'm.pt')\n"),
    ("AMP401", "import torch as th\nmodel = Net().half()\nth.save(model.state_dict(), 'm.pt')\n"),
    ("AMP401", "import os, torch as th\nmodel = Net().half()\nth.save(model.state_dict(), 'm.pt')\n"),
    ("AMP401", "from torch import save\nmodel = Net().half()\nsave(model.state_dict(), 'm.pt')\n"),
    ("AMP401", "from torch import save as dump\nmodel = Net().half()\ndump(model.state_dict(), 'm.pt')\n"),
    ("AMP401", "model = Net().half()\ntorch.save(  # the weights\n    model.state_dict(), 'm.pt')\n"),
    ("AMP401", "model = Net().half()\n(torch  # why not\n    .save (model.state_dict(), 'm.pt'))\n"),
    # AMP401: a model cast to fp16 in place for a save, then cast back (no torch.save)
    ("AMP401", "def save(self, path):\n    self.vae = self.vae.to('cpu', dtype=torch.float16)\n"
               "    self.vae.save_pretrained(path)\n    self.vae = self.vae.to(self.device, dtype=self.torch_dtype)\n"
               "def train(self):\n    loss.backward()\n"),
    # AMP402: a scaler built, passed in, or used, and a resume checkpoint saved or loaded
    ("AMP402", "scaler = torch.amp.GradScaler()\nopt = torch.optim.AdamW(model.parameters())\n"
               "torch.save({'model': model.state_dict(), 'optimizer': opt.state_dict()}, 'ckpt.pt')\n"),
    ("AMP402", "def train(model, loss_scaler, loader):\n    opt = torch.optim.AdamW(model.parameters())\n"
               "    for x in loader:\n        loss_scaler.scale(model(x)).backward()\n        loss_scaler.step(opt)\n"
               "        loss_scaler.update()\n"
               "    torch.save({'model': model.state_dict(), 'optimizer': opt.state_dict()}, 'ckpt.pt')\n"),
    ("AMP402", "def train(model, s, loader):\n    opt = torch.optim.AdamW(model.parameters())\n"
               "    for x in loader:\n        s.scale(model(x)).backward()\n        s.step(opt)\n        s.update()\n"
               "    torch.save({'model': model.state_dict(), 'optimizer': opt.state_dict()}, 'ckpt.pt')\n"),
    ("AMP402", "scaler = torch.amp.GradScaler()\nopt = torch.optim.AdamW(model.parameters())\n"
               "def resume(path):\n    ckpt = torch.load(path)\n    opt.load_state_dict(ckpt['optimizer'])\n"),
    # AMP402: Fabric's own checkpoint (`fabric.save`, no torch.save) of a 16-mixed Fabric's state
    ("AMP402", "from lightning import Fabric\ndef train(model, opt, loader, path):\n"
               "    fabric = Fabric(accelerator='cuda', precision='16-mixed')\n"
               "    state = {'model': model, 'optimizer': opt}\n    fabric.load(path, state)\n"
               "    for x in loader:\n        fabric.backward(model(x).mean())\n        opt.step()\n"
               "        fabric.save('last.ckpt', state)\n"),
    # AMP106: a scaler's step/unscale_ over fp16 parameters
    ("AMP106", "model = Net().cuda().half()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
               "scaler = torch.amp.GradScaler()\nscaler.scale(loss).backward()\nscaler.step(opt)\nscaler.update()\n"),
    ("AMP106", "model = Net().cuda().half()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
               "scaler = torch.amp.GradScaler()\nscaler.scale(loss).backward()\n(scaler\n    .step(opt))\n"),
    # AMP101: a clip after a scaled backward
    ("AMP101", "scaler = torch.amp.GradScaler()\nscaler.scale(loss).backward()\n"
               "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(opt)\nscaler.update()\n"),
    ("AMP101", "scaler = torch.amp.GradScaler()\n(scaler  # scaled\n    .scale(loss)).backward()\n"
               "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(opt)\nscaler.update()\n"),
    # AMP304: a flash-attn function called, called through a module, renamed on import; SDPA forced
    ("AMP304", "from flash_attn import flash_attn_func\ndef attend(q, k, v):\n    q = q.float()\n    return flash_attn_func(q, k, v)\n"),
    ("AMP304", "import flash_attn\ndef attend(q, k, v):\n    q = q.float()\n    return flash_attn.flash_attn_varlen_func (q, k, v)\n"),
    ("AMP304", "from flash_attn import (\n    flash_attn_func as attend_fast,  # FA2\n)\ndef attend(q, k, v):\n"
               "    q = q.float()\n    return attend_fast(q, k, v)\n"),
    ("AMP304", "from torch.nn.attention import sdpa_kernel, SDPBackend\nq = torch.randn(2, 8, 128, 64)\n"
               "with sdpa_kernel(SDPBackend.FLASH_ATTENTION):\n    out = F.scaled_dot_product_attention(q, q, q)\n"),
    ("AMP304", "q = torch.randn(2, 8, 128, 64)\nwith torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, "
               "enable_mem_efficient=False):\n    out = F.scaled_dot_product_attention(q, q, q)\n"),
    ("AMP304", "from flash_attn.modules.mha import FlashSelfAttention\nattn = FlashSelfAttention()\n"
               "q, k, v = qkv.unbind(dim=2)\nq = q.half()\npacked = torch.stack([q, k, v], dim=2)\nout = attn(packed)\n"),
    # AMP002: the deprecated class called with device_type, however it is imported and spelled
    ("AMP002", "with torch.cuda.amp.autocast(device_type='cuda'):\n    y = model(x)\n"),
    ("AMP002", "from torch.cuda import amp\nwith amp.autocast(device_type='cuda'):\n    y = model(x)\n"),
    ("AMP002", "from torch.cuda import (amp)\nwith amp.autocast(device_type='cuda'):\n    y = model(x)\n"),
    ("AMP002", "import torch.cuda.amp as A\nwith A.autocast(device_type='cuda'):\n    y = model(x)\n"),
    ("AMP002", "with torch.cuda.  \\\n        amp.autocast(device_type='cuda'):\n    y = model(x)\n"),
    ("AMP002", "with (torch.cpu  # the CPU one\n      .amp.autocast(device_type='cpu')):\n    y = model(x)\n"),
    # AMP002: a CUDA-only region in a function moving its model to a device an option may make the CPU
    ("AMP002", "import argparse\nfrom torch.cuda.amp import autocast\nparser = argparse.ArgumentParser()\n"
               "parser.add_argument('--device', default='cpu')\nargs = parser.parse_args()\ndef main(args):\n"
               "    model = Model().to(args.device)\n    with autocast():\n        out = model(x)\n"),
    ("AMP002", "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--device', default='cpu')\n"
               "args = parser.parse_args()\ndef main(args):\n    model = Model().to(args.device)\n"
               "    with torch.autocast(\"cuda\"):\n        out = model(x)\n"),
    ("AMP002", "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--device', default='mps')\n"
               "args = parser.parse_args()\ndef main(args):\n    model = Model().to(args.device)\n"
               "    with torch.autocast(device_type=r\"\"\"cuda\"\"\", dtype=torch.float16):\n        out = model(x)\n"),
    ("AMP002", "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--device', default='cpu')\n"
               "args = parser.parse_args()\ndef main(args):\n    model = Model().to(args.device)\n"
               "    with torch.autocast(  # the GPU\n        ('cuda'), dtype=torch.float16):\n        out = model(x)\n"),
    ("AMP002", "import argparse\nfrom torch import autocast as ac\nparser = argparse.ArgumentParser()\n"
               "parser.add_argument('--device', default='cpu')\nargs = parser.parse_args()\ndef main(args):\n"
               "    model = Model().to(args.device)\n    with ac(device_type\n            = 'cuda'):\n        out = model(x)\n"),
    ("AMP002", "import argparse\nimport torch as T\nparser = argparse.ArgumentParser()\n"
               "parser.add_argument('--device', default='cpu')\nargs = parser.parse_args()\ndef main(args):\n"
               "    model = Model().to(args.device)\n    with T.amp . autocast ('cuda'):\n        out = model(x)\n"),
    # AMP002: the MPS mapped onto a CPU autocast, the mapping's `else` arm after a comment and a bracket
    ("AMP002", "def train(model, loader, args):\n    device = 'mps' if args.mac else 'cuda'\n"
               "    amp_device = ('cuda' if 'cuda' in device\n                  else  # a Mac: the CPU's\n                  ('cpu'))\n"
               "    for x in loader:\n        with torch.autocast(amp_device, dtype=torch.bfloat16):\n"
               "            loss = model(x.to(device))\n        loss.backward()\n"),
]

CALL_GATES_SKIPPED = [
    ("AMP401", "model = Net().half()\nsd = model.state_dict()\nmodel_card.save('README.md')\n"),
    ("AMP401", 'model = Net().half()\n"""\n>>> torch.save(model.state_dict(), "m.pt")\n"""\n'),
    ("AMP401", "model = Net().half()\n# torch.save(model.state_dict(), 'm.pt')\ndef save(self, state_dict):\n    pass\n"),
    ("AMP401", "model = Net().half()\nsd = model.state_dict()\nraise ValueError(f'{sd}: call torch.save(model.state_dict(), p)')\n"),
    ("AMP401", "model = Net().half()\nx = x.to('cuda')\n# model.save_pretrained(path)\ndef save_all(self):\n    pass\n"),
    # a time-series model: a data scaler, cache updates, torch.load only in a doctest
    ("AMP402", "class MeanScaler(nn.Module):\n    pass\nclass Model(nn.Module):\n    def __init__(self, config):\n"
               "        self.scaler = MeanScaler(config)\n    def forward(self, x, cache):\n"
               "        cache.update(x)\n        return self.scaler(x)\n"
               '"""\n>>> batch = torch.load(file)\n>>> opt.load_state_dict(batch["optimizer"])\n"""\n'),
    ("AMP106", "model = Net().half()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nself.scaler = MinMaxScaler()\n"
               "opt.step()\n"),
    ("AMP101", "self.scale = dim ** -0.5\nx = q * self.scale\nloss.backward()\n"
               "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"),
    # AMP304: names in prose and in longer names, SDPA forced onto the math kernel
    ("AMP304", 'def paged(q, k, v, flash_attn_with_kvcache_fn=None):\n    """Used in the `flash_attn_with_kvcache` fast decode path."""\n'
               "    q = q.float()  # flash_attn_func(q, k, v) would fail here\n    return npu_flash_attn_func(q, k, v)\n"),
    ("AMP304", "from torch.nn.attention import sdpa_kernel, SDPBackend\nq = torch.randn(2, 8, 128, 64)\n"
               "with sdpa_kernel(SDPBackend.MATH):\n    out = F.scaled_dot_product_attention(q, q, q)\n"),
    # AMP002: the generic autocast on a device taken from the tensors (transformers' rotary
    # embeddings), `use_amp` and `example` are no `amp`; a device chosen as "cpu", no CUDA region
    ("AMP002", "def forward(self, x, use_amp=False):\n    device_type = x.device.type if x.device.type != 'mps' else 'cpu'\n"
               "    with torch.autocast(device_type=device_type, enabled=False):\n        freqs = x.float() @ self.inv_freq\n"
               "    return freqs  # an example, a sample: no amp_dtype here\n"),
    ("AMP002", "def main(device='cpu'):\n    model = Model().to(device)\n    with torch.autocast(device_type=device):\n"
               "        out = model(x)\n"),
    ("AMP002", "def main(device='cpu'):\n    model = Model().to('cuda')\n    if device == 'cuda' or device in ['mps', 'cuda']:\n"
               "        with torch.autocast(device_type=device):\n            out = model(x)\n"),
    # AMP002: a conditional onto "cpu" whose other arm is no CUDA (transformers' `map_location`)
    ("AMP002", "def load(device, rank):\n    device = 'mps' if device is None else device\n"
               "    map_location = 'cpu' if rank == 0 else 'meta'\n    with torch.autocast(device_type=device):\n"
               "        out = model(x)\n"),
]


def _gate(code: str):
    from amplint.core.gates import resolve
    from amplint.engine.registry import rule_specs

    spec = next(s for s in rule_specs() if s.code == code)
    return resolve(spec.gate_check)


@pytest.mark.parametrize("code,body", CALL_GATES_SOUND)
def test_call_gates_pass_where_the_rule_fires(code, body):
    source = HEAD + body
    assert _fires(source, code), "the case must be one the rule flags"
    assert _gate(code)(source)
    assert _gate(code)(source.replace("\n", "\r\n"))


@pytest.mark.parametrize("code,body", CALL_GATES_SKIPPED)
def test_call_gates_skip_words_that_are_no_such_call(code, body):
    source = HEAD + body
    assert not _fires(source, code)
    assert not _gate(code)(source)


RMS_NORM = """\
import torch


def rms_norm(x):
    return x / (x.pow(2).mean(-1, keepdim=True) + 1e-12).sqrt()


"""


@pytest.mark.parametrize(
    "rest, parsed",
    [("def export(model):\n    return model.half()\n", False), ("PRECISION = 'half'\n", True)],
    ids=["fp16-word-in-another-function", "fp16-word-at-module-level"],
)
def test_a_rule_whose_gate_fails_on_the_excerpt_is_not_parsed(monkeypatch, rest, parsed):
    """AMP302's file gate passes on "half" anywhere in the file. When its excerpt (the eps site's
    function and the module level) holds no fp16 word, the rule cannot fire and nothing is parsed;
    a module-level word stays in the excerpt."""
    from amplint.core.config import Config
    from amplint.engine import pipeline

    calls = []
    real = pipeline._parse_and_check
    monkeypatch.setattr(pipeline, "_parse_and_check", lambda *a: calls.append(1) or real(*a))
    config = Config(select=("AMP302",))
    codes, rules = pipeline.selected_rules(config)
    result = pipeline._lint_file_source(RMS_NORM + rest, "m.py", config, rules, codes)
    assert result.diagnostics == [] and bool(calls) is parsed


def test_the_same_rule_is_parsed_when_its_function_holds_the_fp16_word(monkeypatch):
    from amplint.core.config import Config
    from amplint.engine import pipeline

    calls = []
    real = pipeline._parse_and_check
    monkeypatch.setattr(pipeline, "_parse_and_check", lambda *a: calls.append(1) or real(*a))
    source = "import torch\n\n\ndef rms_norm(x):\n    x = x.half()\n    return x / (x.pow(2).mean(-1, keepdim=True) + 1e-12).sqrt()\n"
    codes, rules = pipeline.selected_rules(Config(select=("AMP302",)))
    result = pipeline._lint_file_source(source, "m.py", Config(select=("AMP302",)), rules, codes)
    assert calls and [d.code for d in result.diagnostics] == ["AMP302"]
