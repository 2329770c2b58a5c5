"""What a project's own C++/CUDA sources say about the dtypes a compiled kernel takes.

An autograd Function that hands its inputs to a compiled extension (`_C.swap_align2nat_forward`,
`selective_scan_cuda.fwd`, `torch.ops.detectron2.roi_align_rotated_forward`) gets whatever
autocast produced. When the extension's source is in the project, its text tells more than the
Python side can (AMP501, issue 22 shape 11):

- "fp32": every dispatch of the bound function (and of the functions it calls) is
  `AT_DISPATCH_FLOATING_TYPES` (float/double only) or it reads `data_ptr<float>()`, and nothing
  in it names Half or BFloat16: an fp16/bf16 input raises ("not implemented for 'Half'");
- "mixed": one function dispatches the dtypes of two different tensors separately (mamba's
  selective scan: `DISPATCH_ITYPE...(u.scalar_type())` around `DISPATCH_WTYPE...(A.scalar_type())`)
  and half or bf16 is among them: the kernel is instantiated for low-precision activations next
  to fp32 weights, the mix autocast produces.

Text only, never compiled or imported: the binding (`m.def("fwd", &selective_scan_fwd)`, also in
`TORCH_LIBRARY` blocks and `m.impl`), the bound function's body found by its name and matched
braces, the functions it calls that the sources define (three levels). Read when a diagnostic's
condition is resolved (`model/facts.py`), after the cache, and only for AMP501's extension
findings; a project's sources are listed once per process (and again after `_FRESH` seconds)."""
from __future__ import annotations

import os
import re
import time
from typing import Dict, Iterator, List, Optional, Tuple

#: C, C++ and CUDA source and header files
_SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".cu", ".cuh", ".h", ".hpp", ".hxx")
#: folders never searched (build outputs, vendored trees, version control)
_SKIPPED_DIRS = frozenset(("build", "dist", "node_modules", "__pycache__", "third_party", "3rdparty", "site-packages"))
#: limits that keep a big tree cheap: files listed, bytes per file
_MAX_FILES = 4000
_MAX_BYTES = 1 << 20
#: how long a listing of a project's sources is reused (a long-running server sees edits)
_FRESH = 5.0
#: levels of callees followed from the bound function
_DEPTH = 3

_LOW_PRECISION = re.compile(r"\b(?:at::Half|c10::Half|__half|half_t|kHalf|ScalarType::Half|BFloat16|kBFloat16|__nv_bfloat16|_AND_HALF|HALF)\b|_AND2\(|_AND3\(")
_DISPATCH = re.compile(r"\b(\w*DISPATCH\w*)\s*\(\s*([A-Za-z_][\w.\->]*?)\s*(?:\.|->)\s*(?:scalar_type|type)\s*\(\s*\)")
_FLOAT_READ = re.compile(r"\b(?:data_ptr|data|mutable_data_ptr|const_data_ptr)\s*<\s*float\s*>\s*\(")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;(){}]*>)?\s*\(")
_NOT_CALLEES = frozenset(("if", "for", "while", "switch", "return", "sizeof", "catch", "TORCH_CHECK", "AT_ASSERTM"))

_listings: Dict[str, Tuple[float, List[str]]] = {}
_texts: Dict[Tuple[str, int, int], str] = {}
_verdicts: Dict[Tuple[str, str, int], Optional[str]] = {}


def kernel_dtypes(name: str, filename: Optional[str], root: Optional[str] = None) -> Optional[str]:
    """"fp32" | "mixed" | None for the kernel the project's sources bind to the Python name `name`
    (the attribute called: `fwd`, `deform_conv_forward`); None when no source binds it, when the
    bindings disagree, or when the text says nothing certain."""
    base = _project_root(filename, root)
    if base is None or not re.fullmatch(r"\w+", name):
        return None
    listing = _listing(base)
    key = (base, name, id(listing))
    if key not in _verdicts:
        _verdicts[key] = _kernel_dtypes(name, listing)
    return _verdicts[key]


def _kernel_dtypes(name: str, listing: List[str]) -> Optional[str]:
    sources = [t for t in (_text(p) for p in listing) if t]
    binding = re.compile(r"\.\s*(?:def|impl)\s*\(\s*\"(?:\w+::)?" + name + r"(?:\"|\()[^,]*,\s*(?:TORCH_FN\s*\()?\s*&?\s*([A-Za-z_][\w:]*)")
    bound = {m.group(1) for text in sources if name in text for m in binding.finditer(text)}
    verdicts = {_classify(fn.rsplit("::", 1)[-1], sources) for fn in bound}
    return verdicts.pop() if len(verdicts) == 1 else None


def _classify(function: str, sources: List[str]) -> Optional[str]:
    bodies = list(_closure(function, sources))
    if not bodies:
        return None
    text = "\n".join(bodies)
    low = bool(_LOW_PRECISION.search(text))
    for body in bodies:
        subjects = {m.group(2) for m in _DISPATCH.finditer(body)}
        if len(subjects) >= 2 and low:
            return "mixed"
    if low:
        return None
    dispatches = [m.group(1) for m in _DISPATCH.finditer(text)]
    if dispatches and all(d == "AT_DISPATCH_FLOATING_TYPES" for d in dispatches):
        return "fp32"
    if not dispatches and _FLOAT_READ.search(text):
        return "fp32"
    return None


def _closure(function: str, sources: List[str]) -> Iterator[str]:
    """The bodies of `function` and of the functions it calls that the sources define."""
    seen = set()
    todo = [(function, 0)]
    while todo:
        fn, depth = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        for body in _bodies(fn, sources):
            yield body
            if depth < _DEPTH:
                todo.extend((c, depth + 1) for c in set(_CALLED.findall(body)) - _NOT_CALLEES - seen)


def _bodies(function: str, sources: List[str]) -> Iterator[str]:
    """The `{...}` of each definition of `function` (a name followed by its parameters and a brace)."""
    call = re.compile(r"\b" + re.escape(function) + r"\s*\(")
    for text in sources:
        if function not in text:
            continue
        for m in call.finditer(text):
            close = _match(text, m.end() - 1, "(", ")")
            if close is None:
                continue
            after = re.match(r"\s*(?:const\s*|noexcept\s*|override\s*)*(?:->\s*[\w:<>, ]+\s*)?\{", text[close + 1 :])
            if after is None:
                continue
            start = close + after.end()
            end = _match(text, start - 1, "{", "}")
            if end is not None:
                yield text[start:end]


def _match(text: str, at: int, opening: str, closing: str) -> Optional[int]:
    """Index of the bracket closing the one at `at` (strings and comments not told apart: the
    bodies of kernels rarely hold unbalanced brackets in them)."""
    depth = 0
    for i in range(at, min(len(text), at + 200_000)):
        c = text[i]
        if c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return i
    return None


def _project_root(filename: Optional[str], root: Optional[str]) -> Optional[str]:
    if root:
        return os.path.abspath(root)
    if not filename or not os.path.isfile(filename):
        return None  # a text linted on its own (`lint_source`, stdin): no project to read
    folder = os.path.dirname(os.path.abspath(filename))
    here = folder
    for _ in range(8):
        if any(os.path.exists(os.path.join(here, marker)) for marker in ("setup.py", "pyproject.toml", "setup.cfg", ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return folder


def _listing(base: str) -> List[str]:
    now = time.monotonic()
    cached = _listings.get(base)
    if cached is not None and now - cached[0] < _FRESH:
        return cached[1]
    found: List[str] = []
    stack = [base]
    while stack and len(found) < _MAX_FILES:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in _SKIPPED_DIRS:
                        stack.append(entry.path)
                elif entry.name.endswith(_SOURCE_SUFFIXES) and entry.is_file(follow_symlinks=False):
                    found.append(entry.path)
            except OSError:
                continue
    _listings[base] = (now, found)
    return found


def _text(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return ""
    key = (path, st.st_mtime_ns, st.st_size)
    text = _texts.get(key)
    if text is None:
        if st.st_size > _MAX_BYTES:
            text = ""
        else:
            try:
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8", "replace")
            except OSError:
                text = ""
        _texts[key] = text
    return text
