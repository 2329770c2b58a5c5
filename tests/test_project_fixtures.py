"""The multi-file fixture projects (fixtures/projects/) report exactly their reviewed findings,
and linting any one of their files reports for it what the whole project run reports."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import re
import shutil

import pytest

from amplint import Config, lint_paths
from amplint.engine.cache import Cache

PROJECTS = Path(__file__).resolve().parents[1] / "fixtures" / "projects"
DIRS = sorted(p for p in PROJECTS.iterdir() if (p / "pyproject.toml").exists())


def findings(paths: List[str], cache=None) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for d in lint_paths(paths, Config(), cache=cache).diagnostics:
        out.setdefault(str(Path(d.filename).resolve()), []).append(f"{d.location.row}:{d.location.column} {d.code}")
    return out


def expected(project: Path) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for line in (project / "expected.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            where, code = line.split()
            path, row, col = where.rsplit(":", 2)
            out.setdefault(str((project / path).resolve()), []).append(f"{row}:{col} {code}")
    return out


def test_every_shape_has_a_silent_twin():
    names = {p.name for p in DIRS}
    buggy = [n for n in names if not n.endswith("_ok")]
    assert len(buggy) >= 3
    for n in buggy:
        assert f"{n}_ok" in names, f"{n} has no correct twin"
        assert expected(PROJECTS / n), f"{n} expects no finding"


@pytest.mark.parametrize("project", DIRS, ids=lambda p: p.name)
def test_project_findings_match_expected(project, tmp_path):
    """Each fixture linted as the standalone project it stands for: a copy outside amplint's own
    checkout, where its `.gitignore` decides alone (in place, amplint's index tracks every fixture
    file, and git never ignores a tracked file: deepspeed_launch's ignored data/ would be read)."""
    copy = tmp_path / project.name
    shutil.copytree(project, copy)
    assert findings([str(copy)]) == expected(copy)


@pytest.mark.parametrize("project", DIRS, ids=lambda p: p.name)
def test_one_file_reports_what_the_whole_project_reports(project, tmp_path):
    """As pre-commit runs it: one changed file, the other files read from the warm cache."""
    cache = Cache(str(tmp_path), "fp")
    whole = findings([str(project)], cache)
    cache.save()
    for path in sorted(project.rglob("*.py")):
        warm = Cache(str(tmp_path), "fp")
        alone = findings([str(path)], warm)
        assert alone.get(str(path.resolve()), []) == whole.get(str(path.resolve()), []), path
        assert set(alone) <= {str(path.resolve())}, "a subset run reports only the files it was given"
    # and with no cache at all (pre-commit's first run)
    for path in sorted(project.rglob("*.py")):
        alone = findings([str(path)])
        assert alone.get(str(path.resolve()), []) == whole.get(str(path.resolve()), []), path


def test_a_subset_run_reuses_the_cached_project(tmp_path):
    import os
    import shutil

    project = tmp_path / "p"
    shutil.copytree(PROJECTS / "bce_loss_module", project)
    for path in project.rglob("*"):
        os.utime(path, (path.stat().st_atime - 60, path.stat().st_mtime - 60))
    store = tmp_path / "cache"
    cache = Cache(str(store), "fp")
    whole = findings([str(project)], cache)
    cache.save()
    assert cache.entries["summary"] and cache.entries["project"]
    losses = project / "segkit" / "losses.py"
    warm = Cache(str(store), "fp")
    assert findings([str(losses)], warm) == whole
    assert warm.misses == 0 and not warm.built, "nothing linted, indexed or summarised again"
    # an edit: that file alone is linted and summarised again, the others' summaries are reused
    losses.write_text(losses.read_text() + "\n# tuned\n")
    edited = Cache(str(store), "fp")
    assert findings([str(losses)], edited) == whole
    assert edited.misses == 1 and edited.built == {"summary": 1} and edited.reused.get("summary")


def test_a_subset_run_resolves_project_conditions_with_the_whole_project(tmp_path):
    """A `-1e9` mask matters only if the project runs fp16 somewhere: the other files decide."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "m"\n')
    (tmp_path / "model.py").write_text(
        "import torch\n\ndef attend(scores, mask):\n    return scores.masked_fill(mask, -1e9).softmax(-1)\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch\nfrom model import attend\nmodel = Net().cuda()\nwith torch.autocast('cuda', dtype=torch.float16):\n    out = model(x)\n"
    )
    whole = findings([str(tmp_path)])
    assert whole.get(str((tmp_path / "model.py").resolve())), "the fp16 autocast in train.py makes the mask a finding"
    assert findings([str(tmp_path / "model.py")]) == whole
    (tmp_path / "train.py").write_text("import torch\nfrom model import attend\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n    out = model(x)\n")
    assert findings([str(tmp_path / "model.py")]) == findings([str(tmp_path)]) == {}


def test_project_findings_survive_a_touch_but_not_an_edit(tmp_path):
    import os
    import shutil

    project = tmp_path / "p"
    shutil.copytree(PROJECTS / "half_builder", project)
    for path in project.rglob("*"):
        os.utime(path, (path.stat().st_atime - 60, path.stat().st_mtime - 60))
    store = tmp_path / "cache"
    cache = Cache(str(store), "fp")
    whole = findings([str(project)], cache)
    cache.save()
    builder = project / "retrieval" / "models" / "builder.py"
    os.utime(builder)  # touched: same bytes
    touched = Cache(str(store), "fp")
    assert findings([str(project / "finetune.py")], touched) == whole
    assert "summary" not in touched.built and not touched.reused.get("summary"), "the findings were reused whole"
    builder.write_text(builder.read_text().replace("    convert_weights(model)\n", ""))
    edited = Cache(str(store), "fp")
    assert findings([str(project / "finetune.py")], edited) == {}, "the edit removed the cause"


def _cli(*args, cwd):
    import os

    from click.testing import CliRunner

    from amplint.cli import main

    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)


@pytest.mark.parametrize("cache", [(), ("--no-cache",)], ids=["cache", "no-cache"])
def test_add_noqa_then_unused_noqa_fix_leaves_every_finding_silenced(tmp_path, cache):
    """`--add-noqa` silences the cross-file findings too; AMP900 must count those comments as
    used, or its safe fix deletes them and the findings come back (issue 25: 16 of them)."""
    import shutil

    root = tmp_path / "fixtures"
    shutil.copytree(PROJECTS.parent, root)
    before = _cli(*cache, ".", cwd=root)
    assert before.exit_code == 1 and "AMP303" in before.output  # the cross-file findings are there
    added = _cli(*cache, "--add-noqa", ".", cwd=root)
    assert added.exit_code == 0, added.output
    configs = _in_config_files(_cli(*cache, "--output-format", "concise", ".", cwd=root).output)
    assert configs and "a config file takes no noqa comment" in added.output  # DeepSpeed JSON: left alone, said so
    for args in ((), ("--extend-select", "AMP900"), ("--extend-select", "AMP900", "--fix"), ()):
        result = _cli(*cache, "--output-format", "concise", *args, ".", cwd=root)
        assert _findings(result.output) == configs, result.output  # only the config files' findings remain


def _findings(output):
    return sorted(line for line in output.splitlines() if re.match(r"\S+:\d+:\d+: AMP", line))


def _in_config_files(output):
    found = _findings(output)
    # config files and launchers (a shell script's launch command): neither takes a noqa comment
    assert all(line.split(":")[0].endswith((".json", ".yaml", ".yml", ".sh", ".md", "Makefile")) for line in found), found
    return found


def test_unused_noqa_fix_in_a_file_it_fixes_keeps_the_cross_file_directive(tmp_path):
    """`--fix` re-lints each fixed file alone: the `# noqa: AMP303` of a cross-file finding must
    stay used there too, while a really unused code on another line goes (and the rows move)."""
    import shutil

    root = tmp_path / "bce_loss_module"
    shutil.copytree(PROJECTS / "bce_loss_module", root)
    losses = root / "segkit" / "losses.py"
    text = losses.read_text()
    text = text.replace("bce = F.binary_cross_entropy(probs, target.float())", "bce = F.binary_cross_entropy(probs, target.float())  # noqa: AMP303")
    text = text.replace('"""Losses for binary masks."""\n', '"""Losses for binary masks."""\nimport os  # noqa: AMP101\n')
    losses.write_text(text)
    fixed = _cli("--no-cache", "--extend-select", "AMP900", "--fix", ".", cwd=root)
    assert fixed.exit_code == 0, fixed.output
    after = losses.read_text()
    assert "import os\n" in after and "# noqa: AMP303" in after
    assert _cli("--no-cache", "--extend-select", "AMP900", ".", cwd=root).exit_code == 0
