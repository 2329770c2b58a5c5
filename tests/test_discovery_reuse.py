"""A run asks the file system each thing once (issue 13 item 6: warm and one-file runs).

The cross-file pass needs every file of the project a run's files belong to, and each
file's project root. It used to walk the project again (the root of an unpacked wheel
is the folder above the package given) and to stat its way up from every folder; now
the run's walk records what it saw (`WalkRecord`) and both reuse it. These tests prove
the answers equal asking the file system again, on trees built to make them differ
(nested projects, .gitignore files above the folder given, hidden and virtualenv
folders, links), and that each folder is listed once. They also check the exclude
matcher against fnmatch, which it no longer calls.
"""
from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess

import pytest

from amplint.core.config import Config
from amplint.engine import crossfile, discovery
from amplint.engine.crossfile import ROOT_NAMES, Projects, project_root
from amplint.engine.discovery import Excluder, WalkRecord, discover


def _touch(root, *names):
    for name in names:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x = 1\n")


def _tree(tmp_path, variant):
    """R: a marked project; the run is given R/w (and, for some variants, more)."""
    r = tmp_path / "R"
    _touch(
        r,
        "pyproject.toml", "top.py", "docs/d.py", "other/o.py",
        "w/__init__.py", "w/a.py", "w/gen/g.py", "w/sub/pyproject.toml", "w/sub/s.py",
        "w/.hidden/h.py", "w/env/pyvenv.cfg", "w/env/lib/v.py", "w/build/b.py",
        "w/pkg/__init__.py", "w/pkg/deep/__init__.py", "w/pkg/deep/m.py", "w/pkg/x.tmp.py",
    )
    (r / "w" / "pyvenv.cfg").mkdir() if variant == "given-is-venv" else None
    os.symlink(r / "other", r / "w" / "link")  # a link to a folder: never walked into
    os.symlink(r / "nowhere.py", r / "w" / "broken.py")  # a broken link: a file that does not exist
    if variant in ("gitignore-above", "git"):
        (r / ".gitignore").write_text("gen/\n*.tmp.py\n")
    if variant == "gitignore-below":
        (r / "w" / ".gitignore").write_text("gen/\n")
    if variant == "git":
        if shutil.which("git") is None:
            pytest.skip("needs git")
        subprocess.run(["git", "init", "-q", str(r)], check=True)
    given = [str(r / "w")]
    if variant == "hidden":
        (r / "w").rename(r / ".w")
        given = [str(r / ".w")]
    if variant == "explicit":
        given = [str(r / "w" / "env" / "lib" / "v.py"), str(r / "w")]
    if variant == "nested-given":
        given = [str(r / "w"), str(r / "w" / "pkg")]
    return r, given


VARIANTS = ["plain", "gitignore-above", "gitignore-below", "git", "hidden", "explicit", "nested-given", "given-is-venv"]


def _fresh_files(projects, root, config):
    """What Projects.files computed before the walk was reused: walk the root again."""
    members = projects.groups.get(root, {})
    walked = {os.path.abspath(p) for p in discover([root], config) if p.endswith(".py")}
    return sorted(walked | set(members))


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("respect_gitignore", [True, False])
def test_projects_reuse_the_walk_and_answer_as_a_fresh_walk(tmp_path, variant, respect_gitignore):
    r, given = _tree(tmp_path, variant)
    config = Config(root=str(tmp_path), respect_gitignore=respect_gitignore, exclude=("build",))
    walk = WalkRecord(ROOT_NAMES)
    files = list(discover(given, config, record=walk))
    projects = Projects(given, files, config, walk)
    for f in files:
        if f.endswith(".py"):
            full = os.path.abspath(f)
            assert full in projects.groups[project_root(full)], f
    assert sum(len(m) for m in projects.groups.values()) == len({os.path.abspath(f) for f in files if f.endswith(".py")})
    for root in projects.groups:
        if root is not None:
            assert projects.files(root) == _fresh_files(Projects(given, files, config), root, config), (variant, root)


def test_the_reuse_is_taken_where_it_applies(tmp_path):
    """Not a vacuous equality: in the plain tree the project walk does not list the given folder."""
    r, given = _tree(tmp_path, "plain")
    config = Config(root=str(tmp_path))
    walk = WalkRecord(ROOT_NAMES)
    files = list(discover(given, config, record=walk))
    listed = []
    real = os.scandir

    def counting(path="."):
        listed.append(os.path.abspath(path))
        return real(path)

    discovery.os.scandir = counting
    try:
        project = Projects(given, files, config, walk).files(str(r))
    finally:
        discovery.os.scandir = real
    assert str(r / "w" / "sub" / "s.py") in project  # a nested project's file, as a walk of R finds it
    assert str(r / "docs" / "d.py") in project and str(r / "top.py") in project
    assert not [p for p in listed if p == str(r / "w") or p.startswith(str(r / "w") + os.sep)], listed


def test_a_run_lists_each_folder_once(tmp_path, monkeypatch):
    """lint_paths on a folder below the project root: the walk, the project roots and the
    project's files list every folder once, and ask no folder the walk listed for a marker."""
    from amplint.engine.run import lint_paths

    r, given = _tree(tmp_path, "plain")
    listed = []
    stat_asked = []
    real_scandir, real_exists = os.scandir, os.path.exists

    def scandir(path="."):
        listed.append(os.path.abspath(path))
        return real_scandir(path)

    def exists(path):
        stat_asked.append(path)
        return real_exists(path)

    monkeypatch.setattr(discovery.os, "scandir", scandir)
    monkeypatch.setattr(crossfile.os.path, "exists", exists)
    lint_paths(given, Config(root=str(tmp_path)))
    assert len(listed) == len(set(listed)), sorted(p for p in set(listed) if listed.count(p) > 1)
    walked = {p for p in listed if p.startswith(str(r / "w"))}
    # (`.git` is asked of the folders given and those above them, to find their gitignore files)
    asked = {os.path.dirname(p) for p in stat_asked if os.path.basename(p) in ROOT_NAMES and os.path.basename(p) != ".git"}
    assert walked and not asked & walked, asked & walked


@pytest.mark.parametrize("variant", VARIANTS)
def test_roots_from_the_listing_equal_roots_from_stat(tmp_path, variant):
    r, given = _tree(tmp_path, variant)
    (r / "w2").mkdir()
    os.symlink(r / "nowhere", r / "w2" / "setup.py")  # a broken marker: os.path.exists says no
    os.mkfifo(r / "w2" / "__init__.py") if hasattr(os, "mkfifo") else None  # not a file, but it exists
    _touch(r, "w2/z.py")
    walk = WalkRecord(ROOT_NAMES)
    files = [os.path.abspath(f) for f in discover([*given, str(r / "w2")], Config(root=str(tmp_path)), record=walk)]
    roots = crossfile._Roots(walk)
    for f in files:
        assert roots.root(f) == project_root(f), f
    assert walk.names  # the walk did record its listings


NAMES = ["build", "a.py", "b.pyi", "x.ipynb", "docs", "conf.py", "Build", "node_modules", ".venv", "sub", "deep", "w.py", ""]
GLOBS = [
    (), ("build",), ("build/",), ("sub/deep",), ("sub/deep/",), ("conf.py",), ("*.pyi",), ("sub/*",), ("[bd]uild",),
    ("w.py", "build"), ("docs/conf.py",), ("?uild",), ("/abs",), ("",), ("a.py", "sub/*", "deep"),
    Config().exclude,
]


@pytest.mark.parametrize("globs", GLOBS)
def test_excluder_answers_as_fnmatch(tmp_path, globs):
    """Plain globs are set lookups now: the answers are fnmatch's on names and relative paths."""
    check = Excluder(globs, str(tmp_path))
    rels = ["a.py", "build", "build/x.py", "sub/deep", "sub/deep/w.py", "sub/build/y.py", "docs/conf.py", "deep/more/v.py", "builds/x.py", "Build/x.py"]
    for rel in rels + [f"{a}/{b}" for a in NAMES for b in NAMES if a and b]:
        name = rel.rsplit("/", 1)[-1]
        path = str(tmp_path / rel)
        expected = any(
            fnmatch.fnmatch(os.path.normcase(name), os.path.normcase(g))
            or fnmatch.fnmatch(os.path.normcase(rel), os.path.normcase(g))
            or fnmatch.fnmatch(os.path.normcase(rel), os.path.normcase(g).rstrip("/") + "/*")
            for g in globs
        )
        assert check(path, name) == expected, (globs, rel)
    outside = "/elsewhere/build/x.py"  # outside the root: matched by its absolute path
    expected = any(fnmatch.fnmatch("x.py", g) or fnmatch.fnmatch(outside, g) or fnmatch.fnmatch(outside, g.rstrip("/") + "/*") for g in globs)
    assert check(outside, "x.py") == expected
