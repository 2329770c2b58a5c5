"""Reading JSON-RPC frames from the editor: every malformed one gets its JSON-RPC error.

pygls' own loop hands each body to `json.loads` with its message classes as the object
hook and logs a traceback (and shows "Error in server") for anything that does not fit:
a body that is not JSON, a JSON value that is not an object, an object with an `id` but
neither `method` nor `result`. This loop (`read_messages`, run by `AmplintServer`) checks
each frame first and answers what is not a message with the error JSON-RPC 2.0 defines,
and logs nothing:

* a body that is not JSON (or nests too deeply to parse): -32700 Parse error, id null;
* JSON that is not a request, a notification or a response: -32600 Invalid Request (its
  `id` when it has a usable one, else null);
* a frame longer than `MAX_FRAME` bytes: read past in chunks (never held), -32600, id null;
* params that do not fit the method: -32602 Invalid Params (`lsp.Protocol`).

pygls' loggers write one line per record at most, never a traceback (`quiet_logs`).
"""
from __future__ import annotations

import json
import logging
import re
import sys
from typing import Any, Optional

from pygls.exceptions import JsonRpcException

#: the most bytes one frame may hold (a bigger one is skipped, not read into memory)
MAX_FRAME = 64 << 20
_CHUNK = 1 << 20
_LENGTH = re.compile(rb"^Content-Length: *(\d+)\r?\n$", re.IGNORECASE)

PARSE_ERROR, INVALID_REQUEST = -32700, -32600


def _usable_id(value: Any) -> bool:
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def problem(data: Any) -> Optional[str]:
    """Why `data` (a parsed body) is not a JSON-RPC 2.0 message; None when it is one."""
    if not isinstance(data, dict):
        return "not a JSON object (batches are not part of LSP)"
    if data.get("jsonrpc") != "2.0":
        return 'no "jsonrpc": "2.0"'
    if "method" in data:
        if not isinstance(data["method"], str):
            return '"method" is not a string'
        if "id" in data and not _usable_id(data["id"]):
            return '"id" is not a number or a string'
        if "params" in data and not isinstance(data["params"], (dict, list)):
            return '"params" is not an object or an array'
        return None
    if "id" in data and ("result" in data or "error" in data):
        return None  # a response to a request of ours
    return 'neither a request, a notification nor a response'


def send_error(protocol: Any, msg_id: Any, code: int, message: str) -> None:
    protocol._send_data({"jsonrpc": "2.0", "id": msg_id if _usable_id(msg_id) else None, "error": {"code": code, "message": message}})


async def read_messages(stop_event: Any, reader: Any, protocol: Any) -> None:
    """pygls' `run_async`, with every frame checked before pygls sees it."""
    length: Optional[int] = None
    while not stop_event.is_set():
        header = await reader.readline()
        if not header:
            break
        match = _LENGTH.match(header)
        if match:
            length = int(match.group(1))
            continue
        if header.strip():
            continue  # Content-Type, or a header we do not know
        if length is None:
            continue  # a blank line before any Content-Length: wait for a frame
        size, length = length, None
        if size > MAX_FRAME:
            while size > 0:  # read past it, holding at most one chunk
                chunk = await reader.readexactly(min(size, _CHUNK))
                if not chunk:
                    return
                size -= len(chunk)
            send_error(protocol, None, INVALID_REQUEST, f"Invalid Request: the frame is over {MAX_FRAME >> 20} MB")
            continue
        body = await reader.readexactly(size)
        if len(body) < size:
            break
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            send_error(protocol, None, PARSE_ERROR, "Parse error")
            continue
        why = problem(data)
        if why is not None:
            send_error(protocol, data.get("id") if isinstance(data, dict) else None, INVALID_REQUEST, f"Invalid Request: {why}")
            continue
        try:
            message = protocol.structure_message(data)
        except JsonRpcException:
            continue  # answered already when it was a request (lsp.Protocol); a notification gets none
        except Exception:  # noqa: BLE001 - never a traceback for what the client sent
            if "id" in data and "method" in data:
                send_error(protocol, data["id"], INVALID_REQUEST, "Invalid Request")
            continue
        try:
            protocol.handle_message(message)
        except Exception as exc:  # noqa: BLE001 - a handler's bug: one line, the server goes on
            logging.getLogger("amplint.server").error("could not handle %s: %s: %s", data.get("method"), type(exc).__name__, exc)


class _OneLine(logging.Formatter):
    """A record's first line, without its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage().split("\n", 1)[0]
        return f"amplint server: {record.levelname.lower()}: {text[:300]}"

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return ""


def quiet_logs() -> None:
    """pygls and amplint's server logs: warnings and errors, one line each, on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    for name in ("pygls", "amplint.server"):
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.setLevel(logging.WARNING)
        log.propagate = False
