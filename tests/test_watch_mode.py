"""`amplint --watch`: started on a folder, it reports, then reports again when a
file changes, and stops on Ctrl-C."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("watchfiles")

CLIP = (
    'import torch\nscaler = torch.amp.GradScaler("cuda")\nscaler.scale(loss).backward()\n'
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\nscaler.update()\n"
)


#: how long a step of the test may take before it counts as hung: a lint of two small files or
#: an exit after Ctrl-C takes seconds, but minutes on a machine loaded by other work
WORK_BUDGET = 600


def _lines(proc: subprocess.Popen) -> "queue.Queue[str]":
    out: "queue.Queue[str]" = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            out.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return out


def _until(lines: "queue.Queue[str]", text: str, seen: list, limit: float = WORK_BUDGET) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"{text!r} never came; got {''.join(seen)!r}")


def test_watch_reports_again_after_a_file_changes_and_stops_on_ctrl_c(tmp_path):
    (tmp_path / "clean.py").write_text("x = 1\n")
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "amplint", "--watch", "--no-cache", "--isolated", "--output-format", "concise", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        # Ctrl-C as a terminal delivers it: a suite started in the background (`nohup ... &`, some CI
        # shells) ignores SIGINT, children inherit that, and --watch would rightly not hear it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        lines = _lines(proc)
        first: list = []
        _until(lines, "Watching for file changes", first)
        assert not any("AMP101" in line for line in first)
        # the watcher starts just after that line is printed: write again (every few seconds, a
        # pace, not a limit) until a new report comes; a loaded machine only makes it slower
        second: list = []
        deadline = time.monotonic() + WORK_BUDGET
        while True:
            (tmp_path / "train.py").write_text(CLIP)
            try:
                _until(lines, "Watching for file changes", second, limit=3)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"no new report after the file changed; got {''.join(second)!r}") from None
        assert any("train.py:4:1: AMP101" in line for line in second), second
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=WORK_BUDGET) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_watch_refuses_stdin_and_fix(tmp_path):
    for extra in (["-"], ["--fix", str(tmp_path)]):
        done = subprocess.run([sys.executable, "-m", "amplint", "--watch", *extra], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 2 and "--watch" in done.stderr
