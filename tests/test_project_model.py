"""The project-wide AMP model (amplint.model.project): imports, values, the call graph,
autocast facts, and the cross-file findings built on them."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

from amplint import Config, lint_paths

from .project_files import write_project
from amplint.model.project import Project, summarize, text_index, universe

BCE_LOSS = """
import torch.nn.functional as F

def bce_loss(probs, target):
    return F.binary_cross_entropy(probs, target)
"""


def write(root: Path, files: Dict[str, str]) -> Path:
    return write_project(root, files)


def codes(root: Path, paths: List[str] = None) -> List[str]:
    result = lint_paths(paths or [str(root)], Config())
    return [f"{Path(d.filename).resolve().relative_to(root.resolve()).as_posix()}:{d.location.row} {d.code}" for d in result.diagnostics]


def project_of(root: Path) -> Project:
    files = sorted(str(p) for p in root.rglob("*.py"))
    texts = {f: Path(f).read_text() for f in files}
    chosen = universe(files, str(root), lambda f: text_index(texts[f]))
    return Project(str(root), {f: summarize(texts[f]) for f in chosen}, files=files, load=lambda f: summarize(texts[f]))


# ------------------------------------------------------------------ imports


def test_relative_and_package_imports_reach_the_loss(tmp_path):
    root = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/losses.py": BCE_LOSS,
        "pkg/heads/__init__.py": "from .seg import SegHead\n",
        "pkg/heads/seg.py": """
            from torch import nn
            from .. import losses

            class SegHead(nn.Module):
                def forward(self, x, y):
                    return losses.bce_loss(x.sigmoid(), y)
        """,
        "run.py": """
            import torch
            from pkg.heads import SegHead

            head = SegHead()
            with torch.autocast("cuda"):
                loss = head(x, y)
        """,
    })
    assert codes(root) == ["pkg/losses.py:5 AMP303"]


def test_src_layout_and_module_aliases(tmp_path):
    root = write(tmp_path, {
        "src/proj/__init__.py": "",
        "src/proj/losses.py": BCE_LOSS,
        "scripts/train.py": """
            import torch
            import proj.losses as L

            def step(x, y):
                with torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16):
                    return L.bce_loss(x, y)
        """,
    })
    assert codes(root) == ["src/proj/losses.py:5 AMP303"]


def test_a_script_imports_its_neighbour(tmp_path):
    root = write(tmp_path, {
        "tools/losses.py": BCE_LOSS,
        "tools/train.py": """
            import torch
            from losses import bce_loss

            with torch.amp.autocast("cuda"):
                loss = bce_loss(p, y)
        """,
    })
    assert codes(root) == ["tools/losses.py:5 AMP303"]


# ------------------------------------------------------------------ precision first


def test_stays_silent_where_bce_is_allowed_or_shielded(tmp_path):
    root = write(tmp_path, {
        "losses.py": BCE_LOSS,
        "cpu.py": """
            import torch
            from losses import bce_loss
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = bce_loss(p, y)
        """,
        "shielded.py": """
            import torch
            from losses import bce_loss
            with torch.autocast("cuda"):
                out = model(x)
                with torch.autocast("cuda", enabled=False):
                    loss = bce_loss(out.float(), y)
        """,
        "after.py": """
            import torch
            from losses import bce_loss
            with torch.autocast("cuda"):
                out = model(x)
            loss = bce_loss(out.float(), y)
        """,
        "in_string.py": '''
            CODE = """
            with torch.autocast("cuda"):
                loss = bce_loss(p, y)
            """
        ''',
        "unresolved.py": """
            import torch
            def step(model, x):
                with torch.autocast("cuda"):
                    return model(x)  # nothing says which module `model` is
        """,
    })
    assert codes(root) == []


def test_one_finding_per_bce_call_and_the_message_names_the_cause(tmp_path):
    root = write(tmp_path, {
        "losses.py": BCE_LOSS,
        "train.py": """
            import torch
            from losses import bce_loss

            class Net(torch.nn.Module):
                def forward(self, x, y):
                    return bce_loss(x.sigmoid(), y)

            def main(loader):
                net = Net()
                for x, y in loader:
                    with torch.autocast("cuda"):
                        loss = net(x, y)
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = net(x, y)
        """,
    })
    result = lint_paths([str(root)], Config())
    assert [d.code for d in result.diagnostics] == ["AMP303"]
    (d,) = result.diagnostics
    assert d.message == "`F.binary_cross_entropy` raises under the CUDA autocast of `train.py`"
    assert [(Path(r.filename).name, r.location.row, r.message) for r in d.related] == [
        ("train.py", 12, "autocast entered here (via `Net.forward` -> `bce_loss`)")
    ]


def test_a_loss_kept_as_a_lambda_runs_where_it_is_called(tmp_path):
    """MMF's `self.loss_fn = lambda *args, **kwargs: F.binary_cross_entropy(*args, **kwargs)`:
    the lambda's body runs when `forward` calls it, under the trainer's autocast; one only
    called after the region, or never called, stays silent."""
    root = write(tmp_path, {
        "losses.py": """
            import torch.nn as nn
            import torch.nn.functional as F

            class AttentionSupervision(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.loss_fn = lambda *args, **kwargs: F.binary_cross_entropy(*args, **kwargs)
                    self.unused = lambda p, t: F.binary_cross_entropy(p, t)

                def forward(self, attentions, targets):
                    return self.loss_fn(attentions, targets, weight=targets)

            def make_metric():
                score = lambda p, t: F.binary_cross_entropy(p, t)
                return score
        """,
        "train.py": """
            import torch
            from losses import AttentionSupervision, make_metric

            criterion = AttentionSupervision()
            metric = make_metric()
            with torch.autocast("cuda"):
                attentions = model(x)
                loss = criterion(attentions, y)
            value = metric(attentions.float(), y)
        """,
    })
    assert codes(root) == ["losses.py:8 AMP303"]


def test_a_same_file_finding_is_not_repeated(tmp_path):
    root = write(tmp_path, {
        "train.py": """
            import torch
            import torch.nn.functional as F

            def compute_loss(p, y):
                return F.binary_cross_entropy(p, y)

            with torch.autocast("cuda"):
                loss = compute_loss(p, y)
        """,
    })
    assert codes(root) == ["train.py:6 AMP303"]


# ------------------------------------------------------------------ values and the graph


def test_parameters_take_the_types_call_sites_pass(tmp_path):
    root = write(tmp_path, {
        "losses.py": """
            from torch import nn
            import torch.nn.functional as F

            class Crit(nn.Module):
                def forward(self, p, y):
                    return F.binary_cross_entropy(p, y)
        """,
        "engine.py": """
            import torch

            class Engine:
                def __init__(self, model, criterion):
                    self.model = model
                    self.criterion = criterion

                def step(self, x, y):
                    with torch.autocast("cuda"):
                        return self.criterion(self.model(x), y)
        """,
        "main.py": """
            from engine import Engine
            from losses import Crit

            Engine(model=build(), criterion=Crit()).step(x, y)
        """,
    })
    assert codes(root) == ["losses.py:7 AMP303"]


def test_cycles_and_recursion_terminate(tmp_path):
    root = write(tmp_path, {
        "a.py": """
            import torch
            from b import g

            def f(x, n):
                x = f(x, n - 1) if n else g(x, n)
                return x

            with torch.autocast("cuda"):
                f(x, 3)
        """,
        "b.py": """
            import torch.nn.functional as F
            from a import f

            def g(x, n):
                y = f(x, n)
                return F.binary_cross_entropy(y, y)
        """,
    })
    assert codes(root) == ["b.py:7 AMP303"]


def test_summaries_are_plain_json_and_deterministic():
    source = textwrap.dedent("""
        import torch
        from .losses import bce as loss_fn
        from functools import partial

        class T:
            def __init__(self, m):
                self.m = m.half()
                self.ac = partial(torch.autocast, "cuda")

            @torch.autocast("cuda", enabled=False)
            def run(self, x):
                with self.ac():
                    return loss_fn(self.m(x), -1e9)
    """)
    s = summarize(source)
    assert json.loads(json.dumps(s)) == s
    assert summarize(source) == s
    assert s["imports"]["loss_fn"] == [1, "losses", "bce"]
    call = next(c for c in s["functions"]["T.run"]["calls"] if c["f"] == "loss_fn")
    held = s["regions"][call["g"]]  # `with self.ac():`: for the project model to resolve
    assert held["via"] == "self.ac"
    assert s["regions"][held["parent"]]["enabled"] is False  # the decorator's region
    assert summarize("def broken(:\n") is None


def test_the_universe_is_empty_without_seeds_and_bounded_by_imports(tmp_path):
    root = write(tmp_path, {
        "a.py": "import torch\nwith torch.autocast('cuda'):\n    pass\n",
        "b.py": "import a\n",
    })
    files = sorted(str(p) for p in root.rglob("*.py"))
    index = lambda f: text_index(Path(f).read_text())  # noqa: E731
    assert universe(files, str(root), index) == []
    (root / "c.py").write_text(BCE_LOSS)
    (root / "d.py").write_text("from c import bce_loss\n")
    files = sorted(str(p) for p in root.rglob("*.py"))
    assert [Path(f).name for f in universe(files, str(root), index)] == ["c.py", "d.py"]
    (root / "e.py").write_text("import torch\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n")
    files = sorted(str(p) for p in root.rglob("*.py"))
    assert [Path(f).name for f in universe(files, str(root), index)] == ["c.py", "d.py", "e.py"]


def test_fp16_follows_builders_but_not_other_instances(tmp_path):
    root = write(tmp_path, {
        "models.py": """
            from torch import nn

            class Net(nn.Module):
                pass

            def to_fp16(module):
                module.half()

            def build_half():
                model = Net().cuda()
                to_fp16(model)
                return model
        """,
        "train.py": """
            import torch
            from models import Net, build_half

            student = build_half()
            teacher = Net()
            opt = torch.optim.SGD(student.parameters(), lr=0.1)
            opt_t = torch.optim.SGD(teacher.parameters(), lr=0.1)
        """,
    })
    project = project_of(root)
    found = {c.row: project.fp16_modules(project.updated_modules(c)) for c in project.calls() if project.optimizer_class(c)}
    assert [name for name, _ in found[7]] == ["Net"] and found[8] == []
    assert codes(root) == ["train.py:7 AMP201"]


def test_the_model_never_imports_libcst_or_torch():
    code = (
        "import sys, amplint.model.project as p; p.summarize('import torch\\nx = 1\\n'); "
        "print(sorted(m for m in ('libcst', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_package_linted_without_a_project_root_resolves_its_imports(tmp_path):
    from amplint.model.project import ModuleIndex

    files = {str(tmp_path / p) for p in ("lib/pkg/__init__.py", "lib/pkg/losses.py", "lib/pkg/sub/__init__.py", "lib/pkg/sub/head.py", "lib/tool.py")}
    index = ModuleIndex(files, None)
    assert index.resolve(str(tmp_path / "lib/pkg/sub/head.py"), 0, "pkg.losses") == str(tmp_path / "lib/pkg/losses.py")
    assert index.resolve(str(tmp_path / "lib/pkg/sub/head.py"), 2, "losses") == str(tmp_path / "lib/pkg/losses.py")
    assert index.resolve(str(tmp_path / "lib/tool.py"), 0, "pkg.sub") == str(tmp_path / "lib/pkg/sub/__init__.py")


def test_autocast_held_in_an_attribute_or_a_project_decorator(tmp_path):
    root = write(tmp_path, {
        "amp.py": """
            import functools
            import torch

            def fp16_forward(fn):
                @functools.wraps(fn)
                def wrapper(*args, **kwargs):
                    with torch.autocast("cuda", dtype=torch.float16):
                        return fn(*args, **kwargs)
                return wrapper

            def no_autocast(fn):
                @functools.wraps(fn)
                def wrapper(*args, **kwargs):
                    with torch.autocast("cuda", enabled=False):
                        return fn(*args, **kwargs)
                return wrapper
        """,
        "train.py": """
            from functools import partial
            from contextlib import suppress
            import torch
            import torch.nn.functional as F
            from amp import fp16_forward, no_autocast

            class Head(torch.nn.Module):
                @fp16_forward
                def forward(self, x, y):
                    return F.binary_cross_entropy(x.sigmoid(), y)

            class SafeHead(torch.nn.Module):
                @no_autocast
                def forward(self, x, y):
                    return F.binary_cross_entropy(x.float().sigmoid(), y)

            def train(args, model, x):
                amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16) if args.amp else suppress
                cpu_autocast = partial(torch.autocast, "cpu")
                with amp_autocast():
                    loss = model(x).sum()
                    loss.backward()
                with cpu_autocast():
                    loss = F.binary_cross_entropy(model(x), x)
                loss.backward()
        """,
    })
    result = lint_paths([str(root)], Config())
    found = [(Path(d.filename).name, d.location.row, d.code) for d in result.diagnostics]
    assert found == [("train.py", 11, "AMP303"), ("train.py", 23, "AMP202")]
    assert "(when enabled)" in result.diagnostics[1].message


def test_a_held_autocast_whose_dtype_is_picked_at_run_time_has_no_one_dtype(tmp_path):
    """`dtype=amp_dtype`, `amp_dtype = torch.bfloat16 if ... else torch.float32`: the held region's
    dtype is decided at run time (None), the same under every hash seed, not whichever of the
    name's values a set lists first (an fp32 pick would silence AMP202)."""
    files = {
        "train.py": """
            from functools import partial
            import torch

            def train(args, model, x):
                amp_dtype = torch.bfloat16 if args.bf16 else torch.float32
                amp_autocast = partial(torch.autocast, device_type="cuda", dtype=amp_dtype)
                with amp_autocast():
                    loss = model(x).sum()
                    loss.backward()
        """,
    }
    root = write(tmp_path, files)
    script = (
        "import sys, json; from pathlib import Path; from amplint import Config, lint_paths; "
        "print(json.dumps([(d.location.row, d.code, d.data.get('dtype')) for d in lint_paths([sys.argv[1]], Config()).diagnostics]))"
    )
    seen = set()
    for seed in ("0", "1", "2", "3", "4", "5"):
        import os

        out = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.returncode == 0, out.stderr[-2000:]
        seen.add(out.stdout)
    assert len(seen) == 1 and json.loads(seen.pop()) == [[10, "AMP202", None]]


def test_an_autocast_class_a_helper_returns_is_the_region_of_a_with_calling_it(tmp_path):
    """`autocast = get_autocast(args.precision)` whose project helper returns `torch.cuda.amp.autocast`
    itself (or `suppress`), then `with autocast():` in another file, also in a closure: a CUDA region
    on at run time, its dtype left to run time (the helper's lambda returns are not read). Called with
    arguments it is not read (`with autocast(enabled=False):`); a helper returning only `suppress` is none."""
    root = write(tmp_path, {
        "precision.py": """
            import torch
            from contextlib import suppress

            def get_autocast(precision):
                if precision == "amp":
                    return torch.cuda.amp.autocast
                elif precision == "amp_bfloat16":
                    return lambda: torch.cuda.amp.autocast(dtype=torch.bfloat16)
                return suppress

            def get_plain(precision):
                return suppress
        """,
        "train.py": """
            from precision import get_autocast, get_plain

            def train_one_epoch(model, data, optimizer, scaler, args):
                autocast = get_autocast(args.precision)

                def step(x, y):
                    with autocast():
                        loss = model(x, y)
                        scaler.scale(loss).backward()
                    return loss

                for x, y in data:
                    step(x, y)
                    scaler.step(optimizer)
                    scaler.update()

            def train_plain(model, data, optimizer, scaler, args):
                autocast = get_plain(args.precision)
                for x, y in data:
                    with autocast():
                        loss = model(x, y)
                        scaler.scale(loss).backward()
                    with autocast(enabled=False):
                        loss = model(x, y)
                        scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
        """,
    })
    result = lint_paths([str(root)], Config())
    found = [(Path(d.filename).name, d.location.row, d.code, d.data.get("dtype")) for d in result.diagnostics if d.code == "AMP202"]
    assert found == [("train.py", 10, "AMP202", None)]
    assert "(when enabled)" in next(d.message for d in result.diagnostics if d.code == "AMP202")


def test_a_scaler_built_per_call_is_silent_for_whole_runs_and_conditional_builds(tmp_path):
    root = write(tmp_path, {
        "engine.py": """
            import torch

            def train(model, loader, opt):
                scaler = torch.amp.GradScaler("cuda")
                for x in loader:
                    scaler.scale(model(x)).backward()
                    scaler.step(opt)
                    scaler.update()

            def run_fold(fold, loader):
                model = build(fold)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                scaler = torch.amp.GradScaler("cuda")

            def resume(model, loader, opt, scaler=None):
                if scaler is None:
                    scaler = torch.amp.GradScaler("cuda")
        """,
        "main.py": """
            import torch
            from engine import resume, run_fold, train

            for fold in range(5):
                run_fold(fold, loader)
            for lr in (0.1, 0.01):
                opt = torch.optim.SGD(model.parameters(), lr=lr)
                train(model, loader, opt)
            for epoch in range(90):
                resume(model, loader, opt)
        """,
        "loop.py": """
            from engine import train
            for epoch in range(90):
                train(model, loader, opt)
        """,
    })
    assert codes(root) == ["engine.py:5 AMP107"]
    d = lint_paths([str(root)], Config()).diagnostics[0]
    assert d.message == "`GradScaler(...)` is rebuilt on each call of `train` (called in a loop): its scale never settles"
    assert [(Path(r.filename).name, r.location.row, r.message) for r in d.related] == [("loop.py", 4, "called in a loop here")]


def test_the_project_root(tmp_path):
    from amplint.engine.crossfile import project_root

    (tmp_path / "repo" / "pkg" / "sub").mkdir(parents=True)
    for p in ("repo/pkg/__init__.py", "repo/pkg/sub/__init__.py", "repo/pkg/sub/m.py", "repo/script.py"):
        (tmp_path / p).write_text("")
    # no marker: a package's project is the folder holding its topmost package
    assert project_root(str(tmp_path / "repo/pkg/sub/m.py")) == str(tmp_path / "repo")
    (tmp_path / "repo" / "pyproject.toml").write_text("")
    assert project_root(str(tmp_path / "repo/pkg/sub/m.py")) == str(tmp_path / "repo")
    assert project_root(str(tmp_path / "repo/script.py")) == str(tmp_path / "repo")


def test_only_rules_that_check_the_project_are_imported_for_it():
    from amplint.engine.crossfile import project_rules
    from amplint.engine.registry import RuleSpec, rule_specs

    specs = []
    for spec in rule_specs():  # fresh copies: nothing loaded yet
        copy = object.__new__(RuleSpec)
        copy.__setstate__(spec.__getstate__())
        specs.append(copy)
    loaded = project_rules(specs)
    assert {r.code for r in loaded} == {
        "AMP002",  # Lightning bf16 on a CPU accelerator reaching a CUDA-only autocast(enabled=False) (rec10)
        "AMP101",  # a torch clip in a per-parameter grad hook of a scaling Accelerator (scale808)
        "AMP102", "AMP104", "AMP105", "AMP106", "AMP107", "AMP201", "AMP202", "AMP203", "AMP204", "AMP206", "AMP301", "AMP302", "AMP303", "AMP401", "AMP402",
        "AMP801", "AMP802", "AMP803", "AMP804", "AMP805", "AMP806", "AMP807", "AMP808",  # issue 23: the wrapper rules
    }
    assert all(s._cls is None for s in specs if s.code not in {r.code for r in loaded})


def test_cross_file_findings_carry_their_cause_as_a_related_location(tmp_path):
    root = write(tmp_path, {
        "losses.py": BCE_LOSS,
        "train.py": """
            import torch
            from losses import bce_loss

            with torch.autocast("cuda"):
                loss = bce_loss(p, y)
        """,
    })
    (d,) = lint_paths([str(root)], Config()).diagnostics
    (cause,) = d.related
    assert Path(cause.filename).name == "train.py" and cause.location.row == 5
    assert cause.message == "autocast entered here (via `bce_loss`)"
    assert d.to_json()["related"][0]["location"]["row"] == 5


def test_fp16_weights_cast_back_or_master_wrapped_stay_silent(tmp_path):
    root = write(tmp_path, {
        "models.py": """
            from torch import nn

            def load_half():
                model = nn.Linear(4, 4)
                model.half()
                return model
        """,
        "back.py": """
            import torch
            from models import load_half

            model = load_half()
            model.float()
            opt = torch.optim.AdamW(model.parameters())
        """,
        "apex_train.py": """
            import torch
            from apex import amp
            from models import load_half

            def main():
                model = load_half()
                opt = torch.optim.AdamW(model.parameters())
                model, opt = amp.initialize(model, opt, opt_level="O2")
        """,
        "plain.py": """
            import torch
            from models import load_half

            model = load_half()
            opt = torch.optim.AdamW(model.parameters(), eps=1e-4)
        """,
    })
    assert codes(root) == ["plain.py:6 AMP201"]


def test_a_helper_casting_the_trained_module_in_place_inside_the_loop(tmp_path):
    """rf-detr's shape: `evaluate(model, ...)`, called by the training loop, runs `model.half()`
    on its parameter and never casts it back; the loop's next pass trains the fp16 module."""
    root = write(tmp_path, {
        "engine.py": """
            import copy
            import torch

            def train_one_epoch(model, loader, optimizer, scaler):
                for x, y in loader:
                    loss = model(x).sub(y).pow(2).mean()
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()

            def distill_epoch(student, teacher, loader, optimizer):
                for x in loader:
                    loss = (student(x) - teacher(x)).pow(2).mean()
                    loss.backward()
                    optimizer.step()

            def evaluate(model, loader, fp16_eval=False):
                model.eval()
                if fp16_eval:
                    model.half()
                return sum(model(x.half() if fp16_eval else x).sum().item() for x in loader)

            def evaluate_copy(model, loader):
                model = copy.deepcopy(model)
                model.half()
                return sum(model(x.half()).sum().item() for x in loader)

            def evaluate_restored(model, loader):
                model.half()
                total = sum(model(x.half()).sum().item() for x in loader)
                model.float()
                return total
        """,
        "param_groups.py": """
            def get_param_groups(args, model):
                return [{"params": p, "lr": args.lr} for n, p in model.named_parameters()]
        """,
        "main.py": """
            import torch
            from engine import evaluate, train_one_epoch
            from param_groups import get_param_groups

            def main(args, model, loader):
                groups = get_param_groups(args, model)
                optimizer = torch.optim.AdamW(groups, lr=args.lr)
                scaler = torch.amp.GradScaler("cuda")
                for epoch in range(args.epochs):
                    train_one_epoch(model, loader, optimizer, scaler)
                    evaluate(model, loader, fp16_eval=args.fp16_eval)
        """,
        "quiet.py": """
            import torch
            from apex import amp
            from engine import distill_epoch, evaluate, evaluate_copy, evaluate_restored, train_one_epoch

            def copies(model, loader, scaler):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for epoch in range(10):
                    train_one_epoch(model, loader, optimizer, scaler)
                    evaluate_copy(model, loader)
                    evaluate_restored(model, loader)

            def after_training(model, loader, scaler):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for epoch in range(10):
                    train_one_epoch(model, loader, optimizer, scaler)
                for ckpt in range(3):
                    evaluate(model, loader, fp16_eval=True)

            def teacher_only(student, teacher, loader):
                optimizer = torch.optim.AdamW(student.parameters(), lr=1e-4)
                for epoch in range(10):
                    distill_epoch(student, teacher, loader, optimizer)
                    evaluate(teacher, loader, fp16_eval=True)

            def put_back(model, loader, scaler):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                for epoch in range(10):
                    train_one_epoch(model, loader, optimizer, scaler)
                    evaluate(model, loader, fp16_eval=True)
                    model.float()

            def master(model, loader, scaler):
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
                for epoch in range(10):
                    train_one_epoch(model, loader, optimizer, scaler)
                    evaluate(model, loader, fp16_eval=True)
        """,
        "inline.py": """
            import torch

            def bench(net, x):
                net.to(torch.float16)
                return net(x.half())

            def fit(model, loader):
                optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
                for epoch in range(5):
                    for x, y in loader:
                        model(x).sub(y).pow(2).mean().backward()
                        optimizer.step()
                    bench(model, x)
        """,
    })
    found = [c for c in codes(root) if c.endswith("AMP201")]
    assert found == ["engine.py:21 AMP201", "inline.py:5 AMP201"]  # once per cast
    result = lint_paths([str(root)], Config())
    d = next(d for d in result.diagnostics if d.code == "AMP201" and d.filename.endswith("engine.py"))
    assert "`model.half()` in `evaluate`" in d.message and "AdamW" in d.message
    notes = {(Path(r.filename).name, r.location.row) for r in d.related}
    assert notes == {("main.py", 12), ("main.py", 11)}
    (root / "main.py").unlink()
    (root / "inline.py").unlink()
    assert [c for c in codes(root) if c.endswith("AMP201")] == []  # each of quiet.py's loops is silent


def test_calls_of_one_loop_share_the_outermost_loop_row():
    s = summarize(textwrap.dedent("""
        def main(model, loader):
            for epoch in range(3):
                for x in loader:
                    step(model, x)
                evaluate(model)
            while True:
                evaluate(model)
            evaluate(model)
    """))
    rows = [(r["f"], r["r"], r.get("l")) for r in s["functions"]["main"]["calls"] if r["f"] in ("step", "evaluate")]
    assert rows == [("step", 5, 3), ("evaluate", 6, 3), ("evaluate", 8, 7), ("evaluate", 9, None)]


def test_a_builder_returning_a_tuple_hands_back_its_first_element(tmp_path):
    factory = """
        import torch

        def build_net(precision="fp32"):
            model = torch.nn.Linear(4, 4)
            index = torch.nn.Linear(4, 4)
            if precision == "fp16":
                model.half()
            {tail}
    """
    train = """
        import torch
        from factory import build_net

        model, cfg = build_net("fp16")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        optimizer.step()
    """
    tuple_root = write(tmp_path / "tuple", {"factory.py": factory.replace("{tail}", "return model, {'dim': 4}"), "train.py": train})
    assert "train.py:6 AMP201" in codes(tuple_root)
    (d,) = [d for d in lint_paths([str(tuple_root)], Config()).diagnostics if d.code == "AMP201"]
    assert d.message == '`SGD` updates a `Linear` made fp16 when `precision == "fp16"`, with no fp32 master copy'
    # the cast module unpacked at its position, not only the first
    swapped = factory.replace("{tail}", "return {'dim': 4}, model")
    swapped_root = write(tmp_path / "swapped", {"factory.py": swapped, "train.py": train.replace("model, cfg =", "cfg, model =")})
    assert "train.py:6 AMP201" in codes(swapped_root)
    # one return of another shape: which element is the model is not certain
    mixed = factory.replace("{tail}", "if index is None:\n                return index\n            return model, {'dim': 4}")
    mixed_root = write(tmp_path / "mixed", {"factory.py": mixed, "train.py": train})
    assert "AMP201" not in " ".join(codes(mixed_root))
    # the cast module is the second element: the trained first one stays fp32
    second = factory.replace("model.half()", "index.half()").replace("{tail}", "return model, index")
    second_root = write(tmp_path / "second", {"factory.py": second, "train.py": train})
    assert "AMP201" not in " ".join(codes(second_root))
