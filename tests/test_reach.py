"""Sites that never run (issue 22, `amplint/model/project/reach`): a finding at a site a constant
branch excludes, behind a parameter default no call passes, or in a file whose import of a project
module fails is dropped for every rule; wherever that is not certain the finding stays."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, List

from amplint import Config, lint_paths, lint_source

from .project_files import write_project

#: a deprecated autocast (AMP001): a site any rule-independent filter must drop or keep
SITE = "torch.cuda.amp.autocast()"


def rows(root: Path, name: str, codes=("AMP001",)) -> List[int]:
    found = lint_paths([str(root)], Config(select=frozenset(codes))).diagnostics
    return sorted(d.location.row for d in found if Path(d.filename).name == name and d.code in codes)


def source_rows(text: str, codes=("AMP001",)) -> List[int]:
    found = lint_source(textwrap.dedent(text).lstrip("\n"), "example.py", Config(select=frozenset(codes)))
    return sorted(d.location.row for d in found if d.code in codes)


# -- A. a branch a constant excludes --------------------------------------------------------------

def test_a_constant_true_excludes_its_else_branch():
    text = f"""
    import torch
    def main():
        use_empty_init = True
        if use_empty_init:
            ctx = {SITE}
        else:
            ctx = {SITE}
    """
    assert source_rows(text) == [5]


def test_a_module_constant_false_excludes_its_body():
    text = f"""
    import torch
    DEBUG = False
    def main():
        if DEBUG:
            ctx = {SITE}
        if not DEBUG:
            ctx = {SITE}
    """
    assert source_rows(text) == [7]


def test_a_rebound_name_keeps_both_branches():
    text = f"""
    import torch
    def main(args):
        use_empty_init = True
        if args.meta:
            use_empty_init = False
        if use_empty_init:
            ctx = {SITE}
        else:
            ctx = {SITE}
    """
    assert source_rows(text) == [7, 9]


def test_a_module_constant_another_module_sets_keeps_the_site(tmp_path):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/flags.py": f"""
            import torch
            USE_AMP = False
            def step():
                if USE_AMP:
                    return {SITE}
            """,
        "run.py": """
            import pkg.flags
            pkg.flags.USE_AMP = True
            pkg.flags.step()
            """,
    })
    assert rows(root, "flags.py") == [6]


# -- B. a parameter default no call passes --------------------------------------------------------

DDP = """
import torch
from torch.distributed.algorithms.ddp_comm_hooks import default as comm_hooks

def create_ddp_model(model, *, fp16_compression=False, **kwargs):
    ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
    if fp16_compression:
        ddp.register_comm_hook(state=None, hook=comm_hooks.fp16_compress_hook)
    return ddp

"""


def test_b_a_default_no_call_passes_guards_a_site_that_never_runs():
    assert source_rows(DDP + "model = create_ddp_model(net, broadcast_buffers=False)\n", ("AMP803",)) == []


def test_b_a_call_passing_it_keeps_the_site():
    by_keyword = DDP + "a = create_ddp_model(net)\nb = create_ddp_model(net, fp16_compression=True)\n"
    assert source_rows(by_keyword, ("AMP803",)) == [7]


def test_b_a_positional_pass_keeps_the_site():
    text = f"""
    import torch
    def run(model, x, enable_amp=False):
        if enable_amp:
            ctx = {SITE}
    run(net, x, True)
    """
    assert source_rows(text) == [4]


def test_b_a_call_forwarding_kwargs_keeps_the_site():
    assert source_rows(DDP + "def build(net, **kw):\n    return create_ddp_model(net, **kw)\n", ("AMP803",)) == [7]


def test_b_a_function_nothing_calls_keeps_the_site():
    assert source_rows(DDP, ("AMP803",)) == [7]  # an API: callers outside the project pass anything


def test_b_a_same_named_call_that_cannot_be_its_call_decides_nothing():
    # `model.train()` fits no call of `train(model, loader, resume=None)` (two required arguments)
    text = f"""
    import torch
    def train(model, loader, resume=None):
        model.train()
        if resume:
            ctx = {SITE}
    """
    assert source_rows(text) == [5]


def test_b_a_call_in_another_file_passing_it_keeps_the_site(tmp_path):
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/ddp.py": DDP + "def local(net):\n    return create_ddp_model(net)\n",
        "train.py": "from pkg.ddp import create_ddp_model\nm = create_ddp_model(net, fp16_compression=True)\n",
    })
    assert rows(root, "ddp.py", ("AMP803",)) == [8]
    (root / "train.py").write_text("from pkg.ddp import create_ddp_model\nm = create_ddp_model(net)\n")
    assert rows(root, "ddp.py", ("AMP803",)) == []


def test_b_an_autocast_a_never_passed_default_switches_off(tmp_path):
    # AMP105 alone reads the helper's file, which calls nothing (its finding stays there); the
    # project's only call, in another file, leaves the autocast off
    root = write_project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/moe_utils.py": """
            import torch
            def run_fwd_bwd(model, data, optimizer, enable_autocast=False):
                with torch.autocast("cuda", dtype=torch.float16, enabled=enable_autocast):
                    loss = model(data)
                loss.backward()
                optimizer.step()
            """,
        "test_moe.py": "from pkg.moe_utils import run_fwd_bwd\nrun_fwd_bwd(net, x, opt)\n",
    })
    assert rows(root, "moe_utils.py", ("AMP105",)) == []
    (root / "test_moe.py").write_text("from pkg.moe_utils import run_fwd_bwd\nrun_fwd_bwd(net, x, opt, True)\n")
    assert rows(root, "moe_utils.py", ("AMP105",)) == [6]


# -- C. a file whose import of a project module fails ---------------------------------------------

def _importer(imports: str) -> str:
    """A script: the imports, then the site (row 5 with a one-line import), run at import."""
    return f"""
    import torch
    {imports}

    ctx = {SITE}
    """


def test_c_an_absent_submodule_keeps_the_file(tmp_path):
    # it may be built (a compiled extension, `from . import pool_ext`, whose name no file spells)
    root = write_project(tmp_path, {
        "coati/__init__.py": "",
        "coati/models/__init__.py": "",
        "coati/models/gpt.py": "class GPTRM: pass\n",
        "examples/train.py": _importer("from coati.models.bloom import BLOOMRM"),
        "examples/live.py": _importer("from coati.models.gpt import GPTRM"),
    })
    assert rows(root, "train.py") == [5]
    assert rows(root, "live.py") == [5]


def test_c_a_module_binding_no_such_name(tmp_path):
    files = {
        "tests/__init__.py": "",
        "tests/helpers/utils.py": """
            import torch.distributed as dist
            def loose_close(a, b): ...
            def patch(funcs):
                for f in funcs:
                    setattr(dist, f.__name__, f)  # binds nothing of this module
            """,
        "tests/legacy/test_it.py": _importer("from tests.helpers.utils import MoeModel"),
    }
    root = write_project(tmp_path, files)
    assert rows(root, "test_it.py") == []


def _kept_with_utils(tmp_path: Path, utils: str, extra: Dict[str, str] = None) -> List[int]:
    files = {
        "tests/__init__.py": "",
        "tests/helpers/utils.py": utils,
        "tests/legacy/test_it.py": _importer("from tests.helpers.utils import MoeModel"),
        **(extra or {}),
    }
    return rows(write_project(tmp_path, files), "test_it.py")


def test_c_a_star_import_may_bind_it(tmp_path):
    assert _kept_with_utils(tmp_path, "from tests.helpers.models import *\n") == [5]


def test_c_a_module_getattr_may_bind_it(tmp_path):
    assert _kept_with_utils(tmp_path, "def __getattr__(name):\n    return object\n") == [5]


def test_c_globals_or_setattr_on_an_unknown_object_may_bind_it(tmp_path):
    assert _kept_with_utils(tmp_path / "g", "for n in ('A', 'B'):\n    globals()[n] = object\n") == [5]
    assert _kept_with_utils(tmp_path / "s", "import sys\nsetattr(sys.modules[__name__], NAME, 1)\n") == [5]
    assert _kept_with_utils(tmp_path / "t", "def bind(mod, name):\n    setattr(mod, name, object)\n") == [5]


def test_c_another_file_storing_the_name_may_bind_it(tmp_path):
    extra = {"tests/conftest.py": "import tests.helpers.utils as u\nu.MoeModel = object\n"}
    assert _kept_with_utils(tmp_path, "def loose_close(a, b): ...\n", extra) == [5]


def test_c_a_package_that_could_come_from_site_packages_keeps_the_file(tmp_path):
    # `vendor/` holds no packaging file and is not the script's folder: `coati` there is imported
    # only if something puts `vendor/` on sys.path, and a site-packages `coati` may bind more
    root = write_project(tmp_path, {
        "vendor/coati/__init__.py": "",
        "vendor/coati/models/__init__.py": "",
        "vendor/tools/train.py": _importer("from coati.models.bloom import BLOOMRM"),
    })
    assert rows(root, "train.py") == [5]
    (root / "vendor" / "setup.py").write_text("from setuptools import setup\nsetup(name='coati')\n")
    assert rows(root, "train.py") == [5]  # its own copy, but `bloom` may be a built module


def test_c_a_guarded_import_keeps_the_file(tmp_path):
    guarded = "try:\n        from coati.models.bloom import BLOOMRM\n    except ImportError:\n        BLOOMRM = None"
    root = write_project(tmp_path, {
        "coati/__init__.py": "",
        "coati/models/__init__.py": "",
        "examples/train.py": _importer(guarded),
    })
    assert rows(root, "train.py") == [8]  # the site after the try


def test_c_a_name_the_package_itself_defines_keeps_the_file(tmp_path):
    # `dualcodec/__init__.py` does not export `BaseTrainer`, but `dualcodec/utils/base_trainer.py`
    # defines it: a copy of the package installed from a release may export it (Amphion's
    # dualcodec trainer, a labelled AMP001 pitfall); a name only another package defines decides
    files = {
        "dualcodec/__init__.py": "from .model import DualCodec\n",
        "dualcodec/model.py": "class DualCodec: pass\n",
        "dualcodec/utils/__init__.py": "",
        "dualcodec/utils/base_trainer.py": "class BaseTrainer(object):\n    pass\n",
        "dualcodec/trainer.py": _importer("from dualcodec import BaseTrainer"),
    }
    root = write_project(tmp_path / "own", files)
    assert rows(root, "trainer.py") == [5]
    files["dualcodec/utils/base_trainer.py"] = "class Other(object):\n    pass\n"
    files["legacy/base_trainer.py"] = "class BaseTrainer(object):\n    pass\n"
    root = write_project(tmp_path / "other", files)
    assert rows(root, "trainer.py") == [5]  # a package's missing name may be a built submodule


# -- the verdict in the run's cache --------------------------------------------------------------


def test_a_warm_run_reuses_the_verdict_and_a_changed_caller_reopens_it(tmp_path, monkeypatch):
    # a warm run of an unchanged project parses nothing for the verdict; a file whose bytes
    # changed (now passing the flag) asks again, and the site it makes live is reported
    from amplint.engine.cache import Cache
    from amplint.model.project import reach

    root = write_project(tmp_path / "p", {
        "pkg/__init__.py": "",
        "pkg/ddp.py": DDP + "def local(net):\n    return create_ddp_model(net)\n",
        "train.py": "from pkg.ddp import create_ddp_model\nm = create_ddp_model(net)\n",
    })
    config = Config(select=frozenset(("AMP803",)))
    cache_dir = str(tmp_path / "cache")

    def lint():
        cache = Cache(cache_dir, "fp")
        found = lint_paths([str(root)], config, cache=cache).diagnostics
        cache.save()
        return [d.location.row for d in found if d.filename.endswith("ddp.py")]

    assert lint() == []
    built = []
    real = reach.Reach.__init__
    monkeypatch.setattr(reach.Reach, "__init__", lambda self, *a, **k: (built.append(1), real(self, *a, **k))[1])
    assert lint() == [] and built == []
    (root / "train.py").write_text("from pkg.ddp import create_ddp_model\nm = create_ddp_model(net, fp16_compression=True)\n")
    assert lint() == [8] and built == [1]
