"""Library loaders whose weights come back fp16: one table, facts only.

A model made fp16 by a library call is trained like one made by `.half()`
(AMP201, AMP302, AMP401), but nothing in the project's own code casts it.
Only loaders whose behaviour is certain from their source are listed, and
only the argument values that decide it; anything decided at run time (a
`device` variable, `"cuda" if available else "cpu"`) is not followed.

* `clip.load(name, device, jit=False)` (OpenAI CLIP): `build_model` runs
  `convert_weights`, which casts Linear/Conv/attention weights to fp16; the
  loader calls `model.float()` only when `str(device) == "cpu"`. So a literal
  CUDA device gives fp16 weights; `"cpu"` gives fp32.
* `open_clip.create_model` / `create_model_and_transforms` /
  `create_model_from_pretrained` with `precision="fp16"` (`convert_weights_to_lp`)
  or `precision="pure_fp16"` (`model.to(dtype=torch.float16)`), on any device;
  the default `precision="fp32"` and "amp" keep fp32 weights.

`docs/rules/AMP201.md` lists the table for users.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

#: qualified name -> (how the model is named in messages, the deciding argument
#: (position or None, keyword), the values that give fp16 weights, what it returns:
#: "model" or "tuple" (the model first))
LOADERS: Dict[str, Tuple[str, Tuple[Optional[int], str], str, str]] = {
    "clip.load": ("clip.load(...)", (1, "device"), "cuda", "tuple"),
    "open_clip.create_model": ("open_clip.create_model(...)", (None, "precision"), "fp16", "model"),
    "open_clip.create_model_and_transforms": ("open_clip.create_model_and_transforms(...)", (None, "precision"), "fp16", "tuple"),
    "open_clip.create_model_from_pretrained": ("open_clip.create_model_from_pretrained(...)", (None, "precision"), "fp16", "tuple"),
}

#: Hugging Face `X.from_pretrained(..., torch_dtype=...)`: fp16 weights when the dtype may be
#: float16 (a literal, or a name the code binds to float16 among other dtypes: a flag's choice).
#: Only AMP201 asks for these (`Project.fp16_modules(pretrained=True)`): a checkpoint of such a
#: model is usually fp16 at the source already (AMP401 stays silent on it)
PRETRAINED = "from_pretrained"
#: how the model such a load returns is named in messages
PRETRAINED_SHOWN = "from_pretrained(...)"

#: the last names of the loaders: call references spelled so keep their row (the cast site)
LAST_NAMES = frozenset(q.rsplit(".", 1)[-1] for q in LOADERS) | {PRETRAINED}


def fp16_weights(qualname: str, ref: Dict[str, Any], first: bool) -> Optional[str]:
    """The model's name when calling loader `qualname` with the arguments of `ref` (a
    summary call reference) certainly returns fp16 weights; `first`: the value is the first
    element of what it returns (`model, preprocess = clip.load(...)`). None otherwise."""
    entry = LOADERS.get(qualname)
    if entry is None:
        return None
    shown, (position, keyword), wanted, returns = entry
    if first != (returns == "tuple"):
        return None  # the tuple itself, or the first element of a model
    arg = ref["k"].get(keyword)
    if arg is None and position is not None and len(ref["a"]) > position:
        arg = ref["a"][position]
    value = _literal(arg)
    if value is None:
        return None
    if wanted == "cuda":
        return shown if value == "cuda" or value.startswith("cuda:") else None
    return shown if value in ("fp16", "pure_fp16") else None


def _literal(arg: Optional[Dict[str, Any]]) -> Optional[str]:
    """`"cuda"` or `torch.device("cuda")` as written; None for anything decided at run time."""
    if not arg:
        return None
    if "s" in arg:
        return str(arg["s"])
    if arg.get("c") == "torch.device" and arg.get("a") and arg["a"][0] and "s" in arg["a"][0] and not arg.get("k"):
        return str(arg["a"][0]["s"])
    return None
