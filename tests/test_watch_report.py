"""report.html rendered by headless Chromium, the stderr summary, the AMP701 detector,
and the lint path staying free of torch -- all without training anything."""
from __future__ import annotations

import math
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


def _events(n=40, skipped=range(11, 31), ranks=(0,)):
    evs = []
    for rank in ranks:
        evs.append({"type": "header", "torch": "2.13.0", "cuda": None, "device": "cpu", "capability": None, "autocast_dtype": "float16",
                    "argv": ["train.py", "--lr", "3e-4"], "grad_norm": True, "rank": rank})
        scale = 1024.0
        for i in range(1, n + 1):
            before = scale
            if i in skipped:
                scale /= 2
            evs.append({"type": "step", "step": i, "loss_scale_before": before, "loss_scale": scale, "skipped": i in skipped,
                        "grad_norm": None if i in skipped else 1.0 + i / 10 + rank, "step_time_s": None if i == 1 else 0.01 + (i % 3) / 1000,
                        "peak_mem_bytes": None, "rank": rank})
    evs.append({"type": "finding", "code": "AMP701", "filename": f"train{EVIL}.py", "line": 7, "message": f"scale fell {EVIL}", "step": 18, "rank": 0})
    evs.append({"type": "finding", "code": "AMP101", "filename": "train.py", "line": 9, "message": "clip on scaled grads: call `scaler.unscale_(opt)` first",
                "step": 1, "rank": 0})
    evs.append({"type": "finding", "code": "AMP402", "filename": "train.py", "line": 30, "message": "checkpoint without the scaler", "step": n,
                "after": True, "rank": 0})
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


def _browser(tmp_path, *args):
    out = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def dump_dom(html_path: str, tmp_path, fragment: str = "") -> str:
    return _browser(tmp_path, "--dump-dom", "file://" + html_path + fragment).stdout


def _page(tmp_path, events):
    path = tmp_path / "report.html"
    path.write_text(render(events), encoding="utf-8")
    return path


def _chart(dom, key):
    m = re.search(rf'<svg[^>]*data-key="{key}".*?</svg>', dom, re.S)
    assert m, f"no {key} chart"
    return m.group(0)


def test_report_renders_in_headless_chromium(tmp_path):
    dom = dump_dom(str(_page(tmp_path, _events())), tmp_path)
    assert 'data-rendered="1"' in dom, dom[-3000:]
    assert len(re.findall(r'<svg[^>]*class="chart"', dom)) == 3  # loss scale, grad norm, step time
    assert len(re.findall(r'<path[^>]*class="series"', dom)) == 3
    skipped = re.findall(r'<circle[^>]*class="skipped"[^>]*data-step="(\d+)"', dom)
    assert [int(s) for s in skipped] == list(range(11, 31))
    assert len(re.findall(r'<li class="finding">', dom)) == 3
    assert 'href="#step-18"' in dom and 'href="#step-1"' in dom
    assert "pwned" not in re.search(r"<title>(.*?)</title>", dom).group(1)
    assert "<img" not in dom  # the program's text arrived as text, not markup
    assert "&lt;/script&gt;" in dom


def test_every_chart_has_ticks_gridlines_skipped_steps_and_findings(tmp_path):
    dom = dump_dom(str(_page(tmp_path, _events())), tmp_path)
    for key in ("scale", "norm", "time"):
        chart = _chart(dom, key)
        x = [int(t) for t in re.findall(r'data-axis="x"[^>]*>(\d+)</text>', chart)]
        assert len(x) >= 5 and x == sorted(x) and x[-1] == 40, (key, x)
        assert len(re.findall(r'data-axis="y"', chart)) >= 3, key
        assert len(re.findall(r'class="grid"', chart)) >= 8, key
        assert [int(s) for s in re.findall(r'class="skip" data-step="(\d+)"', chart)] == list(range(11, 31)), key
        assert re.findall(r'class="finding" data-step="(\d+)" data-code="(\w+)"', chart) == [("1", "AMP101"), ("18", "AMP701"), ("40", "AMP402")]
    # log2 ticks on the loss scale: powers of two, from the scale the first step ran with (1024)
    ticks = re.findall(r'data-axis="y"[^>]*>([^<]+)</text>', _chart(dom, "scale"))
    assert "1024" in ticks and all(abs(math.log2(float(t)) - round(math.log2(float(t)))) < 0.01 for t in ticks), ticks


def test_a_series_without_values_says_why(tmp_path):
    evs = [e for e in _events() if e["type"] != "step" or e["step"] <= 1]  # one step: no step time
    for e in evs:
        if e["type"] == "step":
            e["loss_scale"] = e["loss_scale_before"] = None
    dom = dump_dom(str(_page(tmp_path, evs)), tmp_path)
    assert "no data: no enabled GradScaler stepped the optimizer: the run trained without loss scaling" in dom
    assert "no data: a step's time is measured from the step before it: the run had one step" in dom
    assert "no data: not readable on this platform" in dom
    assert re.search(r'<svg[^>]*data-key="norm"', dom) and not re.search(r'<svg[^>]*data-key="scale"', dom)
    partial = dump_dom(str(_page(tmp_path, _events())), tmp_path)
    assert "20 of 40 steps have no value: skipped steps have non-finite gradients, so no norm" in partial


def test_per_rank_series_and_the_header_numbers_are_the_summarys(tmp_path):
    evs = _events(ranks=(0, 1))
    dom = dump_dom(str(_page(tmp_path, evs)), tmp_path)
    for key in ("scale", "norm", "time"):
        assert re.findall(r'class="series" data-rank="(\d)"', _chart(dom, key)) == ["0", "1"], key
    assert dom.count("rank 1</span>") == 3  # a legend on each chart
    text = summary(evs)
    for rank in (0, 1):
        assert f"amplint run (rank {rank}): 40 optimizer steps, 20 skipped, loss scale 1024 -> 0.000976562" in text
    assert dom.count("1024 \u2192 0.000976562") == 2 and "optimizer steps (rank 1)" in dom
    assert "(after step 40)" in text


def test_findings_read_as_text_with_code_and_say_when(tmp_path):
    dom = dump_dom(str(_page(tmp_path, _events())), tmp_path)
    findings = re.search(r'<ul id="findings">(.*?)</ul>', dom, re.S).group(1)
    assert "<code>scaler.unscale_(opt)</code>" in findings and "`" not in findings  # markdown spans as code, not backticks
    assert re.search(r'<a href="#step-40">after step 40</a>', findings)  # a save after the loop: no step 41
    assert "first non-finite: forward output of <code>" in dom


def test_a_step_link_shows_the_values_of_that_step(tmp_path):
    dom = dump_dom(str(_page(tmp_path, _events())), tmp_path, "#step-18")
    tip = re.search(r'<div id="tip"[^>]*data-step="18"[^>]*>(.*?)</div>\s*<script', dom, re.S)
    assert tip, dom[-3000:]
    text = re.sub(r"<[^>]+>", " ", tip.group(1))
    assert "step 18" in text and "skipped" in text
    assert "loss scale 8 \u2192 4" in text  # the scale step 18 ran with, and what its update left (1024 halved on 11..18)
    assert "AMP701" in text
    assert len(re.findall(r'class="marker" data-step="18"', dom)) == 3  # marked on every chart
    assert len(re.findall(r'class="cursor"', dom)) == 3


def _png_pixels(data: bytes):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB/RGBA, non-interlaced PNG (what
    Chromium writes)."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunks.setdefault(kind, []).append(data[pos + 8:pos + 8 + length])
        pos += 12 + length
    width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"][0])
    assert depth == 8 and ctype in (2, 6) and interlace == 0
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(b"".join(chunks[b"IDAT"]))
    stride, rows, prev = width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def test_screenshot_shows_the_curves_the_skipped_steps_and_the_finding_markers(tmp_path):
    """What a person sees: the page drawn to pixels in headless Chromium holds the series'
    blue, the skipped steps' red and the findings' amber, inside the charts."""
    path = _page(tmp_path, _events())
    shot = tmp_path / "report.png"
    _browser(tmp_path, "--window-size=1100,1500", f"--screenshot={shot}", "file://" + str(path))
    width, height, rows = _png_pixels(shot.read_bytes())
    assert (width, height) == (1100, 1500)

    def near(rgb, target, tol=40):
        return all(abs(a - b) <= tol for a, b in zip(rgb, target))

    counts = {name: 0 for name in ("series", "skipped", "finding")}
    targets = {"series": (37, 99, 235), "skipped": (220, 38, 38), "finding": (217, 119, 6)}
    for row in rows[150:1400]:
        for rgb in row:
            for name, target in targets.items():
                if near(rgb, target):
                    counts[name] += 1
    assert counts["series"] > 400 and counts["skipped"] > 300 and counts["finding"] > 300, counts
    background = sum(1 for row in rows[::10] for rgb in row[::10] if rgb == (255, 255, 255) or rgb == (248, 250, 252))
    assert background > 0.5 * (len(rows[::10]) * len(rows[0][::10]))  # a page, not a blank or an error screen


def test_report_is_one_offline_file():
    html = render(_events())
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html
    assert html.count("</script>") == 2  # the data script and the drawing script; the data cannot close either
    assert EVIL not in html


def test_a_model_that_is_a_sequential_names_its_modules_by_their_path():
    torch = pytest.importorskip("torch")
    from amplint.watch.sources import module_names

    inner = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), inner)
    names = module_names(model.modules())
    assert [names[id(m)] for m in (model, model[0], inner, inner[0])] == ["Sequential", "Sequential[0]", "Sequential[2]", "Sequential[2][0]"]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(2, 2))

    net = Net()
    names = module_names(net.modules())
    assert names[id(net.body[0])] == "body.0"  # torch's own path below a named root (get_submodule takes it)


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

    assert set(SUBCOMMANDS) == {"run", "replay", "server"}
