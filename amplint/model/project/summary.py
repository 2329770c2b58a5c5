"""One file's summary for the project-wide AMP model: plain JSON-able data.

The project model (`graph.py`) never holds a syntax tree: it reads, for each
file it needs, what the file defines (functions, classes and the attributes
their methods bind), imports (relative ones too), calls (with the arguments
passed, and the autocast region each call sits in) and what it does that
matters to AMP (autocast regions, framework precision settings, casts to
low precision). Summaries are cached by content hash like other per-file
results, so a run over one changed file reuses the other files' summaries.

Built with Python's own `ast` (C parser, several times cheaper than libcst):
the project model parses only the files a question leads it to, and those
are mostly files no rule needed to parse. Spellings are kept as dotted text
(`self.head`, `F.binary_cross_entropy`); `graph.py` resolves them through
the imports, so the summary depends on nothing but the file's own text.
"""
from __future__ import annotations

import ast
import sys
from typing import Any, Dict, List, Optional, Tuple

from .. import torchapi
from ..precision_names import CONFIG_KEYS, FP16_TEXT, lightning_autocast_dtype
from ...core.gates import overflowing_literal_site
from ...core.pyast import parse
from . import disabled, loaders, masks, trained, upcasts
from .astutil import dotted, import_bindings as _import_bindings, number as _number, walk_expression as _walk_expression

#: bump when the shape of a summary changes (it is part of the cache key)
VERSION = 17

#: methods that return the module they are called on (`Net().cuda().half()`)
_MODULE_KEEPING = frozenset(("cuda", "cpu", "to", "train", "eval", "half", "float", "bfloat16", "requires_grad_", "type", "xpu", "double"))
_LIGHTNING_TRAINERS = frozenset(
    ("lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer", "lightning.pytorch.trainer.Trainer", "pytorch_lightning.trainer.Trainer")
)
_ACCELERATORS = frozenset(("accelerate.Accelerator", "accelerate.accelerator.Accelerator"))
#: Accelerator keywords whose plugins take loss scaling away from accelerate's own GradScaler
_ACCELERATE_PLUGINS = ("deepspeed_plugin", "fsdp_plugin", "megatron_lm_plugin")
_HF_ARGS = frozenset(
    ("transformers.TrainingArguments", "transformers.Seq2SeqTrainingArguments", "transformers.training_args.TrainingArguments")
)
#: star imports from these never bring a project name, nor `torch`
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))
#: how many names an annotation (`Union[DDP, Model]`) is kept with
_MAX_DECLARED = 4


def summarize(source: str) -> Optional[Dict[str, Any]]:
    """The summary of one Python text; None when it does not parse."""
    tree = parse(source)
    return _Summarizer(source).run(tree) if tree is not None else None




def import_reader(source: str, tree: ast.Module) -> "_Summarizer":
    """A summarizer that has read only the file's imports: what its spellings name (`qualname`,
    `dtype`), for `autocast_arguments` elsewhere (`entries.py`)."""
    reader = _Summarizer(source)
    reader._collect_imports(tree)
    return reader


class _Summarizer:
    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines()
        #: AMP301's text gate: whether any big constant sits where a mask site can be
        self.overflows = overflowing_literal_site(source)
        #: whether the file may open `autocast(enabled=False)` (AMP204's helper end)
        self.disables = "enabled" in source and "False" in source
        self.loops = 0  # loop bodies around the statement being read, in its function
        self.loop_row = 0  # the row of the outermost of them (calls in one loop repeat together)
        self.branches = 0  # if/else bodies around it
        self.imports: Dict[str, List[Any]] = {}
        #: `from .layers import *`: (level, module) in source order
        self.stars: List[List[Any]] = []
        #: the module's literal `__all__` (None: none, or not a literal list of names)
        self.exported: Optional[List[str]] = None
        self.classes: Dict[str, Dict[str, Any]] = {}
        self.functions: Dict[str, Dict[str, Any]] = {}
        self.regions: List[Dict[str, Any]] = []
        self.frameworks: List[Dict[str, Any]] = []
        #: Lightning Trainers that may autocast bf16 on the CPU by a choice (AMP002 across files)
        self.cpu_trainers: List[Dict[str, Any]] = []
        #: per function: its parameters a click option decorating it lets be "cpu" (parameter -> flag)
        self.cpu_params: Dict[str, Dict[str, str]] = {}
        #: every `Accelerator(...)` bound to a name, with what decides its scaler (`accelerator_record`)
        self.accelerators: List[Dict[str, Any]] = []
        #: per function: (name, value) of its plain assignments so far, in order (mask sites read them)
        self.history: Dict[str, masks.History] = {}
        self.region_now = -1  # the autocast region of the statement being read
        self.qual_now = "<module>"  # the function of the statement being read
        self.aware: Dict[str, bool] = {}  # per function: it tests a dtype (its constants are dtype-aware)
        #: whether the file may hand modules' parameters around (`trained.parameter_flows`, AMP201)
        self.parameters = "param" in source
        #: whether the file spells an fp32 cast (`upcasts.sites`, AMP203 across files)
        self.upcasts = bool(upcasts.CAST_TEXT.search(source))

    # ------------------------------------------------------------------ driver

    def run(self, tree: ast.Module) -> Dict[str, Any]:
        self._collect_imports(tree)
        self._function("<module>", tree.body, None, [], 1, -1, [])
        out = {
            "v": VERSION,
            "imports": self.imports,
            "classes": self.classes,
            "functions": self.functions,
            "regions": self.regions,
            "frameworks": self.frameworks,
        }
        if self.accelerators:
            out["acc"] = self.accelerators
        if self.cpu_trainers:
            out["lcpu"] = self.cpu_trainers
        if "add_argument" in self.source and "choices" in self.source:
            found = argparse_options(tree)
            if found:
                out["opts"] = found
        if self.stars:
            out["stars"] = self.stars
        settings = config_settings(tree)
        if settings:
            out["cfg"] = settings
        if self.exported is not None:
            out["all"] = self.exported
        if self._scales_only_bf16():
            out["b16"] = 1
        return out

    def _scales_only_bf16(self) -> bool:
        """`scalers.scales_only_bf16` as the summary reads it: torch autocast regions that may be
        on, all bf16 (no framework region; of the project's own context managers only a builtin
        `open` is known not to be an autocast), and no fp16 spelled anywhere in the text."""
        regions = [r for r in self.regions if r["enabled"] is not False and r.get("via") != "open"]
        return (
            bool(regions) and all(not r.get("framework") and "via" not in r and r["dtype"] == "bf16" for r in regions)
            and not FP16_TEXT.search(self.source)
        )

    def _collect_imports(self, tree: ast.Module) -> None:
        self.imports, stars = _import_bindings(tree.body)
        for node in stars:
            if node.level or (node.module or "").split(".")[0] not in _STDLIB:
                self.stars.append([node.level or 0, node.module or ""])
        if self.stars and "torch" not in self.imports:
            # as the per-file model reads it (`names.ImportTable.bind_star_torch`): a file that
            # star-imports a module and never imports `torch` has its `torch` from the star
            self.imports["torch"] = [0, "torch", ""]
        for stmt in tree.body:  # `__all__ = ["FocalHead", ...]`: what a star import of this module binds
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets):
                value = stmt.value
                names = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)] if isinstance(value, (ast.List, ast.Tuple)) else None
                self.exported = names if names is not None and len(names) == len(value.elts) else None  # type: ignore[union-attr]

    def qualname(self, text: Optional[str]) -> Optional[str]:
        """The absolute qualified name of a dotted spelling through the imports (None: not imported)."""
        if not text:
            return None
        root, _, rest = text.partition(".")
        target = self.imports.get(root)
        if target is None or target[0]:
            return None
        base = f"{target[1]}.{target[2]}" if target[2] else target[1]
        return f"{base}.{rest}" if rest else base

    # ------------------------------------------------------------------ scopes

    def _function(self, qual: str, body: List[ast.stmt], cls: Optional[str], params: List[str], line: int, region: int, decorators: List[str]) -> None:
        info: Dict[str, Any] = {
            "line": line,
            "cls": cls or "",
            "params": params,
            "decorators": decorators,
            "calls": [],
            "locals": {},
            "returns": [],
            "casts": [],
        }
        self.functions[qual] = info
        self.history[qual] = masks.History()
        self.aware[qual] = masks.dtype_aware(body) if qual != "<module>" and self.overflows else True
        outer = self.loops, self.branches, self.loop_row
        self.loops = self.branches = self.loop_row = 0
        for stmt in body:
            self._statement(stmt, qual, info, cls, region)
        self.loops, self.branches, self.loop_row = outer
        if self.parameters and "dc" in info and qual != "<module>":  # only AMP201's casts to a dtype in a name read them
            info.update(trained.parameter_flows(body, {c[0] for c in info["dc"]}))

    def _statement(self, stmt: ast.stmt, qual: str, info: Dict[str, Any], cls: Optional[str], region: int) -> None:
        self.region_now = region
        self.qual_now = qual
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._def(stmt, qual, cls if qual == "<module>" or cls is None else None, info)
            return
        if isinstance(stmt, ast.ClassDef):
            if qual == "<module>":
                self._class(stmt)
            return
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            inner = region
            for item in stmt.items:
                inner = self._with_item(item.context_expr, stmt.lineno, inner, qual)
                self._expression(item.context_expr, qual, info, region)
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, item.context_expr, info, cls, qual)
            for s in stmt.body:
                self._statement(s, qual, info, cls, inner)
            return
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            value = stmt.value
            if isinstance(stmt, ast.AnnAssign):
                self._declare(stmt.target, stmt.annotation, info, cls, qual)
            if value is not None:
                self._expression(value, qual, info, region)
                self._masks(value, qual, info, region)
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    self._bind(target, value, info, cls, qual)
                    self._framework(value, target, qual)
                    self._store(target, value, info)
            return
        if isinstance(stmt, ast.Return):
            if stmt.value is None:
                info["rn"] = 1  # a bare `return`: the function may give None
            if stmt.value is not None:
                self._expression(stmt.value, qual, info, region)
                self._masks(stmt.value, qual, info, region)
                ref = self.vref(stmt.value)
                if ref is None:
                    ref = self.wref(stmt.value)  # what the other questions evaluate to nothing
                if ref is not None:
                    info["returns"].append(ref)
                elif isinstance(stmt.value, ast.Constant) and stmt.value.value is None:
                    info["rn"] = 1  # `return None`: a helper that may give nothing (a plugin left out)
                    info.setdefault("ro", 1)
                elif isinstance(stmt.value, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in stmt.value.elts):
                    # `return weight_dtype, save_dtype`: each element, for what unpacking it binds (`ue`)
                    info.setdefault("tr", []).append([self.vref(e) for e in stmt.value.elts])
                else:
                    info.setdefault("ro", 1)  # a return of something else: the tuple shape is not certain
            return
        if isinstance(stmt, ast.Expr):
            self._expression(stmt.value, qual, info, region)
            self._masks(stmt.value, qual, info, region)
            self._in_place_cast(stmt.value, info)
            self._appended(stmt.value, info, cls, qual)
            return
        if isinstance(stmt, ast.AugAssign):
            self._expression(stmt.value, qual, info, region)
            self._masks(stmt.value, qual, info, region, target=stmt.target if isinstance(stmt.op, (ast.Add, ast.Sub)) else None)
            return
        # compound statements: their expressions, then their bodies, in the same region
        looping = isinstance(stmt, (ast.For, ast.AsyncFor, ast.While))
        if isinstance(stmt, (ast.For, ast.AsyncFor)) and isinstance(stmt.target, ast.Name):
            container = dotted(stmt.iter)
            if container is not None:  # `for loss in self.losses:`: an element of what was appended
                self._wide_binding(stmt.target.id, {"el": container}, info, cls, qual)
        for name, value in ast.iter_fields(stmt):
            if looping and name == "body":
                if not self.loops:
                    self.loop_row = stmt.lineno
                self.loops += 1
                for v in value:
                    self._statement(v, qual, info, cls, region)
                self.loops -= 1
                continue
            if isinstance(stmt, ast.If) and name in ("body", "orelse"):
                self.branches += 1
                for v in value:
                    self._statement(v, qual, info, cls, region)
                self.branches -= 1
                continue
            if isinstance(value, list):
                for v in value:
                    if isinstance(v, ast.stmt):
                        self._statement(v, qual, info, cls, region)
                    elif isinstance(v, ast.excepthandler):
                        for s in v.body:
                            self._statement(s, qual, info, cls, region)
                    elif isinstance(v, ast.match_case) if hasattr(ast, "match_case") else False:
                        for s in v.body:
                            self._statement(s, qual, info, cls, region)
                    elif isinstance(v, ast.expr):
                        self._expression(v, qual, info, region)
            elif isinstance(value, ast.expr):
                self._expression(value, qual, info, region)

    def _def(self, node: ast.AST, outer: str, cls: Optional[str], outer_info: Dict[str, Any]) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        qual = node.name if outer == "<module>" else f"{outer}.{node.name}"
        if cls is not None and outer != "<module>":
            qual = f"{cls}.{node.name}"
        args = node.args
        params = [a.arg for a in (*getattr(args, "posonlyargs", []), *args.args, *args.kwonlyargs)]
        decorators = []
        region = -1
        for d in node.decorator_list:
            call = d if isinstance(d, ast.Call) else None
            spelled = dotted(call.func if call is not None else d)
            decorators.append(spelled or "")
            if call is not None:
                region = self._region(call, node.lineno, region, via=None)
        cpu = _click_cpu_options(node.decorator_list, params)
        if cpu:
            self.cpu_params[qual] = cpu
        self._function(qual, node.body, cls, params, node.lineno, region, decorators)
        if self.upcasts and region < 0:
            found = upcasts.sites(self, node, node.body)  # AMP203's fp32 casts undone by a caller's autocast
            if found:
                self.functions[qual]["up"] = found
        empty = _empty_defaults(args)
        if empty:
            self.functions[qual]["ed"] = empty  # `accelerate_kwargs: dict = dict()`: empty unless passed
        returned = declared_names(node.returns) if node.returns is not None else []
        if returned:
            self.functions[qual]["rt"] = returned  # `def module_wrapper(m) -> Model`

    def _class(self, node: ast.ClassDef) -> None:
        self.classes[node.name] = {"line": node.lineno, "bases": [dotted(b) or "" for b in node.bases], "attrs": {}}
        decorators = [[dotted(d.func if isinstance(d, ast.Call) else d) or "", d.lineno] for d in node.decorator_list]
        if decorators:
            self.classes[node.name]["dec"] = decorators  # `@MODELS.register_module()`: where it is registered
        if any((d[0] or "").rsplit(".", 1)[-1] == "dataclass" for d in decorators) and not any(
            isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "__init__" for stmt in node.body
        ):
            # `@dataclass class Trainer: fsdp_model: FSDP`: the generated `__init__` binds these
            # fields from the constructor's arguments, in order (the graph reads them at its calls)
            fields = [
                stmt.target.id for stmt in node.body
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and "ClassVar" not in (dotted(stmt.annotation) or "")
            ]
            if fields:
                self.classes[node.name]["df"] = fields
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._def(stmt, node.name, node.name, {})
            elif isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    if isinstance(t, ast.Name):
                        ref = self.vref(stmt.value)
                        if ref is not None:
                            self.classes[node.name]["attrs"].setdefault(t.id, []).append(["<module>", ref])
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                # `pipeline: VanillaPipeline`: a declared attribute (the dispatch view reads it)
                names = declared_names(stmt.annotation)
                if names:
                    self.classes[node.name].setdefault("wa", {}).setdefault(stmt.target.id, []).append(["<module>", {"t": names}])

    # ------------------------------------------------------------------ values

    def vref(self, node: ast.AST) -> Optional[Dict[str, Any]]:
        """What a value is, as far as the project model needs: a name, or the result of a call,
        followed by module-keeping methods (`Net().cuda().half()` -> Net, methods [cuda, half])."""
        methods: List[str] = []
        row = getattr(node, "lineno", 0)
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MODULE_KEEPING:
            methods.append(self._method_tag(node))
            node = node.func.value
        methods.reverse()
        out: Optional[Dict[str, Any]] = None
        if isinstance(node, ast.Call):
            spelled = dotted(node.func)
            if spelled is not None:
                out = {"c": spelled, "a": [self.vref(a) for a in node.args if not isinstance(a, ast.Starred)], "k": {k.arg: self.vref(k.value) for k in node.keywords if k.arg}}
                if spelled.rsplit(".", 1)[-1] == "partial" and node.args:
                    out["p"] = dotted(node.args[0]) or ""
                if spelled.rsplit(".", 1)[-1] in loaders.LAST_NAMES:
                    out["r"] = row  # a library loader's call is where its weights became fp16
                if spelled.rsplit(".", 1)[-1] == "import_module" and node.args:
                    named = self._module_name(node.args[0])
                    if named is not None:  # `import_module("pkg.models." + name)`: the modules it may load
                        out[named[0]] = named[1]
        elif isinstance(node, (ast.Name, ast.Attribute)):
            spelled = dotted(node)
            if spelled is not None:
                out = {"n": spelled}
        elif isinstance(node, ast.Dict):  # a checkpoint: {"model": model.state_dict(), ...}
            out = {"d": {str(k.value): self.vref(v) for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant)}}
            if any(k is None or not isinstance(k, ast.Constant) for k in node.keys):
                out["more"] = 1  # `**extra` or computed keys: more than it shows
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) <= 40:
            out = {"s": node.value}
        else:
            number = _number(node)
            if number is not None:
                out = {"v": number}
        if out is not None and methods:
            out["m"] = methods
            out["mr"] = row
        return out

    def _module_name(self, node: ast.AST, _depth: int = 0) -> Optional[Tuple[str, str]]:
        """What the module name given to `import_module` spells: ("mn", the whole literal name) or
        ("mp", the literal text a computed name starts with: `"pkg.models." + name`,
        `f"pkg.models.{name}"`, `".".join(["pkg.models", family, name])`, a local bound to one)."""
        if _depth > 3:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return ("mn", node.value)
        if isinstance(node, ast.Name):
            history = self.history.get(self.qual_now)
            at = history.last(node.id) if history is not None else None
            return self._module_name(history.entries[at][1], _depth + 1) if at is not None else None
        if isinstance(node, ast.JoinedStr):
            head = ""
            for part in node.values:
                if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                    return ("mp", head) if head else None
                head += part.value
            return ("mn", head)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self._module_name(node.left, _depth + 1)
            if left is None:
                return None
            if left[0] == "mp":
                return left
            right = self._module_name(node.right, _depth + 1)
            return ("mn", left[1] + right[1]) if right is not None and right[0] == "mn" else ("mp", left[1])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            head = node.left.value.split("%", 1)[0]
            return ("mp", head) if head else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Constant):
            text = node.func.value.value
            if not isinstance(text, str):
                return None
            if node.func.attr == "format":
                head = text.split("{", 1)[0]
                return ("mp", head) if head else None
            if node.func.attr == "join" and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple)):
                parts = []
                for element in node.args[0].elts:
                    if not (isinstance(element, ast.Constant) and isinstance(element.value, str)):
                        return ("mp", text.join(parts) + text) if parts else None
                    parts.append(element.value)
                return ("mn", text.join(parts))
        return None

    def wref(self, node: ast.AST) -> Optional[Dict[str, Any]]:
        """`vref`, or what only the project model's dispatch view (`dispatch.py`) reads: an item
        of a name (`MODELS[name]` -> {"i": "MODELS"}), an attribute of what a call gives
        (`LossesFactory().get` -> {"at": "get", "on": ...}) and a call of what a call, an item or
        such an attribute gives (`MODELS.get(name)(cfg)` -> {"cv": ..., "a": ..., "k": ...}). Kept apart from what the
        other questions read (`wl`, `wa`), so they see what they saw before."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MODULE_KEEPING:
            inner = node.func.value  # `get_model(name)(cfg).to(device)`: the module it is called on
            if isinstance(inner, ast.Call) and dotted(inner.func) is None:
                return self.wref(inner)
        if isinstance(node, ast.Subscript):
            base = dotted(node.value)
            return {"i": base} if base is not None else None
        if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Call, ast.Subscript)):
            on = self.vref(node.value) or self.wref(node.value)  # `LossesFactory().get`
            return {"at": node.attr, "on": on} if on is not None else None
        if isinstance(node, ast.Call) and dotted(node.func) is None:
            inner = self.vref(node.func) or self.wref(node.func)
            if inner is None:
                return None
            return {"cv": inner, "a": [self.vref(a) for a in node.args if not isinstance(a, ast.Starred)], "k": {k.arg: self.vref(k.value) for k in node.keywords if k.arg}}
        return None

    def _method_tag(self, call: ast.Call) -> str:
        assert isinstance(call.func, ast.Attribute)
        name = call.func.attr
        if name in ("to", "type"):
            for arg in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]:
                d = self.dtype(arg)
                if d is not None:
                    return f"to:{d}"
        if name == "half":
            return "to:fp16"
        if name == "bfloat16":
            return "to:bf16"
        if name in ("float", "double"):
            return "to:fp32"
        return name

    def dtype(self, node: Optional[ast.AST]) -> Optional[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return torchapi.DTYPE_STRINGS.get(node.value.replace("torch.", ""))
        return torchapi.dtype_of_qualname(self.qualname(dotted(node)))

    def _bind(self, target: ast.AST, value: ast.AST, info: Dict[str, Any], cls: Optional[str], qual: str) -> None:
        if isinstance(value, ast.Lambda):
            self._bind_lambda(target, value, info, cls, qual)
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:  # `q, k, v = self.qkv(x).chunk(3, -1)`: each is made by the value
                if isinstance(t, ast.Name):
                    self.history[qual].add(t.id, value, self.region_now)
            if isinstance(value, ast.Call) and not any(isinstance(t, ast.Starred) for t in target.elts):
                call = self.vref(value)
                if call is not None and "c" in call and "m" not in call:
                    # `weight_dtype, save_dtype = train_util.prepare_dtype(args)`: element i of what it returns
                    for i, t in enumerate(target.elts):
                        if isinstance(t, ast.Name):
                            info.setdefault("ue", {}).setdefault(t.id, []).append([i, call])
            first = target.elts[0] if target.elts else None
            if isinstance(first, ast.Name) and isinstance(value, ast.Call):
                ref = self.vref(value)
                if ref is not None and "r" in ref:  # `model, preprocess = clip.load(...)`: a loader's model
                    info["locals"].setdefault(first.id, []).append({**ref, "e0": 1})
            # `model, opt = accelerator.prepare(model, opt)`: element i is argument i
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "prepare":
                for t, a in zip(target.elts, value.args):
                    self._bind(t, a, info, cls, qual)
            return
        if isinstance(value, (ast.IfExp, ast.BoolOp)):  # `partial(...) if amp else suppress`: either
            for alternative in (value.body, value.orelse) if isinstance(value, ast.IfExp) else value.values:
                self._bind(target, alternative, info, cls, qual)
            return
        name = dotted(target)
        if isinstance(target, ast.Name):
            self.history[qual].add(target.id, value, self.region_now)
            if (
                isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "to"
                and dotted(value.func.value) == target.id and self._method_tag(value) == "to"
            ):
                self._name_cast(value, target.id, info)
        ref = self.vref(value)
        if ref is None:
            ref = self._parameter_list(value)
        if name is None:
            return
        if ref is None:
            wide = self.wref(value)
            if wide is not None:
                self._wide_binding(name, wide, info, cls, qual)
            return
        cast = next((m[3:] for m in ref.get("m", ()) if m in ("to:fp16", "to:bf16")), None)
        if cast is not None and "." in name and ref.get("n", "").split(".")[0] == name.split(".")[0]:
            # `layer.weight.data = layer.weight.data.half()`: `layer` changes in place
            info["casts"].append([name.split(".")[0], cast, getattr(value, "lineno", 0)])
        if cls is not None and name.startswith("self.") and name.count(".") == 1:
            self.classes.setdefault(cls, {"line": 0, "bases": [], "attrs": {}})["attrs"].setdefault(name[5:], []).append([qual, ref])
        elif "." not in name:
            info["locals"].setdefault(name, []).append(ref)

    def _parameter_list(self, value: ast.AST) -> Optional[Dict[str, Any]]:
        """A comprehension that keeps a module's parameters, as `list(model.parameters())`: `[p
        for p in model.parameters() if p.requires_grad]`, `[p for n, p in
        model.named_parameters() if ...]` (one generator, the element its parameter); None else."""
        if not isinstance(value, (ast.ListComp, ast.GeneratorExp)) or len(value.generators) != 1:
            return None
        gen = value.generators[0]
        it = gen.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("parameters", "named_parameters")):
            return None
        target = gen.target
        if it.func.attr == "named_parameters":
            target = target.elts[1] if isinstance(target, ast.Tuple) and len(target.elts) == 2 else None
        if not (isinstance(target, ast.Name) and isinstance(value.elt, ast.Name) and value.elt.id == target.id):
            return None
        source = self.vref(it)
        return {"c": "list", "a": [source], "k": {}} if source is not None else None

    def _bind_lambda(self, target: ast.AST, value: ast.Lambda, info: Dict[str, Any], cls: Optional[str], qual: str) -> None:
        """`self.loss_fn = lambda *a, **k: F.binary_cross_entropy(*a, **k)`: the lambda becomes a
        function nested in this one (`<lambda:row:col>`, a name no code spells), the name or
        `self.` attribute bound to it; its body runs when it is called, not here."""
        name = dotted(target)
        attribute = cls is not None and name is not None and name.startswith("self.") and name.count(".") == 1
        if name is None or not (attribute or isinstance(target, ast.Name)):
            return
        inner = f"<lambda:{value.lineno}:{value.col_offset}>"
        args = value.args
        params = [a.arg for a in (*getattr(args, "posonlyargs", []), *args.args, *args.kwonlyargs)]
        body: List[ast.stmt] = [ast.Return(value=value.body, lineno=value.lineno, col_offset=value.col_offset)]
        saved = self.region_now, self.qual_now
        self._function(inner if qual == "<module>" else f"{qual}.{inner}", body, None, params, value.lineno, -1, [])
        self.region_now, self.qual_now = saved
        ref = {"n": inner}
        if attribute:
            self.classes.setdefault(cls, {"line": 0, "bases": [], "attrs": {}})["attrs"].setdefault(name[5:], []).append([qual, ref])
        else:
            info["locals"].setdefault(name, []).append(ref)

    def _declare(self, target: ast.AST, annotation: ast.AST, info: Dict[str, Any], cls: Optional[str], qual: str) -> None:
        """`self.model: Model = ...`, `model: Model = ...`: the declared class, kept beside the value."""
        names = declared_names(annotation)
        name = dotted(target)
        if names and name is not None:
            self._wide_binding(name, {"t": names}, info, cls, qual)

    def _wide_binding(self, name: str, ref: Dict[str, Any], info: Dict[str, Any], cls: Optional[str], qual: str) -> None:
        """A binding only the dispatch view reads: locals in `wl`, `self.` attributes in `wa`."""
        if cls is not None and name.startswith("self.") and name.count(".") == 1:
            self.classes.setdefault(cls, {"line": 0, "bases": [], "attrs": {}}).setdefault("wa", {}).setdefault(name[5:], []).append([qual, ref])
        elif "." not in name:
            info.setdefault("wl", {}).setdefault(name, []).append(ref)

    def _appended(self, expr: ast.AST, info: Dict[str, Any], cls: Optional[str], qual: str) -> None:
        """`self.losses.append(MMFLoss(cfg))`, `heads.append(head)`: an element of a container
        (`we`: of a `self.` attribute in its class, of a local in its function), which only the
        dispatch view reads (a loop over the container, `for loss in self.losses:`)."""
        if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "append"):
            return
        name = dotted(expr.func.value)
        if name is None or len(expr.args) != 1 or expr.keywords:
            return
        ref = self.vref(expr.args[0]) or self.wref(expr.args[0])
        if ref is None:
            return
        if cls is not None and name.startswith("self.") and name.count(".") == 1:
            self.classes.setdefault(cls, {"line": 0, "bases": [], "attrs": {}}).setdefault("we", {}).setdefault(name[5:], []).append([qual, ref])
        elif "." not in name:
            info.setdefault("we", {}).setdefault(name, []).append(ref)

    def _store(self, target: ast.AST, value: ast.AST, info: Dict[str, Any]) -> None:
        """`REGISTRY[name] = cls`: a name stored as an item of a dict (a registry filled by hand);
        and `state["optimizer"] = optimizer.state_dict()`: a state dict added to a local dict under
        a literal key (`it`: a checkpoint built entry by entry, `graph.saved_checkpoint`)."""
        if not isinstance(target, ast.Subscript):
            return
        if isinstance(value, (ast.Name, ast.Attribute)):
            base, stored = dotted(target.value), dotted(value)
            if base is not None and stored is not None:
                info.setdefault("st", []).append([base, stored, target.lineno])
        elif (
            isinstance(target.value, ast.Name) and isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str)
            and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "state_dict"
        ):
            ref = self.vref(value)
            if ref is not None:
                info.setdefault("it", {}).setdefault(target.value.id, {})[target.slice.value] = ref

    def _in_place_cast(self, expr: ast.AST, info: Dict[str, Any]) -> None:
        """`model.half()` / `model.to(torch.float16)` / `model.float()` as a statement: the module itself changes."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("half", "to", "bfloat16", "type", "float"):
            tag = self._method_tag(expr)
            subject = dotted(expr.func.value)
            if tag in ("to:fp16", "to:bf16", "to:fp32") and subject is not None:
                info["casts"].append([subject, tag[3:], expr.lineno])
            elif tag == "to" and subject is not None:
                self._name_cast(expr, subject, info)

    def _name_cast(self, call: ast.Call, subject: str, info: Dict[str, Any]) -> None:
        """`unet.to(weight_dtype)`, `m.to(device, dtype=d)`, `m = m.to(d)`: a module cast to a dtype
        held in a name (AMP201 resolves the name, maybe into another file)."""
        for arg in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]:
            if isinstance(arg, ast.Name):
                info.setdefault("dc", []).append([subject, arg.id, call.lineno])

    def _masks(self, expr: ast.AST, qual: str, info: Dict[str, Any], region: int, target: Optional[ast.AST] = None) -> None:
        """Overflowing mask constants of a statement (`masks.py`), unless the function tests a dtype."""
        if self.disables and qual != "<module>" and disabled.disabled_alone(self.regions, region):
            found = disabled.uses(self, expr, self.functions[qual]["params"], self.history[qual], region)
            if found:
                info.setdefault("disabled", []).extend(found)
        if not self.overflows or self.aware.get(qual, True):
            return
        found = masks.sites(self, expr, self.history[qual], self.history["<module>"], region, target)
        if found:
            info.setdefault("masks", []).extend(found)

    # ------------------------------------------------------------------ calls

    def _expression(self, expr: ast.AST, qual: str, info: Dict[str, Any], region: int) -> None:
        for node in _walk_expression(expr):
            if isinstance(node, ast.Call):
                self._call(node, info, region, qual)

    def _call(self, node: ast.Call, info: Dict[str, Any], region: int, qual: str) -> None:
        spelled = dotted(node.func)
        record: Dict[str, Any] = {
            "f": spelled or "",
            "r": node.lineno,
            "c": self._column(node.lineno, node.col_offset),
            "er": node.end_lineno or node.lineno,
            "ec": self._column(node.end_lineno or node.lineno, node.end_col_offset or 0),
            "g": region,
            "a": [self.vref(a) for a in node.args if not isinstance(a, ast.Starred)],
            "k": {k.arg: self.vref(k.value) for k in node.keywords if k.arg},
        }
        if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            record["u"] = 1  # `f(*args)` / `f(**kwargs)`: passes what the record does not list
        if self.loops:
            record["l"] = self.loop_row  # in a loop body of its function: the outermost loop's row
        if self.branches:
            record["i"] = 1  # in an if/else body of its function
        if spelled is None and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Call):
            inner = node.func.value
            if dotted(inner.func) == "super" and (
                not inner.args or (len(inner.args) == 2 and dotted(inner.args[0]) == qual.split(".", 1)[0] and dotted(inner.args[1]) == "self")
            ):
                # `super().__init__(LOSSES)`, `super(Trainer, self).__init__(config, model)`: the base
                # class's method (dispatch view)
                record["sp"] = node.func.attr
        if spelled is None:
            inner = self.vref(node.func) or self.wref(node.func)
            if inner is not None:
                record["fv"] = inner  # `nn.BCELoss()(p, y)`, `Net().cuda()(x)`, `MODELS[name](cfg)`
        if node.args and qual != "<module>" and (spelled is None or self.qualname(spelled) is None):
            carried = self._carried(node, info, region, qual)
            if carried:
                record["ap"] = carried
        info["calls"].append(record)

    def _carried(self, node: ast.Call, info: Dict[str, Any], region: int, qual: str) -> Dict[str, Any]:
        """What the positional arguments of a project call carry into it (`disabled.passed`),
        by position: low-precision tensors made in the call's own region, and parameters
        passed on."""
        enabled = region < 0 or self.regions[region].get("enabled") is not False  # none here: the callers' may be
        out: Dict[str, Any] = {}
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            found = disabled.passed(self, arg, info["params"], self.history[qual], region, enabled)
            if found is not None:
                out[str(i)] = found
        return out

    def _column(self, row: int, byte_offset: int) -> int:
        """ast counts UTF-8 bytes; diagnostics count characters (1-based)."""
        if 0 < row <= len(self.lines):
            line = self.lines[row - 1]
            if not line.isascii():
                return len(line.encode("utf-8")[:byte_offset].decode("utf-8", "replace")) + 1
        return byte_offset + 1

    # ------------------------------------------------------------------ regions

    def _with_item(self, expr: ast.AST, line: int, parent: int, qual: str) -> int:
        if not isinstance(expr, ast.Call):
            return parent
        spelled = dotted(expr.func)
        if spelled is None:
            return parent
        q = self.qualname(spelled)
        if q in torchapi.AUTOCAST_CONTEXTS:
            return self._region(expr, line, parent, via=None)
        if spelled.rsplit(".", 1)[-1] == "autocast" and q is None and "." in spelled:
            # accelerate / Fabric `accelerator.autocast()`: the dtype is in their config
            return self._add_region(line, parent, None, None, None, framework=True)
        if q is None or not q.startswith(("torch.", "contextlib.", "accelerate.")):
            # `with self.amp_autocast():`, `with amp_context():` -- maybe an autocast held in
            # an attribute or made by a project function; the project model decides
            index = self._add_region(line, parent, None, None, None, via=spelled)
            if expr.args or expr.keywords:
                self.regions[index]["va"] = 1  # called with arguments: what they set is not read
            return index
        return parent

    def _region(self, call: ast.Call, line: int, parent: int, via: Optional[str]) -> int:
        q = self.qualname(dotted(call.func))
        if q not in torchapi.AUTOCAST_CONTEXTS:
            return parent
        device, dtype, enabled = autocast_arguments(self, call, q)
        return self._add_region(line, parent, device, dtype, enabled)

    def _add_region(self, line: int, parent: int, device: Optional[str], dtype: Optional[str], enabled: Optional[bool], framework: bool = False, via: Optional[str] = None) -> int:
        region: Dict[str, Any] = {"row": line, "device": device, "dtype": dtype, "enabled": enabled, "parent": parent}
        if framework:
            region["framework"] = True
        if via is not None:
            region["via"] = via
        self.regions.append(region)
        return len(self.regions) - 1

    def _framework(self, value: ast.AST, target: ast.AST, qual: str) -> None:
        """`Trainer(precision="16-mixed")`, `Accelerator(mixed_precision="fp16")`, `TrainingArguments(fp16=True)`."""
        if not isinstance(value, ast.Call):
            return
        q = self.qualname(dotted(value.func))
        name = dotted(target)
        if q is None or name is None:
            return
        keywords = {k.arg: k.value for k in value.keywords if k.arg}
        entry: Optional[Dict[str, Any]] = None
        if q in _LIGHTNING_TRAINERS:
            self._cpu_trainer(value, keywords, name, qual)
            precision = _constant(keywords.get("precision"))
            dtype = lightning_autocast_dtype(precision)
            if dtype is not None:
                accelerator = _constant(keywords.get("accelerator"))
                device = {"gpu": "cuda", "cuda": "cuda", "cpu": "cpu"}.get(accelerator) if isinstance(accelerator, str) else None  # type: ignore[arg-type]
                entry = {"kind": "lightning", "dtype": dtype, "device": device}
        elif q in _ACCELERATORS:
            self.accelerators.append(accelerator_record(value, name, qual))
            mp = _constant(keywords.get("mixed_precision"))
            if mp in ("fp16", "bf16"):
                cpu = _constant(keywords.get("cpu")) is True
                entry = {"kind": "accelerate", "dtype": mp, "device": "cpu" if cpu else None}
                if any(k.arg is None for k in value.keywords) or any(
                    k in keywords and not (isinstance(keywords[k], ast.Constant) and keywords[k].value is None) for k in _ACCELERATE_PLUGINS
                ):
                    entry["plugin"] = 1  # DeepSpeed / FSDP / Megatron-LM own scaling: no accelerate GradScaler to reason about
        elif q in _HF_ARGS:
            for flag in ("fp16", "bf16"):
                if _constant(keywords.get(flag)) is True:
                    entry = {"kind": "hf", "dtype": flag, "device": "cpu" if _constant(keywords.get("use_cpu")) is True else None}
        if entry is not None:
            entry.update(row=value.lineno, target=name, func=qual)
            self.frameworks.append(entry)


    def _cpu_trainer(self, value: ast.Call, keywords: Dict[str, ast.AST], name: str, qual: str) -> None:
        """`Trainer(accelerator=accelerator, precision="bf16-mixed")` where the accelerator may be
        the CPU by a choice: a literal "cpu", a parameter of the function a click option lets be
        "cpu" (`type=click.Choice(["gpu", "cpu"])`, `default="cpu"`), or an argparse option read
        (`args.accelerator`, resolved against the file's options by the project). The precision is
        a literal or either arm of a conditional (`32 if v1 else "bf16-mixed"`)."""
        precision = keywords.get("precision")
        arms = [precision.body, precision.orelse] if isinstance(precision, ast.IfExp) else [precision]
        spelled = [_constant(a) for a in arms]
        if not any(lightning_autocast_dtype(v) == "bf16" for v in spelled):
            return
        accelerator = keywords.get("accelerator")
        choice: Optional[str] = None
        option: Optional[str] = None
        if _constant(accelerator) == "cpu":
            choice = '"cpu"'
        elif isinstance(accelerator, ast.Name):
            flag = self.cpu_params.get(qual, {}).get(accelerator.id)
            if flag is not None:
                choice = f"{flag} cpu"
        elif isinstance(accelerator, ast.Attribute) and dotted(accelerator) is not None:
            option = accelerator.attr  # an argparse destination: the project reads the file's options
        if choice is None and option is None:
            return
        at = precision if precision is not None else value
        end_row = at.end_lineno or at.lineno
        loc = [at.lineno, self._column(at.lineno, at.col_offset), end_row, self._column(end_row, at.end_col_offset or 0)]
        entry: Dict[str, Any] = {"row": value.lineno, "loc": loc, "target": name, "func": qual,
                                 "p": next(v for v in spelled if lightning_autocast_dtype(v) == "bf16")}
        if choice is not None:
            entry["cpu"] = choice
        else:
            entry["opt"] = option
        self.cpu_trainers.append(entry)


def _click_cpu_options(decorators: List[ast.expr], params: List[str]) -> Dict[str, str]:
    """{parameter: flag} for the click options decorating a function (`@click.option("--accelerator",
    type=click.Choice(["gpu", "cpu"]), default="gpu")`) whose literal choices or default include
    "cpu", when the option's parameter is one of `params`."""
    out: Dict[str, str] = {}
    for d in decorators:
        if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "option"):
            continue
        flags = [_constant(a) for a in d.args]
        if not flags or not all(isinstance(f, str) for f in flags):
            continue
        keywords = {k.arg: k.value for k in d.keywords if k.arg}
        values = [_constant(keywords.get("default"))]
        kind = keywords.get("type")
        if isinstance(kind, ast.Call) and (dotted(kind.func) or "").rsplit(".", 1)[-1] == "Choice" and kind.args:
            listed = kind.args[0]
            if isinstance(listed, (ast.List, ast.Tuple)):
                values.extend(_constant(e) for e in listed.elts)
        if "cpu" not in values:
            continue
        names = [f for f in flags if not f.startswith("-") and f.isidentifier()]
        long = next((f for f in flags if f.startswith("--")), None)
        param = names[0] if names else (long.lstrip("-").replace("-", "_") if long else None)
        if param in params and long is not None:
            out[param] = long
    return out


def autocast_arguments(s: "_Summarizer", call: ast.Call, qualname: str) -> Tuple[Optional[str], Optional[str], Optional[bool]]:
    """(device, dtype, enabled) of a call of the autocast constructor `qualname`, as the
    per-file model reads them (`torchapi.autocast_parameters`)."""
    parameters = torchapi.autocast_parameters(qualname)

    def arg(name: str) -> Optional[ast.AST]:
        if name not in parameters:
            return None
        for k in call.keywords:
            if k.arg == name:
                return k.value
        position = parameters.index(name)
        if any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
            return None
        return call.args[position] if position < len(call.args) else None

    # `autocast(**ctx.autocast_kwargs)`, `autocast(*args)`: whether it is on may be passed (a
    # replayed state); the dtype is read as the device's default, as the per-file model does
    unpacked = any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)
    device = torchapi.AUTOCAST_CONTEXTS[qualname]
    if device is None:
        value = _constant(arg("device_type"))
        device = value if isinstance(value, str) else None
    dtype_node, enabled_node = arg("dtype"), arg("enabled")
    if dtype_node is None:
        dtype = torchapi.DEVICE_DEFAULT_DTYPE.get(device) if device else None
    else:
        d = s.dtype(dtype_node)
        dtype = d if d in ("fp16", "bf16", "fp32") else None
    if enabled_node is None:
        enabled: Optional[bool] = None if unpacked else True
    else:
        value = _constant(enabled_node)
        enabled = value if isinstance(value, bool) else None
    return device, dtype, enabled




#: Accelerator(device_placement, split_batches, mixed_precision, gradient_accumulation_steps, cpu, ...)
_ACCELERATE_POSITIONS = {"mixed_precision": 2, "cpu": 4}


def accelerator_record(call: ast.Call, target: str, qual: str) -> Dict[str, Any]:
    """What decides whether an `Accelerator(...)` bound to `target` builds a GradScaler:
    `mp` its `mixed_precision` (the literal text, or {"n": spelled} for `args.mixed_precision`;
    absent when not given or anything else), `pl` the plugins passed by name ({"deepspeed_plugin":
    "plugin"}: a local whose helper may return None), `x` 1 when something else may switch the
    scaler off or on (`**kwargs`, `*args`, `cpu=` not literally False, a plugin built inline)."""
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    blocked = any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)
    out: Dict[str, Any] = {"r": call.lineno, "t": target, "fn": qual}
    for name, position in _ACCELERATE_POSITIONS.items():
        if name not in keywords and len(call.args) > position:
            keywords[name] = call.args[position]
    mp = keywords.get("mixed_precision")
    if isinstance(mp, ast.Constant) and isinstance(mp.value, str):
        out["mp"] = mp.value
    elif mp is not None and dotted(mp) and "." in (dotted(mp) or ""):
        out["mp"] = {"n": dotted(mp)}
    cpu = keywords.get("cpu")
    if cpu is not None and not (isinstance(cpu, ast.Constant) and cpu.value is False):
        blocked = True
    plugins: Dict[str, str] = {}
    for plugin in _ACCELERATE_PLUGINS:
        value = keywords.get(plugin)
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            continue
        if isinstance(value, ast.Name):
            plugins[plugin] = value.id
        else:
            blocked = True
    if plugins:
        out["pl"] = plugins
    if blocked:
        out["x"] = 1
        stars = [k.value for k in call.keywords if k.arg is None]
        if (
            len(stars) == 1 and isinstance(stars[0], ast.Name) and not any(isinstance(a, ast.Starred) for a in call.args)
            and not (cpu is not None and not (isinstance(cpu, ast.Constant) and cpu.value is False))
            and all(keywords.get(p) is None or isinstance(keywords[p], (ast.Name, ast.Constant)) for p in _ACCELERATE_PLUGINS)
        ):
            out["sk"] = stars[0].id  # blocked only by `**accelerate_kwargs`: empty when nothing passes it
    return out


def _empty_defaults(args: ast.arguments) -> List[str]:
    """The parameters whose default is an empty dict or None (`kwargs: dict = dict()`, `{}`)."""
    positional = [*getattr(args, "posonlyargs", []), *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    out: List[str] = []
    for arg, default in pairs:
        if (
            (isinstance(default, ast.Dict) and not default.keys)
            or (isinstance(default, ast.Call) and dotted(default.func) == "dict" and not default.args and not default.keywords)
            or (isinstance(default, ast.Constant) and default.value is None)
        ):
            out.append(arg.arg)
    return out


def config_settings(tree: ast.Module) -> Dict[str, List[Any]]:
    """{key: [literal string, row]} of a config module's top-level `mixed_precision = "fp16"`
    (`precision_names.CONFIG_KEYS`): a module of settings (no `def` or `class` at its top level: an mmcv /
    mmengine style Python config, `_base_ = [...]` and dicts), one literal assignment per key;
    empty for any other module."""
    out: Dict[str, List[Any]] = {}
    if any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for s in tree.body):
        return out
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        key = stmt.targets[0].id
        if key not in CONFIG_KEYS:
            continue
        if key in out or not (isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
            out[key] = [None, stmt.lineno]  # set twice, or to something else: not one literal
        else:
            out[key] = [stmt.value.value, stmt.lineno]
    return out


def argparse_options(tree: ast.Module) -> List[List[Any]]:
    """The file's `add_argument("--flag", choices=[...literal strings...])` calls as
    [dest, flag, sorted choices, literal default or None, row] (`runtime_choices.py` reads the
    same shape in one file; the project reads these across files). A `type=` other than `str`,
    `**kwargs`, a non-literal flag or choice leaves a call out."""
    out: List[List[Any]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            continue
        flags = [_constant(a) for a in node.args]
        if not flags or not all(isinstance(f, str) for f in flags):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        choices = keywords.get("choices")
        if not isinstance(choices, (ast.List, ast.Tuple, ast.Set)):
            continue
        texts = [e.value for e in choices.elts if isinstance(e, ast.Constant) and e.value is not None]
        if len(texts) != len([e for e in choices.elts if not (isinstance(e, ast.Constant) and e.value is None)]):
            continue
        if not texts or not all(isinstance(t, str) for t in texts):
            continue
        kind = keywords.get("type")
        if kind is not None and not (isinstance(kind, ast.Name) and kind.id == "str"):
            continue
        long = next((f for f in flags if f.startswith("--")), flags[0])
        dest = _constant(keywords["dest"]) if "dest" in keywords else long.lstrip("-").replace("-", "_")
        if not isinstance(dest, str) or not dest.isidentifier():
            continue
        default = _constant(keywords.get("default"))
        out.append([dest, long, sorted(set(texts)), default if isinstance(default, str) else None, node.lineno])
    return out


def _constant(node: Optional[ast.AST]) -> Any:
    return node.value if isinstance(node, ast.Constant) else None


def declared_names(annotation: Optional[ast.AST]) -> List[str]:
    """The dotted names an annotation declares: `Model`, `Optional[Model]`, `Union[DDP, Model]`,
    `"Model"` (a string annotation); the subscripted generic itself (`Optional`, `List`) is not
    one of them. At most a few."""
    out: List[str] = []
    stack = [annotation]
    while stack and len(out) < _MAX_DECLARED:
        node = stack.pop()
        if isinstance(node, ast.Subscript):
            inner = node.slice
            stack.extend(reversed(inner.elts) if isinstance(inner, ast.Tuple) else [inner])
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # `Model | None`
            stack.extend([node.right, node.left])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value.strip()
            if text and all(part.isidentifier() for part in text.split(".")):
                out.append(text)
        else:
            name = dotted(node)
            if name is not None and name not in ("None", "Any"):
                out.append(name)
    return out
