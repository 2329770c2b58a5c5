"""File discovery: suffixes, excludes, --force-exclude, and the gitignore matcher (checked against git)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from amplint.core.config import Config
from amplint.engine.discovery import GitIgnore, discover, parse_gitignore


def files(tmp_path, config=None, **kw):
    config = config or Config(root=str(tmp_path))
    return sorted(os.path.relpath(p, tmp_path).replace(os.sep, "/") for p in discover([str(tmp_path)], config, **kw))


def touch(root, *names):
    for name in names:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x = 1\n")


def test_suffixes_hidden_folders_and_venvs(tmp_path):
    touch(tmp_path, "a.py", "b.pyi", "c.ipynb", "d.txt", ".hidden/e.py", "env/pyvenv.cfg", "env/lib/f.py", "build/g.py", "pkg/h.py")
    assert files(tmp_path) == ["a.py", "b.pyi", "c.ipynb", "pkg/h.py"]


def test_exclude_and_force_exclude(tmp_path):
    touch(tmp_path, "keep.py", "gen/x.py", "pkg/gen/y.py", "skip_me.py")
    config = Config(root=str(tmp_path), extend_exclude=("gen", "skip_*.py"))
    assert files(tmp_path, config) == ["keep.py"]
    named = [str(tmp_path / "skip_me.py"), str(tmp_path / "pkg" / "gen" / "y.py"), str(tmp_path / "keep.py")]
    assert list(discover(named, config)) == named, "files named explicitly are linted"
    assert list(discover(named, config, force_exclude=True)) == [str(tmp_path / "keep.py")]


def test_gitignore_in_a_repository(tmp_path):
    (tmp_path / ".git" / "info").mkdir(parents=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("secret.py\n")
    (tmp_path / ".gitignore").write_text("data/\n*.gen.py\n!keep.gen.py\n/rooted.py\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".gitignore").write_text("local.py\n!rooted.py\n")
    touch(tmp_path, "a.py", "secret.py", "data/b.py", "x.gen.py", "keep.gen.py", "rooted.py", "sub/rooted.py", "sub/local.py", "sub/c.py", "local.py")
    assert files(tmp_path) == ["a.py", "keep.gen.py", "local.py", "sub/c.py", "sub/rooted.py"]
    assert len(files(tmp_path, respect_gitignore=False)) == 10
    # linting a subfolder still applies the .gitignore files above it
    sub = [os.path.basename(p) for p in discover([str(tmp_path / "sub")], Config(root=str(tmp_path)))]
    assert sub == ["c.py", "rooted.py"]


def test_gitignore_outside_a_repository_applies_below_the_given_folder(tmp_path):
    (tmp_path / ".gitignore").write_text("ignored.py\n")
    touch(tmp_path, "ignored.py", "kept.py")
    assert files(tmp_path) == ["kept.py"]


def test_respect_gitignore_in_config(tmp_path):
    (tmp_path / ".gitignore").write_text("*.py\n")
    touch(tmp_path, "a.py")
    assert files(tmp_path) == []
    assert files(tmp_path, Config(root=str(tmp_path), respect_gitignore=False)) == ["a.py"]


# the matcher against git itself, on patterns that exercise every rule of gitignore(5)
PATTERNS = """\
# comment
*.log
!important.log
build/
/top.py
docs/**/*.tmp.py
**/cache
a/**/b.py
foo?.py
[ab]x.py
[!c]y.py
nested/deep/*.py
\\#hash.py
trailing.py\\ 
"""

PATHS = [
    "x.log", "important.log", "sub/y.log", "build/a.py", "sub/build/b.py", "top.py", "sub/top.py",
    "docs/x.tmp.py", "docs/a/b/x.tmp.py", "docs/keep.py", "cache/a.py", "deep/er/cache/b.py",
    "a/b.py", "a/x/y/b.py", "b.py", "foo1.py", "foo12.py", "ax.py", "cx.py", "ay.py", "cy.py",
    "nested/deep/z.py", "nested/deep/more/z.py", "#hash.py", "trailing.py ", "plain.py",
]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_matcher_agrees_with_git(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(PATTERNS)
    for rel in PATHS:
        touch(tmp_path, rel)
    out = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=tmp_path,
        input="\n".join(PATHS) + "\n",
        capture_output=True,
        text=True,
    )
    git_ignored = set(out.stdout.splitlines())
    ignore = GitIgnore.for_folder(str(tmp_path))
    ours = set()
    for rel in PATHS:
        # a path is ignored if it or any folder above it is (git never descends into ignored folders)
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            if ignore.ignored(str(tmp_path.joinpath(*parts[:i])), i < len(parts)):
                ours.add(rel)
                break
    assert len(git_ignored) >= 15, out.stderr
    assert ours == git_ignored


def test_parse_gitignore_skips_comments_and_blanks():
    assert parse_gitignore("# c\n\n   \n") == []
    pats = parse_gitignore("a/\n!b\n")
    assert pats[0].dir_only and not pats[0].negate and pats[1].negate


@pytest.mark.parametrize(
    "patterns",
    [(), ("build", "dist"), ("sub/deep",), ("conf.py",), ("*.pyi",), ("sub/*",), ("sub",), ("[bd]uild",), ("w.py", "build")],
)
def test_walk_skips_file_checks_only_where_no_glob_can_match(tmp_path, patterns):
    """The walk checks files against the globs only when a glob could match one below a folder
    that passed (`Excluder.reaches_files`); the result equals checking every file and folder."""
    from amplint.core.config import Config
    from amplint.engine.discovery import Excluder, discover

    for rel in ("a.py", "b.pyi", "build/x.py", "sub/build/y.py", "sub/z.py", "sub/deep/w.py", "docs/conf.py", "sub/deep/more/v.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    top = tmp_path
    found = sorted(discover([str(top)], Config(exclude=patterns, root=str(tmp_path))))
    check = Excluder(patterns, str(tmp_path))
    expected = []
    for path in sorted(top.rglob("*")):
        if path.is_file():
            chain = [path, *[p for p in path.parents if p != top and top in p.parents]]
            if not any(check(str(p), p.name) for p in chain):
                expected.append(str(path))
    assert found == sorted(expected), patterns


def _git(tmp_path, *args):
    subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_tracked_files_are_linted_whatever_the_gitignore_says(tmp_path, version):
    # a project that ignores its own tracked code (`**/sat` above a tracked sat/, `test*` above tracked tests)
    _git(tmp_path, "init", "-q")
    touch(tmp_path, "train.py", "sat/train_video.py", "sat/sgm/util.py", "tests/test_a.py", "pkg/testing.py")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "x")
    (tmp_path / ".gitignore").write_text("**/sat\ntest*\n")
    # untracked twins under the same patterns: still ignored, as git has them
    touch(tmp_path, "sat/scratch.py", "sat/sgm/new.py", "tests/test_local.py", "testrun.py", "pkg/testing2.py", "kept.py")
    _git(tmp_path, "update-index", "--index-version", version)
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout.split()
    git_sees = sorted(p for p in out if p.endswith(".py"))
    assert git_sees == ["kept.py", "pkg/testing.py", "sat/sgm/util.py", "sat/train_video.py", "tests/test_a.py", "train.py"]
    assert files(tmp_path) == git_sees
    # linting the tracked folder by name: its files are linted
    named = sorted(os.path.basename(p) for p in discover([str(tmp_path / "sat" / "sgm")], Config(root=str(tmp_path))))
    assert "util.py" in named


def test_without_an_index_the_patterns_alone_decide(tmp_path):
    # an exported tree (an empty .git marks the root; no index): nothing says what is tracked
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("**/sat\n")
    touch(tmp_path, "train.py", "sat/train_video.py")
    assert files(tmp_path) == ["train.py"]
    (tmp_path / ".git" / "index").write_bytes(b"not an index")
    assert files(tmp_path) == ["train.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_parse_index_reads_what_git_tracks(tmp_path):
    from amplint.engine.gitindex import parse_index

    _git(tmp_path, "init", "-q")
    touch(tmp_path, "a.py", "deep/er/b.py", "deep/er/c.py", "deeper/d.py", "long_" + "n" * 200 + ".py")
    _git(tmp_path, "add", "-A")
    (tmp_path / "intent.py").write_text("")
    _git(tmp_path, "add", "-N", "intent.py")  # an extended-flags entry (v3)
    listed = subprocess.run(["git", "ls-files"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
    for version in ("3", "4", "2"):
        _git(tmp_path, "update-index", "--index-version", version)
        assert list(parse_index((tmp_path / ".git" / "index").read_bytes())) == listed
    assert parse_index(b"DIRC\x00\x00\x00\x09\x00\x00\x00\x00") is None
    assert parse_index(b"") is None


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_tracked_file_under_an_ignored_folder_gets_its_findings(tmp_path):
    import json
    import sys

    code = (
        "import torch\n\n\ndef step(model, x):\n    with torch.cuda.amp.autocast():\n        return model(x)\n\n\n"
        "if __name__ == '__main__':\n    step(torch.nn.Linear(2, 2), torch.ones(2))\n"
    )
    _git(tmp_path, "init", "-q")
    (tmp_path / "sat").mkdir()
    (tmp_path / "sat" / "train_video.py").write_text(code)  # INVALID, tracked: flagged
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "x")
    (tmp_path / ".gitignore").write_text("**/sat\n")
    (tmp_path / "sat" / "scratch.py").write_text(code)  # its untracked twin: ignored, silent
    out = subprocess.run([sys.executable, "-m", "amplint", "--output-format", "json", "--no-cache", "--exit-zero", "."],
                         cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    found = {(os.path.basename(d["filename"]), d["code"]) for d in json.loads(out.stdout)}
    assert found == {("train_video.py", "AMP001")}, out.stderr
