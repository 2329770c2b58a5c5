#!/usr/bin/env python3
"""Keystroke-to-publish latency of `amplint server` on a 5,000-line file (run by hand; not a test).

    python benchmarks/server_latency.py              # 5,000 lines, 20 keystrokes
    python benchmarks/server_latency.py --lines 20000 --edits 50

Starts `python -m amplint server` as an editor would (stdio, JSON-RPC), opens a
generated training module of --lines lines (many small models and one training
step with an AMP101 finding at the end), then types: each edit inserts a
character in a comment on a line chosen at random (one edit per round, each
round waits for its publishDiagnostics; `--where step`: in the training step). The time from sending the change to
the publish, minus the server's debounce, is the latency a user feels after
they stop typing. Reported: median, p90 and max in ms, and whether the finding
was still published each time (it must be: the edits do not touch it).
Target: median under 200 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODEL = '''

class Block{n}(nn.Module):
    """A small residual block ({n})."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):  # comment {n}
        y = self.norm(self.proj(x))
        return x + torch.relu(y)
'''

STEP = '''

def train_step(model, batch, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch).mean()  # step
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
'''


def make_source(lines: int) -> str:
    parts = ["import torch\nimport torch.nn as nn\n"]
    n = 0
    while sum(p.count("\n") for p in parts) < lines - STEP.count("\n"):
        parts.append(MODEL.format(n=n))
        n += 1
    parts.append(STEP)
    return "".join(parts)


class Client:
    def __init__(self, cwd: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "amplint", "server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd)
        self.next_id = 0

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        while True:
            message = self.receive()
            if message.get("id") == self.next_id:
                return message

    def receive(self) -> dict:
        header = b""
        while not header.endswith(b"\r\n\r\n"):
            byte = self.proc.stdout.read(1)
            if not byte:
                raise SystemExit("the server exited")
            header += byte
        length = int(header.split(b"Content-Length:")[1].split(b"\r\n")[0])
        return json.loads(self.proc.stdout.read(length))

    def publish(self) -> dict:
        while True:
            message = self.receive()
            if message.get("method") == "textDocument/publishDiagnostics":
                return message["params"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--edits", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--where", choices=("model", "step"), default="model", help="type in the models' comments or in the training step's (whose scaler and optimizer the registries hold)")
    args = parser.parse_args()
    from amplint.server.lsp import DEBOUNCE_S

    rng = random.Random(args.seed)
    source = make_source(args.lines)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.py"
        path.write_text(source)
        uri = path.as_uri()
        client = Client(folder)
        client.request("initialize", {"processId": os.getpid(), "rootUri": Path(folder).as_uri(), "capabilities": {}})
        client.send({"method": "initialized", "params": {}})
        start = time.perf_counter()
        client.send({"method": "textDocument/didOpen", "params": {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": source}}})
        first = client.publish()
        open_ms = (time.perf_counter() - start) * 1000
        lines = source.split("\n")
        comment_rows = [i for i, line in enumerate(lines) if ("# comment" if args.where == "model" else "# step") in line]
        latencies, kept = [], 0
        for version in range(2, args.edits + 2):
            row = rng.choice(comment_rows)
            column = len(lines[row])
            lines[row] += "x"
            change = {"range": {"start": {"line": row, "character": column}, "end": {"line": row, "character": column}}, "text": "x"}
            start = time.perf_counter()
            client.send({"method": "textDocument/didChange", "params": {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]}})
            published = client.publish()
            latencies.append((time.perf_counter() - start - DEBOUNCE_S) * 1000)
            kept += any(d["code"] == "AMP101" for d in published["diagnostics"])
        client.request("shutdown", {})
        client.send({"method": "exit"})
        client.proc.wait(timeout=30)
    latencies.sort()
    p90 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.9))]
    print(f"file: {len(source.splitlines())} lines, {len(source) // 1024} KiB; open -> first publish: {open_ms:.0f} ms ({len(first['diagnostics'])} findings)")
    print(f"keystroke -> publish after the {DEBOUNCE_S * 1000:.0f} ms debounce, {len(latencies)} edits: median {statistics.median(latencies):.0f} ms, p90 {p90:.0f} ms, max {latencies[-1]:.0f} ms")
    print(f"AMP101 still published after {kept}/{len(latencies)} edits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
