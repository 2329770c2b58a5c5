"""`amplint server` against a hostile or broken client (issue 24 item 8).

A raw stdio client (no LSP library between it and the server) sends what an editor
never should: a 30 MB document, frames that are not JSON, JSON that is not a message.
The server answers each with its JSON-RPC error, logs no traceback, caps the document it
lints, and answers `shutdown` (and leaves on `exit`) within a second whatever it is doing.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

import pytest

pytest.importorskip("pygls")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: generous for a shared 2-core machine; the bound the server keeps itself is one second
ANSWER_S = 5.0

DENSE = "s{i} = scores.masked_fill(scores > k, -1e9) if k else scores @ scores.t()\n"


class Client:
    def __init__(self, cwd: str) -> None:
        env = dict(os.environ, PYTHONPATH=ROOT)
        self.proc = subprocess.Popen([sys.executable, "-m", "amplint._start", "server"], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.buffer = b""
        self.seen: List[Dict[str, Any]] = []

    def send(self, obj: Any) -> None:
        body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def request(self, msg_id: int, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, **({"params": params} if params is not None else {})})

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})})

    def _frame(self) -> Optional[Dict[str, Any]]:
        head, sep, rest = self.buffer.partition(b"\r\n\r\n")
        if not sep:
            return None
        length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")][0].split(b":")[1])
        if len(rest) < length:
            return None
        self.buffer = rest[length:]
        return json.loads(rest[:length])

    def wait_for(self, match, seconds: float) -> Optional[Dict[str, Any]]:
        """The first message (already seen or arriving within `seconds`) that `match` accepts."""
        for message in self.seen:
            if match(message):
                return message
        deadline = time.monotonic() + seconds
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while True:
            while True:
                message = self._frame()
                if message is None:
                    break
                self.seen.append(message)
                if match(message):
                    return message
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    return None
                self.buffer += chunk

    def initialize(self, root: str) -> None:
        self.request(1, "initialize", {"processId": None, "rootUri": f"file://{root}", "capabilities": {}})
        assert self.wait_for(lambda m: m.get("id") == 1, 60), "no initialize response"
        self.notify("initialized", {})

    def close(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        _, err = self.proc.communicate(timeout=30)
        return err.decode("utf-8", "replace")


def _open(client: Client, path: str, text: str, version: int = 1) -> None:
    client.notify("textDocument/didOpen", {"textDocument": {"uri": f"file://{path}", "languageId": "python", "version": version, "text": text}})


def test_malformed_frames_get_json_rpc_errors_and_no_traceback(tmp_path):
    client = Client(str(tmp_path))
    try:
        client.initialize(str(tmp_path))
        client.send(b"{not json")
        client.send(b"[" * 50_000)
        client.send(b"\xff\xfe")
        client.send(b'"a string"')
        client.send(b'[{"jsonrpc": "2.0", "id": 5, "method": "shutdown"}]')
        client.send({"jsonrpc": "2.0", "id": 8})
        client.send({"jsonrpc": "2.0", "id": 9, "method": 42})
        client.send({"id": 10, "method": "textDocument/hover", "params": {}})
        client.request(11, "textDocument/hover", {"bogus": 1})
        errors = [client.wait_for(lambda m, i=i: m.get("error") and m.get("id") == i, ANSWER_S) for i in (8, 9, 10, 11)]
        assert [e["error"]["code"] for e in errors if e] == [-32600, -32600, -32600, -32602], errors
        client.request(12, "shutdown")
        assert client.wait_for(lambda m: m.get("id") == 12 and "result" in m, ANSWER_S), "no shutdown answer"
        nulls = [m for m in client.seen if m.get("id") is None and m.get("error")]
        assert [m["error"]["code"] for m in nulls] == [-32700, -32700, -32700, -32600, -32600], nulls
        assert not [m for m in client.seen if m.get("method") == "window/showMessage"], client.seen
        client.notify("exit")
        assert client.proc.wait(timeout=ANSWER_S) == 0
    finally:
        err = client.close()
    assert "Traceback" not in err, err
    assert all(line.startswith("amplint server: ") for line in err.splitlines()), err


def test_a_30_mb_document_is_capped_and_shutdown_answers_at_once(tmp_path):
    """A document over the cap gets one AMP000 line; one under it but big is linted away from
    the event loop; `shutdown` and `exit` are answered while that lint runs."""
    huge = "".join(DENSE.format(i=i) for i in range(400_000))  # ~30 MB
    big = "import torch\nscores = torch.randn(4, 4).half()\n" + "".join(DENSE.format(i=i) for i in range(20_000))  # ~1.5 MB
    client = Client(str(tmp_path))
    try:
        client.initialize(str(tmp_path))
        _open(client, str(tmp_path / "huge.py"), huge)
        capped = client.wait_for(lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"].endswith("huge.py"), 60)
        assert capped is not None, "no diagnostics for the 30 MB document"
        [line] = capped["params"]["diagnostics"]
        assert line["code"] == "AMP000" and "not linted in the editor" in line["message"] and "30." in line["message"], line
        _open(client, str(tmp_path / "big.py"), big)
        time.sleep(1.0)  # its lint has started (seconds of parsing, elsewhere)
        asked = time.monotonic()
        client.request(2, "shutdown")
        answer = client.wait_for(lambda m: m.get("id") == 2, 60)
        answered = time.monotonic() - asked
        assert answer is not None and "result" in answer, answer
        assert answered < ANSWER_S, f"shutdown was answered after {answered:.1f} s"
        client.notify("exit")
        assert client.proc.wait(timeout=ANSWER_S) == 0
    finally:
        err = client.close()
    assert "Traceback" not in err, err
