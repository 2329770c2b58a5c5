"""report.html rendered by headless Chromium, the stderr summary, the AMP701 detector,
and the lint path staying free of torch -- all without training anything."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from amplint.watch.findings import CollapseDetector, summary
from amplint.watch.report import render

from .watch_helpers import amplint

EVIL = "</script><script>document.title='pwned'</script><img src=x onerror=alert(1)>"


def _events(n=40, skipped=range(11, 31)):
    evs = [{"type": "header", "torch": "2.13.0", "cuda": None, "device": "cpu", "capability": None, "autocast_dtype": "float16", "rank": 0}]
    scale = 1024.0
    for i in range(1, n + 1):
        if i in skipped:
            scale /= 2
        evs.append({"type": "step", "step": i, "loss_scale": scale, "skipped": i in skipped, "grad_norm": None if i in skipped else 1.0 + i / 10,
                    "step_time_s": None if i == 1 else 0.01 + (i % 3) / 1000, "rank": 0})
    evs.append({"type": "finding", "code": "AMP701", "filename": f"train{EVIL}.py", "line": 7, "message": f"scale fell {EVIL}", "step": 18, "rank": 0})
    evs.append({"type": "finding", "code": "AMP101", "filename": "train.py", "line": 9, "message": "clip on scaled grads", "step": 1, "rank": 0})
    evs.append({"type": "nonfinite", "kind": "forward output", "message": f"forward output of `{EVIL}`", "step": 12, "rank": 0})
    return evs


def chromium() -> str:
    """The distribution's Chromium; CI must have it (AMPLINT_CI=1 turns a missing one into a failure)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("AMPLINT_CI"):
        pytest.fail("chromium is not installed: .ci/run must install it (apt-get install -y chromium)")
    pytest.skip("SKIPPED LOUDLY: chromium is not installed here (apt-get install -y chromium); CI runs this test")


def dump_dom(html_path: str, tmp_path) -> str:
    out = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         "--virtual-time-budget=5000", "--dump-dom", "file://" + html_path],
        capture_output=True, text=True, timeout=180,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_report_renders_in_headless_chromium(tmp_path):
    path = tmp_path / "report.html"
    path.write_text(render(_events()), encoding="utf-8")
    dom = dump_dom(str(path), tmp_path)
    assert 'data-rendered="1"' in dom, dom[-3000:]
    assert len(re.findall(r'<svg[^>]*class="chart"', dom)) == 3  # loss scale, grad norm, step time
    assert len(re.findall(r'<path[^>]*class="series"', dom)) == 3
    skipped = re.findall(r'<circle[^>]*class="skipped"[^>]*data-step="(\d+)"', dom)
    assert [int(s) for s in skipped] == list(range(11, 31))
    assert len(re.findall(r'<li class="finding">', dom)) == 2
    assert 'href="#step-18"' in dom and 'href="#step-1"' in dom
    assert "pwned" not in re.search(r"<title>(.*?)</title>", dom).group(1)
    assert "<img" not in dom  # the program's text arrived as text, not markup
    assert "&lt;/script&gt;" in dom


def test_report_is_one_offline_file():
    html = render(_events())
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html
    assert html.count("</script>") == 2  # the data script and the drawing script; the data cannot close either
    assert EVIL not in html


def test_summary_escapes_terminal_control_characters():
    evs = _events()
    evs.append({"type": "finding", "code": "AMP101", "filename": "x\x1b[31m.py", "line": 3, "message": "m\x07", "step": 2, "rank": 0})
    text = summary(evs)
    assert "\x1b" not in text and "\x07" not in text and "x\\x1b[31m.py:3: AMP101" in text
    assert "40 optimizer steps, 20 skipped, loss scale 1024 -> 0.000976562" in text


def test_collapse_detector():
    d = CollapseDetector(steps=8, share=0.25, min_steps=50)
    scale, fired = 65536.0, []
    for step in range(1, 200):  # the usual start: 3 overflows, then a growth overflow every 20 steps
        skipped = step <= 3 or step % 20 == 0
        new = scale / 2 if skipped else scale
        msg = d.feed(step, scale, new, skipped)
        scale = new
        fired.append(msg)
    assert not any(fired)
    d = CollapseDetector(steps=8)
    msgs = [d.feed(s, 2.0 ** (20 - s), 2.0 ** (19 - s), True) for s in range(1, 12)]
    assert msgs[:7] == [None] * 7 and msgs[7] == "loss scale fell on 8 consecutive steps since step 1 (524288 -> 2048)"
    assert msgs[8:] == [None] * 3  # once per run
    d = CollapseDetector(steps=100, share=0.25, min_steps=50)
    msgs = [d.feed(s, 1024.0, 512.0 if s % 3 == 0 else 1024.0, s % 3 == 0) for s in range(1, 60)]
    assert [m for m in msgs if m] == ["16 of 50 steps skipped (32%) since step 3 (1024 -> 1024)"]


def test_explain_amp701(tmp_path):
    res = amplint("--explain", "AMP701", cwd=str(tmp_path))
    assert res.returncode == 0 and res.stdout.startswith("AMP701 loss-scale-collapse (error")
    assert "amp-facts" not in res.stdout


def test_watch_package_imports_no_torch_or_framework():
    code = ("import sys, amplint, amplint.watch, amplint.watch.run, amplint.watch.codes, amplint.watch.findings, "
            "amplint.watch.report, amplint.watch.integrations; amplint.watch.watch; "
            "print(sorted(m for m in ('torch', 'lightning', 'pytorch_lightning', 'transformers', 'libcst') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_subcommand_table_leaves_linting_alone(tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n")
    res = amplint(str(tmp_path / "ok.py"), "--isolated", cwd=str(tmp_path))
    assert res.returncode == 0
    from amplint._start import SUBCOMMANDS

    assert set(SUBCOMMANDS) == {"run", "replay"}
