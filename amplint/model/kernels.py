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
  to fp32 weights, the mix autocast produces. A tensor whose dtype the function requires to be
  float32 (`AT_ASSERTM(num_positives_sum.scalar_type() == at::kFloat, ...)`, NVIDIA's fused focal
  loss, next to `AT_DISPATCH_FLOATING_TYPES_AND_HALF(cls_output.scalar_type(), ...)`) counts as
  one dispatched separately: the kernel takes low-precision activations next to an fp32 tensor.

Text only, never compiled or imported: the binding (`m.def("fwd", &selective_scan_fwd)`, also in
`TORCH_LIBRARY` blocks and `m.impl`), the bound function's body found by its name and matched
braces, the functions it calls that the sources define (three levels). Read when a diagnostic's
condition is resolved (`model/facts.py`), after the cache, and only for AMP501's extension
findings (`model/texts.py` lists and reads the files)."""
from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional, Tuple

from .texts import project_files, project_root, read_text

#: C, C++ and CUDA source and header files
_SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".cu", ".cuh", ".h", ".hpp", ".hxx")
#: levels of callees followed from the bound function
_DEPTH = 3

_LOW_PRECISION = re.compile(r"\b(?:at::Half|c10::Half|__half|half_t|kHalf|ScalarType::Half|BFloat16|kBFloat16|__nv_bfloat16|HALF)\b|_AND_HALF\b|_AND2\(|_AND3\(")
_DISPATCH = re.compile(r"\b(\w*DISPATCH\w*)\s*\(\s*([A-Za-z_][\w.\->]*?)\s*(?:\.|->)\s*(?:scalar_type|type)\s*\(\s*\)")
#: a tensor whose dtype is required to be float32 (`x.scalar_type() == at::kFloat`, either way round)
_FP32 = r"(?:(?:at|c10|torch)::)?(?:ScalarType::)?(?:kFloat32|kFloat|Float)\b"
_TENSOR_DTYPE = r"([A-Za-z_][\w.\->]*?)\s*(?:\.|->)\s*(?:scalar_type|dtype)\s*\(\s*\)"
_FP32_CHECK = re.compile(_TENSOR_DTYPE + r"\s*==\s*" + _FP32 + "|" + _FP32 + r"\s*==\s*" + _TENSOR_DTYPE)
_FLOAT_READ = re.compile(r"\b(?:data_ptr|data|mutable_data_ptr|const_data_ptr)\s*<\s*float\s*>\s*\(")
_CALLED = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;(){}]*>)?\s*\(")
_NOT_CALLEES = frozenset(("if", "for", "while", "switch", "return", "sizeof", "catch", "TORCH_CHECK", "AT_ASSERTM"))

_verdicts: Dict[Tuple[str, str, int], Optional[str]] = {}


def kernel_dtypes(name: str, filename: Optional[str], root: Optional[str] = None) -> Optional[str]:
    """"fp32" | "mixed" | None for the kernel the project's sources bind to the Python name `name`
    (the attribute called: `fwd`, `deform_conv_forward`); None when no source binds it, when the
    bindings disagree, or when the text says nothing certain."""
    base = project_root(filename, root)
    if base is None or not re.fullmatch(r"\w+", name):
        return None
    listing = project_files(base, _SOURCE_SUFFIXES)
    key = (base, name, id(listing))
    if key not in _verdicts:
        _verdicts[key] = _kernel_dtypes(name, listing)
    return _verdicts[key]


def _kernel_dtypes(name: str, listing: List[str]) -> Optional[str]:
    sources = [t for t in (read_text(p) for p in listing) if t]
    if not any(name in t for t in sources):
        return None
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
        dispatched = {m.group(2) for m in _DISPATCH.finditer(body)}
        fixed = {m.group(1) or m.group(2) for m in _FP32_CHECK.finditer(body)}
        free = dispatched - fixed  # dispatched, and not itself required to be float32
        if low and free and len(free | fixed) >= 2:
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
        if function not in text or not _defines(text, function):
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


#: a line that may start a definition: a name, its parameters (maybe over several lines), a brace
_DEFINITION = re.compile(r"\b([A-Za-z_]\w*)\s*\((?:[^;{}()]|\([^;{}()]*\))*\)\s*(?:const\s*|noexcept\s*|override\s*)*(?:->\s*[\w:<>, ]+\s*)?\{")
_definitions: Dict[int, Tuple[str, frozenset]] = {}


def _defines(text: str, function: str) -> bool:
    """Whether `text` may define `function` (the names one regex pass finds before a body)."""
    entry = _definitions.get(id(text))
    if entry is None or entry[0] is not text:  # (an id is reused once its text is gone)
        if len(_definitions) > 20000:
            _definitions.clear()
        entry = _definitions[id(text)] = (text, frozenset(m.group(1) for m in _DEFINITION.finditer(text)))
    return function in entry[1]


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


