"""Run the user's own flagged code: expressions over synthesized tensors, and
training-step slices over a tiny real model, optimizer and GradScaler.

Worker-side (imports torch through the lab). The parent never imports this.

Two entry points:

* `eval_expression(lab, source, ...)`: the flagged expression or statement
  (`scores.masked_fill(mask == 0, -1e9)`) with every free name bound to a
  synthesized tensor (masks are boolean, dims are ints) of the finding's dtype
  on the lab's device. Returns the value, or raises what the code raised.
* `run_training(lab, source, ...)`: the flagged training-step statements with
  `model`, `optimizer`/`opt`, `scaler`, `loss`, `x`, `y`, `criterion`, loop
  index and accumulation counts, `self.<attr>`/`args.<attr>` bound by role.
  `compare_scaling` runs it twice, with the GradScaler enabled and disabled:
  correct AMP code behaves the same either way (the scaler is transparent), so
  a difference proportional to the scale, or an error only the enabled run
  raises, is the bug caught in the act.

A name that cannot be bound raises `Unbindable`; code we refuse to run (imports,
file or process I/O, `eval`, ...) raises `Refused`. Callers then fall back to
the rule's canonical reproduction. This is a guard against side effects of
ordinary code, not a sandbox against hostile code (the worker also runs in a
temporary directory, in its own process group, under a timeout).
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import math
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

# ----------------------------------------------------------------- safety

DENIED_NAMES = frozenset(
    {
        "open", "exec", "eval", "compile", "__import__", "input", "exit", "quit", "breakpoint",
        "globals", "locals", "vars", "getattr", "setattr", "delattr", "memoryview", "help", "__builtins__",
    }
)
DENIED_ATTRS = frozenset(
    {
        "save", "load", "open", "system", "popen", "remove", "unlink", "rmdir", "rmtree", "rename",
        "write", "write_text", "write_bytes", "writelines", "mkdir", "makedirs", "chdir", "kill", "killpg",
        "_exit", "fork", "forkpty", "spawn", "execv", "execve", "execvp", "hub", "download", "urlopen",
        "urlretrieve", "to_file", "save_pretrained", "push_to_hub", "save_state", "save_model",
        "save_checkpoint", "export", "setrecursionlimit", "load_library", "load_inline",
    }
)
_SAFE_BUILTINS = {k: v for k, v in vars(builtins).items() if k not in DENIED_NAMES and not k.startswith("_")}
_SAFE_BUILTINS["__build_class__"] = builtins.__build_class__  # class definitions (custom Functions)
# C code (warnings raised inside torch kernels) imports through the calling frame's
# builtins; the snippet itself can never name it (`check_safe` refuses imports).
_SAFE_BUILTINS["__import__"] = builtins.__import__
_SAFE_BUILTINS["__name__"] = "__amplint_snippet__"


class Refused(Exception):
    """The snippet does something the verifier will not run (I/O, imports, ...)."""


class Unbindable(Exception):
    """Some free names of the snippet cannot be bound to lab objects."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = sorted(set(names))
        super().__init__("cannot bind " + ", ".join(self.names))


class SnippetFailed(Exception):
    """The snippet raised in a way unrelated to the finding (both runs, or every binding)."""

    def __init__(self, error: BaseException, where: str = "") -> None:
        self.error = error
        self.where = where
        super().__init__(f"{type(error).__name__}: {error}")


class _Return(Exception):
    """`return` at the top level of a slice: the slice ends there."""


# ----------------------------------------------------------------- parsing


def _repair_indentation(text: str) -> str:
    """A slice that starts deeper than it ends: add `if True:` headers above it."""
    lines = text.splitlines()
    indents = [len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()]
    if not indents:
        return text
    first, low = indents[0], min(indents)
    levels = sorted({i for i in indents if low <= i < first})
    if not levels:
        levels = [low]
    header = [" " * lvl + "if True:" for lvl in levels]
    return "\n".join(header + lines)


def parse(source: str) -> ast.Module:
    """The snippet's statements (dedented, indentation repaired) or Refused."""
    if not isinstance(source, str) or not source.strip():
        raise Refused("no source")
    text = textwrap.dedent(source.expandtabs(8)).strip("\n")
    for candidate in (text, _repair_indentation(text)):
        try:
            return ast.parse(candidate)
        except SyntaxError:
            continue
    raise Refused("cannot parse the flagged source")


def _bound_names(tree: ast.AST) -> set:
    """Names the snippet itself binds (parameters, assignment targets): a parameter called
    `input` is the user's tensor, not the builtin (which is not in the snippet's builtins anyway)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return bound


#: denied names that are harmless once the snippet binds them itself (absent from its builtins)
_REBINDABLE = frozenset({"input", "help", "exit", "quit"})


def check_safe(tree: ast.AST) -> None:
    rebound = _bound_names(tree) & _REBINDABLE
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            raise Refused("imports")
        if isinstance(node, (ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom, ast.Await, ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith)):
            raise Refused(type(node).__name__.lower())
        if isinstance(node, ast.Name) and node.id in DENIED_NAMES and node.id not in rebound:
            raise Refused(f"`{node.id}`")
        if isinstance(node, ast.Attribute):
            if node.attr in DENIED_ATTRS:
                raise Refused(f"`.{node.attr}`")
            if node.attr.startswith("__") and node.attr.endswith("__"):
                raise Refused(f"`.{node.attr}`")


class _TopReturns(ast.NodeTransformer):
    """`return` outside nested defs -> `raise __amplint_return__`."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST:
        return ast.copy_location(ast.Raise(exc=ast.Name("__amplint_return__", ast.Load()), cause=None), node)


class _Relocate(ast.NodeTransformer):
    """Training slices run on the lab's device: `t.cuda(...)` -> `t.to(<lab device>)`, and
    the device string "cuda" of an `autocast(...)` call -> the lab's device type. The
    GradScaler protocol behaves the same on every device; `relocated`
    records that the slice was changed."""

    def __init__(self) -> None:
        self.relocated = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "cuda":
            self.relocated = True
            to = ast.Attribute(value=func.value, attr="to", ctx=ast.Load())
            return ast.copy_location(ast.Call(func=to, args=[ast.Name("__amplint_device__", ast.Load())], keywords=[]), node)
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if name == "GradScaler":  # `GradScaler("cuda")` disables itself without CUDA: the lab's device
            for i, arg in enumerate(node.args[:1]):
                if isinstance(arg, ast.Constant) and arg.value == "cuda":
                    node.args[i] = ast.copy_location(ast.Name("__amplint_device_type__", ast.Load()), arg)
                    self.relocated = True
            for kw in node.keywords:
                if kw.arg == "device" and isinstance(kw.value, ast.Constant) and kw.value.value == "cuda":
                    kw.value = ast.copy_location(ast.Name("__amplint_device_type__", ast.Load()), kw.value)
                    self.relocated = True
        if name == "autocast":
            device = ast.Name("__amplint_device_type__", ast.Load())
            for i, arg in enumerate(node.args[:1]):
                if isinstance(arg, ast.Constant) and arg.value == "cuda":
                    node.args[i] = ast.copy_location(device, arg)
                    self.relocated = True
            for kw in node.keywords:
                if kw.arg == "device_type" and isinstance(kw.value, ast.Constant) and kw.value.value == "cuda":
                    kw.value = ast.copy_location(device, kw.value)
                    self.relocated = True
        return node


def relocate(tree: ast.Module) -> Tuple[ast.Module, bool]:
    """`tree` with CUDA-specific spellings pointed at the lab's device (see `_Relocate`)."""
    transformer = _Relocate()
    out = ast.fix_missing_locations(transformer.visit(ast.parse(ast.unparse(tree))))
    return out, transformer.relocated


def compile_statements(tree: ast.Module, name: str = "<flagged code>"):
    """Compile a slice so `return`, `break` and `continue` at its top level work."""
    body = _TopReturns().visit(ast.parse(ast.unparse(tree))).body
    loop = ast.For(
        target=ast.Name("__amplint_once__", ast.Store()),
        iter=ast.Tuple([ast.Constant(0)], ast.Load()),
        body=body or [ast.Pass()],
        orelse=[],
    )
    module = ast.fix_missing_locations(ast.Module(body=[loop], type_ignores=[]))
    return compile(module, name, "exec")


# ----------------------------------------------------------------- free names


@dataclass
class FreeNames:
    """Names read before the snippet assigns them, with the attribute chains used on them."""

    chains: Dict[str, List[Tuple[str, ...]]] = field(default_factory=dict)
    called: set = field(default_factory=set)  # names used as `name(...)`

    def add(self, chain: Tuple[str, ...], called: bool) -> None:
        self.chains.setdefault(chain[0], [])
        if chain not in self.chains[chain[0]]:
            self.chains[chain[0]].append(chain)
        if called and len(chain) == 1:
            self.called.add(chain[0])

    @property
    def names(self) -> List[str]:
        return sorted(self.chains)


class _FreeFinder(ast.NodeVisitor):
    def __init__(self) -> None:
        self.scopes: List[set] = [set()]
        self.free = FreeNames()
        self._call_funcs: set = set()

    def bound(self, name: str) -> bool:
        return any(name in s for s in self.scopes) or name in _SAFE_BUILTINS or name.startswith("__amplint")

    def bind_target(self, target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                self.scopes[-1].add(node.id)
            elif isinstance(node, (ast.Attribute, ast.Subscript)):
                self.visit(node)  # `self.x = ...` reads `self`
                break

    # statements in order
    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for t in node.targets:
            self.bind_target(t)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.bind_target(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            if not self.bound(node.target.id):
                self.free.add((node.target.id,), False)
            self.scopes[-1].add(node.target.id)
        else:
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.bind_target(node.target)

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        self.bind_target(node.target)
        for stmt in node.body + node.orelse:
            self.visit(stmt)

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self.bind_target(item.optional_vars)
        for stmt in node.body:
            self.visit(stmt)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self.scopes[-1].add(node.name)
        for stmt in node.body:
            self.visit(stmt)

    def _function(self, node: Any, body: Sequence[ast.AST]) -> None:
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        args = node.args
        for default in [*args.defaults, *[d for d in args.kw_defaults if d is not None]]:
            self.visit(default)
        if hasattr(node, "name"):
            self.scopes[-1].add(node.name)
        names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        if args.vararg:
            names.add(args.vararg.arg)
        if args.kwarg:
            names.add(args.kwarg.arg)
        self.scopes.append(set(names))
        for stmt in body:
            self.visit(stmt)
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node, node.body)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._function(node, [node.body])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for d in node.decorator_list:
            self.visit(d)
        for b in node.bases:
            self.visit(b)
        for k in node.keywords:
            self.visit(k.value)
        self.scopes[-1].add(node.name)
        self.scopes.append(set())
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    def _comprehension(self, node: Any, elts: Sequence[ast.AST]) -> None:
        gens = node.generators
        self.visit(gens[0].iter)
        self.scopes.append(set())
        for i, gen in enumerate(gens):
            if i:
                self.visit(gen.iter)
            self.bind_target(gen.target)
            for cond in gen.ifs:
                self.visit(cond)
        for e in elts:
            self.visit(e)
        self.scopes.pop()

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_ListComp
    visit_GeneratorExp = visit_ListComp  # type: ignore[assignment]

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, [node.key, node.value])

    # reads
    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name):
            self._call_funcs.add(id(node.func))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain: List[str] = []
        cur: ast.AST = node
        while isinstance(cur, ast.Attribute):
            chain.append(cur.attr)
            cur = cur.value
        if isinstance(cur, ast.Name) and isinstance(cur.ctx, ast.Load):
            if not self.bound(cur.id):
                self.free.add((cur.id, *reversed(chain)), False)
            return
        self.visit(cur)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and not self.bound(node.id):
            self.free.add((node.id,), id(node) in self._call_funcs)
        elif isinstance(node.ctx, (ast.Store, ast.Del)):
            self.scopes[-1].add(node.id)


def free_names(tree: ast.AST) -> FreeNames:
    finder = _FreeFinder()
    for stmt in getattr(tree, "body", [tree]):
        finder.visit(stmt)
    return finder.free


# ----------------------------------------------------------------- roles

_R = lambda p: re.compile(p, re.I)  # noqa: E731
ROLE_PATTERNS: List[Tuple[str, "re.Pattern[str]"]] = [
    ("scaler", _R(r"^(scaler|grad_scaler|loss_scaler|amp_scaler|gradscaler|\w+_scaler)$")),
    ("optimizer", _R(r"^(opt|optim|optimizer|optimiser|opt_\w+|optimizer_\w+|\w+_opt|\w+_optim|\w+_optimizer)$")),
    ("criterion", _R(r"^(criterion|loss_fn|loss_func|loss_function|lossfn|criteria|loss_module)$")),
    ("loss", _R(r"^(loss|losses|loss_\w+|\w+_loss)$")),
    ("model", _R(r"^(model|net|network|module|\w+_model|model_\w+|\w+_net)$")),
    ("scheduler", _R(r"^(scheduler|sched|lr_scheduler|\w+_scheduler)$")),
    ("params", _R(r"^(params|parameters|model_params|trainable_params|param_list)$")),
    ("loader", _R(r"^(\w*loader|\w*_dl|dl|batches|train_data|train_iter)$")),
    ("batch", _R(r"^(batch|minibatch|mini_batch|micro_batch|mb|batch_data)$")),
    ("x", _R(r"^(x|xb|inputs?|inp|images?|imgs?|data|features|src|batch_x)$")),
    ("y", _R(r"^(y|yb|targets?|labels?|batch_y|gt)$")),
    ("index", _R(r"^(i|j|step|it|itr|iter|iteration|idx|batch_idx|batch_index|micro_step|global_step|n_iter|iter_num|step_idx|batch_i|b_idx|cur_iter|epoch|ep|cur_epoch|epoch_idx)$")),
    ("accum", _R(r"^(accum\w*|\w*accumulat\w*|grad_acc\w*|update_freq|n_accum)$")),
    ("threshold", _R(r"^(max_norm|max_grad_norm|clip|clip_grad|grad_clip|clip_norm|gradient_clip_val|gradient_clipping|clip_value|grad_norm_clip|clip_grad_norm|max_grad|clip_max_norm|grad_clip_norm)$")),
    ("flag", _R(r"^(use_amp|amp|fp16|use_fp16|mixed_precision|enable_amp|amp_enabled|use_scaler|use_mixed_precision|log_grads|log_grad_norm|log_gradients|track_grad_norm|debug|verbose)$")),
    ("device", _R(r"^(device|dev)$")),
    ("dtype", _R(r"^(dtype|amp_dtype|ptdtype|autocast_dtype|compute_dtype)$")),
    ("sink", _R(r"^(logger|log|writer|tb_writer|summary_writer|wandb|pbar|progress_bar|tracker|meter|tb)$")),
    ("namespace", _R(r"^(self|args|cfg|config|conf|hparams|hp|hps|opts|options|training_args|train_args|settings|trainer)$")),
]

#: roles bound to plain values (never callable)
VALUE_ROLES = frozenset({"threshold", "index", "accum", "flag", "x", "y", "batch", "loss", "device", "dtype", "params"})

#: torch API names that are unambiguous when spelled bare
BARE_API = {
    "clip_grad_norm_": "torch.nn.utils.clip_grad_norm_",
    "clip_grad_value_": "torch.nn.utils.clip_grad_value_",
    "binary_cross_entropy": "torch.nn.functional.binary_cross_entropy",
    "binary_cross_entropy_with_logits": "torch.nn.functional.binary_cross_entropy_with_logits",
    "BCELoss": "torch.nn.BCELoss",
    "BCEWithLogitsLoss": "torch.nn.BCEWithLogitsLoss",
    "deepcopy": "copy.deepcopy",  # `from copy import deepcopy`: a module's fp16 copy (`deepcopy(model).half()`)
}
MODULES = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional", "functional": "torch.nn.functional", "math": "math", "copy": "copy"}


def resolve_qualname(qualname: str) -> Any:
    """"torch.nn.utils.clip_grad_norm_" -> the object; a trailing "()" constructs it."""
    import importlib

    construct = qualname.endswith("()")
    path = qualname[:-2] if construct else qualname
    parts = path.split(".")
    if parts[0] not in ("torch", "math", "copy"):
        raise LookupError(qualname)
    obj: Any = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj() if construct else obj


def role_of(name: str, data: Dict[str, Any]) -> Optional[str]:
    """The lab role of a spelled name ("scaler", "optimizer", ...) or None."""
    names = data.get("names") or {}
    if isinstance(names, dict) and name in names:
        return "api:" + str(names[name])
    if name in MODULES:
        return "module:" + MODULES[name]
    if name in BARE_API:
        return "api:" + BARE_API[name]
    for key, role in (("scaler", "scaler"), ("optimizer", "optimizer"), ("model", "model")):
        spelled = data.get(key)
        if isinstance(spelled, str) and spelled.rsplit(".", 1)[-1] == name:
            return role
    for role, pattern in ROLE_PATTERNS:
        if pattern.match(name):
            return role
    return None


class Namespace:
    """`self` / `args`: only the attributes the snippet reads, each bound by role."""

    def __init__(self, label: str) -> None:
        self.__dict__["_label"] = label

    def __repr__(self) -> str:
        return f"<bound {self._label}>"


class Batch(tuple):
    """One (x, y) micro-batch: unpacks as `x, y = batch`, indexes as `batch[0]`, and the
    tiny model accepts it whole (`model(batch)` returns the loss)."""

    @property
    def x(self) -> Any:
        return self[0]

    @property
    def y(self) -> Any:
        return self[1]


def _tiny_model_wrapper(torch: Any) -> type:
    """The lab model as the slice sees it: `model(x)` returns outputs; `model(x, y)` and
    `model(batch)` (a model given the targets) return the loss, MSE against `y`. Same
    parameters as the lab model."""

    class TinyModel(torch.nn.Module):
        def __init__(self, net: Any, criterion: Any) -> None:
            super().__init__()
            self.net = net
            self.criterion = criterion

        def forward(self, inputs: Any, targets: Any = None) -> Any:
            if isinstance(inputs, Batch) and targets is None:
                return self.criterion(self.net(inputs.x).float(), inputs.y)
            out = self.net(inputs)
            if targets is None:
                return out
            return self.criterion(out.float(), targets)

    return TinyModel


class Unbound(BaseException):
    """A name the slice could not bind was used while it ran. A BaseException so the
    user's own `except Exception:` cannot swallow it; callers turn it into `Unbindable`."""

    def __init__(self, name: str) -> None:
        self.names = [name]
        super().__init__(name)


class Missing:
    """Stands for a name no role binds. Slices bind it lazily: code on a path that never runs
    (an `else:` branch, a logging block) needs nothing, and any use of it on a path that does
    run raises `Unbound`, so the verdict never rests on an invented value."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __repr__(self) -> str:
        return f"<unbound {self._name}>"

    def _use(self, *_: Any, **__: Any) -> Any:
        raise Unbound(object.__getattribute__(self, "_name"))

    def __getattr__(self, name: str) -> Any:
        raise Unbound(f"{object.__getattribute__(self, '_name')}.{name}")

    __call__ = __bool__ = __iter__ = __len__ = __getitem__ = __setitem__ = __contains__ = _use
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _use
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __abs__ = _use
    __lt__ = __le__ = __gt__ = __ge__ = __index__ = __int__ = __float__ = __format__ = __enter__ = _use
    __eq__ = __ne__ = _use  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]


#: attributes that a name bound by role to a lab object may use; any other attribute means
#: the name is something else (`opt.fp16`: `opt` is the options, not an optimizer)
ROLE_ATTRS = {
    "optimizer": frozenset(
        {"step", "zero_grad", "param_groups", "state_dict", "load_state_dict", "add_param_group", "state", "defaults",
         "register_step_pre_hook", "register_step_post_hook"}
    ),
    "scaler": frozenset(
        {"scale", "unscale_", "step", "update", "get_scale", "is_enabled", "state_dict", "load_state_dict",
         "get_growth_factor", "get_backoff_factor", "get_growth_interval"}
    ),
}


class Sink:
    """A logger/progress bar stand-in: every call is accepted and ignored."""

    def __getattr__(self, name: str) -> "Sink":
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> "Sink":
        return self

    def __bool__(self) -> bool:
        return False


#: modules of collective communication (`import deepspeed.comm as dist`)
COLLECTIVES = frozenset({"torch.distributed", "deepspeed.comm"})


class _Done:
    """The handle of an asynchronous collective on a world of one: already complete."""

    def wait(self, *_: Any, **__: Any) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


class SingleRank:
    """A collective-communication module as on a world of one rank: the worker has no process
    group (the sandbox refuses sockets), and over one rank `all_reduce`, `broadcast` and
    `reduce` leave the tensor as it is, `all_gather` copies it; rank 0 of 1, and an
    `async_op=True` call returns a completed handle. A Function's dtypes do not depend on the
    number of ranks; any other attribute is unbound (an error if used)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"<{self._name} on a world of one rank>"

    @staticmethod
    def _done(async_op: bool = False, **_: Any) -> Any:
        return _Done() if async_op else None

    def all_reduce(self, tensor: Any, *_: Any, async_op: bool = False, **__: Any) -> Any:
        return self._done(async_op)

    broadcast = reduce = all_reduce

    def all_gather(self, tensor_list: Any, tensor: Any, *_: Any, async_op: bool = False, **__: Any) -> Any:
        tensor_list[0].copy_(tensor)
        return self._done(async_op)

    def all_gather_into_tensor(self, output: Any, tensor: Any, *_: Any, async_op: bool = False, **__: Any) -> Any:
        output.copy_(tensor.reshape(output.shape))
        return self._done(async_op)

    reduce_scatter_tensor = all_gather_into_tensor

    def barrier(self, *_: Any, async_op: bool = False, **__: Any) -> Any:
        return self._done(async_op)

    def get_world_size(self, *_: Any, **__: Any) -> int:
        return 1

    def get_rank(self, *_: Any, **__: Any) -> int:
        return 0

    def is_initialized(self) -> bool:
        return True

    is_available = is_initialized

    def __getattr__(self, name: str) -> Any:
        return Missing(f"{self._name}.{name}")


def single_rank(qualname: str) -> Optional[SingleRank]:
    """`SingleRank` for a collective-communication module's name, else None."""
    return SingleRank(qualname) if qualname in COLLECTIVES else None


# ----------------------------------------------------------------- expressions


def _mask_values(shape: Tuple[int, ...]) -> List[List[int]]:
    """4x4 pattern with a fully set row, a fully clear row and two mixed rows, so
    either mask polarity masks some row completely."""
    return [[1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 1, 0], [0, 1, 0, 1]]


_INT_NAME = _R(r"^(dim|d|d_k|dk|d_model|head_dim|n_heads?|num_heads|seq_len|seqlen|n|size|k|t|l|b|c|h|w|\w+_dim|\w+_size|\w+_len)$")
_MASK_NAME = _R(r"mask|pad|causal|keep|valid")


@dataclass
class ExprBinding:
    """How expression free names are synthesized in one attempt."""

    shape: Tuple[int, ...] = (4, 4)
    mask_kind: str = "bool"  # bool | float | long
    fill: str = "randn"  # randn | zeros | ones | prob


EXPR_ATTEMPTS = (
    ExprBinding((4, 4), "bool"),
    ExprBinding((4, 4), "float"),
    ExprBinding((2, 4, 4), "bool"),
    ExprBinding((4, 4), "long"),
)


def _tensor_for(lab: Any, name: str, binding: ExprBinding, dtype: Any, fill: str) -> Any:
    torch = lab.torch
    if _MASK_NAME.search(name):
        base = torch.tensor(_mask_values(binding.shape))
        if len(binding.shape) == 3:
            base = base.expand(binding.shape[0], 4, 4).contiguous()
        if binding.mask_kind == "bool":
            return base.bool().to(lab.device)
        if binding.mask_kind == "long":
            return base.long().to(lab.device)
        return base.to(lab.device, dtype)
    g = torch.Generator().manual_seed(_stable_seed(name, lab.seed))
    if fill == "zeros":
        t = torch.zeros(binding.shape)
    elif fill == "ones":
        t = torch.ones(binding.shape)
    elif fill == "prob":
        t = torch.rand(binding.shape, generator=g) * 0.9 + 0.05
    else:
        t = torch.randn(binding.shape, generator=g)
    return t.to(lab.device, dtype)


def _stable_seed(name: str, seed: int) -> int:
    h = 0
    for ch in name:
        h = (h * 131 + ord(ch)) % 1_000_003
    return h + seed * 7919


class Keyed(dict):
    """A name the expression indexes with string keys (`batch["fg_mask"]`, `outputs["weights"]`):
    a dict whose every key is a tensor synthesized like a free name of that spelling."""

    def __init__(self, make: Callable[[str], Any]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, key: Any) -> Any:
        value = self[key] = self._make(str(key))
        return value

    def __contains__(self, key: Any) -> bool:  # `"fg_mask" in batch`: every string key is there
        return isinstance(key, str) or dict.__contains__(self, key)


def string_keyed(tree: ast.AST) -> set:
    """Names that the code subscripts only with string literals (`batch["image"]`)."""
    keyed, other = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            is_str = isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)
            (keyed if is_str else other).add(node.value.id)
    return keyed - other


def bind_expression_names(
    lab: Any, free: FreeNames, data: Dict[str, Any], dtype: Any, binding: ExprBinding, fill: Optional[str] = None,
    keyed: Optional[set] = None,
) -> Dict[str, Any]:
    """Free names of an expression -> modules, API objects, ints and tensors (a name indexed
    only by string keys: a `Keyed` dict of such tensors)."""
    env: Dict[str, Any] = {}
    missing: List[str] = []
    fill = fill or binding.fill
    for name, chains in free.chains.items():
        if keyed and name in keyed and name not in free.called and all(len(c) == 1 for c in chains):
            env[name] = Keyed(lambda key, b=binding, f=fill: _tensor_for(lab, key, b, dtype, f))
            continue
        role = role_of(name, data)
        if role and role.startswith(("module:", "api:")):
            try:
                env[name] = resolve_qualname(role.split(":", 1)[1])
            except (LookupError, ImportError, AttributeError, TypeError):
                missing.append(name)
            continue
        if role == "namespace":
            ns = Namespace(name)
            for chain in chains:
                if len(chain) < 2:
                    continue
                attr = chain[1]
                if name == "self" and attr == "training":
                    object.__setattr__(ns, attr, True)
                elif _INT_NAME.match(attr):
                    object.__setattr__(ns, attr, 4)
                else:
                    object.__setattr__(ns, attr, _tensor_for(lab, attr, binding, dtype, fill))
            env[name] = ns
            continue
        if name in free.called:
            env[name] = Missing(name)  # an unknown callable: bound lazily, an error only if it is called
            continue
        if role == "device":
            env[name] = lab.device
        elif role == "dtype":
            env[name] = dtype
        elif _INT_NAME.match(name):
            env[name] = 4
        else:
            env[name] = _tensor_for(lab, name, binding, dtype, fill)
    if missing:
        raise Unbindable(missing)
    return env


def run_source(tree: ast.Module, env: Dict[str, Any]) -> Any:
    """Execute statements in `env`; the value of a final expression or assignment."""
    body = tree.body
    last = body[-1] if body else None
    value_name = None
    if isinstance(last, ast.Expr):
        assign = ast.copy_location(ast.Assign(targets=[ast.Name("__amplint_value__", ast.Store())], value=last.value), last)
        tree = ast.fix_missing_locations(ast.Module(body=[*body[:-1], assign], type_ignores=[]))
        value_name = "__amplint_value__"
    elif isinstance(last, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        target = last.targets[-1] if isinstance(last, ast.Assign) else last.target
        if isinstance(target, ast.Name):
            value_name = target.id
    globs = {"__builtins__": _SAFE_BUILTINS, "__amplint_return__": _Return, **RUNTIME_NAMES, **env}
    try:
        exec(compile_statements(tree), globs)  # noqa: S102 - the user's own flagged code
    except _Return:
        pass
    return globs.get(value_name) if value_name else None


def run_steps(tree: ast.Module, env: Dict[str, Any], first: int = 0) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """Execute the statements of `tree` one at a time in one namespace, yielding (index,
    namespace) after each from `first` on (those before it run as one block: a prelude).
    Raises what a statement raised; the statements before it have run and been yielded."""
    globs = {"__builtins__": _SAFE_BUILTINS, "__amplint_return__": _Return, **RUNTIME_NAMES, **env}
    body = tree.body
    blocks = ([ast.Module(body=body[:first], type_ignores=[])] if first else []) + [ast.Module(body=[s], type_ignores=[]) for s in body[first:]]
    for i, block in enumerate(blocks):
        exec(compile_statements(block), globs)  # noqa: S102 - the user's own flagged code
        if not first or i:
            yield i + first - (1 if first else 0), globs


def eval_expression(
    lab: Any,
    source: str,
    data: Dict[str, Any],
    dtype: Any,
    *,
    fill: Optional[str] = None,
    is_target_error: Callable[[BaseException], bool] = lambda e: False,
    attempts: Sequence[ExprBinding] = EXPR_ATTEMPTS,
    context: Callable[[], Any] = contextlib.nullcontext,
) -> Tuple[Any, Optional[BaseException], Dict[str, Any]]:
    """Evaluate the flagged expression with synthesized inputs.

    Tries a few input layouts (masks bool/float, 2-D/3-D) until one runs, or
    raises an error the experiment is looking for. Returns
    (value, target_error_or_None, info); raises Refused/Unbindable/SnippetFailed.
    """
    tree = parse(source)
    check_safe(tree)
    tree, lifted = with_prelude(tree, data)
    free = free_names(tree)
    keyed = string_keyed(tree)
    last: Optional[BaseException] = None
    for binding in attempts:
        env = bind_expression_names(lab, free, data, dtype, binding, fill, keyed)
        lab.seed_all()
        try:
            with context():
                value = run_source(tree, env)
        except Unbound as exc:
            raise Unbindable(exc.names) from None
        except Exception as exc:  # noqa: BLE001
            if is_target_error(exc):
                return None, exc, _info(free, binding, lifted)
            last = exc
            continue
        return value, None, _info(free, binding, lifted)
    assert last is not None
    raise SnippetFailed(last)


def _info(free: FreeNames, binding: ExprBinding, lifted: List[str]) -> Dict[str, Any]:
    info: Dict[str, Any] = {"free_names": free.names, "layout": _layout(binding)}
    if lifted:
        info["ran_the_files_own"] = lifted
    return info


def _layout(b: ExprBinding) -> str:
    return f"tensors {tuple(b.shape)}, masks {b.mask_kind}"


# ----------------------------------------------------------------- training slices


@dataclass
class TrainingSpec:
    """What a training-slice run needs to know."""

    source: str
    iterations: int = 1
    dtype: Any = None  # autocast dtype for the forward (None: fp32)
    optimizer: Optional[str] = "SGD"
    lr: Optional[float] = None
    complete_update: Optional[str] = None  # None | "if-stepped" | "always"
    overflow_at: Optional[int] = None  # iteration whose grads are made inf
    threshold: Optional[float] = None  # clip threshold when a name must stand for it
    data: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Prepared:
    tree: ast.Module
    code: Any
    free: FreeNames
    roles: Dict[str, Any]  # name -> role, or a dict attr -> role for namespaces
    uses_index: bool
    assumed: Dict[str, Any]
    unbound: List[str] = field(default_factory=list)  # bound lazily to `Missing`


def _namespace_roles(chains: List[Tuple[str, ...]], data: Dict[str, Any], depth: int, missing: List[str], prefix: str) -> Dict[str, Any]:
    roles: Dict[str, Any] = {}
    for chain in chains:
        if len(chain) < 2:
            continue
        attr = chain[1]
        role = role_of(attr, data)
        if attr == "training" and prefix == "self":
            role = "flag"
        if role is None or role.startswith("module:") or (role == "namespace" and depth > 2):
            missing.append(f"{prefix}.{attr}")
            roles[attr] = "missing"
            continue
        role = _refine(role, [c[1:] for c in chains if c[1] == attr])
        if role == "namespace":
            sub = [c[1:] for c in chains if len(c) > 2 and c[1] == attr]
            roles[attr] = _namespace_roles(sub, data, depth + 1, missing, f"{prefix}.{attr}")
        else:
            roles[attr] = role
    return roles


def _refine(role: Optional[str], chains: List[Tuple[str, ...]]) -> Optional[str]:
    """An object role read with attributes that object does not have is a namespace."""
    allowed = ROLE_ATTRS.get(role or "")
    if allowed is not None and any(len(c) > 1 and c[1] not in allowed for c in chains):
        return "namespace"
    return role


def with_prelude(tree: ast.Module, data: Dict[str, Any]) -> Tuple[ast.Module, List[str]]:
    """`tree` preceded by the user's own definitions it uses (`data["prelude"]`, read from the
    same file by `prelude.py`); unchanged when there are none or when they cannot be run."""
    text = data.get("prelude") if isinstance(data, dict) else None
    if not isinstance(text, str) or not text.strip():
        return tree, []
    try:
        pre = ast.parse(text)
        check_safe(pre)
    except (SyntaxError, ValueError, Refused, RecursionError):
        return tree, []
    names = [str(n) for n in data.get("prelude_names") or []]
    module = ast.Module(body=[*[_tolerant(stmt) for stmt in pre.body], *tree.body], type_ignores=[])
    return ast.fix_missing_locations(module), names


def _target_names(target: ast.AST) -> Iterator[ast.Name]:
    """The names an assignment target binds (`a`, `a, b`), not the roots of attribute or
    subscript targets (`self.loss = ...` binds no name: `self` stays what it was)."""
    if isinstance(target, ast.Name):
        yield target
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt.value if isinstance(elt, ast.Starred) else elt)


def _tolerant(stmt: ast.stmt) -> ast.stmt:
    """A prelude assignment that fails (its inputs are stand-ins, or unbound) binds its targets
    to `Missing` instead of ending the run: they matter only if the flagged code uses them."""
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return stmt
    targets = sorted({n.id for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]) for n in _target_names(t)})
    fallback = [
        ast.Assign(
            targets=[ast.Name(name, ast.Store())],
            value=ast.Call(func=ast.Name("__amplint_missing__", ast.Load()), args=[ast.Constant(name)], keywords=[]),
        )
        for name in targets
    ] or [ast.Pass()]
    handler = ast.ExceptHandler(
        type=ast.Tuple([ast.Name("Exception", ast.Load()), ast.Name("__amplint_unbound__", ast.Load())], ast.Load()),
        name=None,
        body=fallback,
    )
    return ast.copy_location(ast.Try(body=[stmt], handlers=[handler], orelse=[], finalbody=[]), stmt)


#: names every exec of user code can see (the prelude's fallbacks)
RUNTIME_NAMES = {"__amplint_missing__": None, "__amplint_unbound__": None, "__amplint_module__": None}


def prepare_training(spec: TrainingSpec) -> Prepared:
    tree = parse(spec.source)
    check_safe(tree)
    tree, lifted = with_prelude(tree, spec.data)
    free = free_names(tree)
    roles: Dict[str, Any] = {}
    missing: List[str] = []
    for name, chains in free.chains.items():
        role = role_of(name, spec.data)
        if name in free.called and role in VALUE_ROLES:
            role = None  # `clip(...)` is a function, not a threshold
        role = _refine(role, chains)
        if role is None:
            missing.append(name)
            roles[name] = "missing"
        elif role == "namespace":
            roles[name] = _namespace_roles(chains, spec.data, 1, missing, name)
        else:
            roles[name] = role

    def flat(r: Any) -> Iterator[str]:
        if isinstance(r, dict):
            for v in r.values():
                yield from flat(v)
        else:
            yield r

    all_roles = [x for r in roles.values() for x in flat(r)]
    assumed: Dict[str, Any] = {}
    if "threshold" in all_roles and spec.threshold is None:
        assumed["clip threshold"] = 1.0
    if "accum" in all_roles:
        assumed["accumulation steps"] = 2
    uses_index = "index" in all_roles or "accum" in all_roles
    if "loss" in all_roles:
        assumed["loss"] = "MSE of the tiny model on a fixed batch"
    if lifted:
        assumed["the file's own definitions of"] = lifted
    tree, relocated = relocate(tree)
    if relocated:
        assumed["device"] = "`.cuda()` / autocast(\"cuda\") ran on the lab's device"
    return Prepared(tree, compile_statements(tree), free, roles, uses_index, assumed, sorted(set(missing)))


@dataclass
class RunRecord:
    """What one run of a training slice did."""

    scaler_enabled: bool
    iterations_run: int = 0
    exception: Optional[Dict[str, Any]] = None
    clips: List[Dict[str, Any]] = field(default_factory=list)
    param_delta: float = 0.0
    scale_history: List[float] = field(default_factory=list)
    optimizer_steps: int = 0
    scaler_calls: Dict[str, int] = field(default_factory=lambda: {"scale": 0, "unscale_": 0, "step": 0, "update": 0})
    harness_update_error: Optional[Dict[str, Any]] = None
    nonfinite_params: int = 0
    init_scale: float = 0.0
    delta: Any = None  # flat tensor of the parameter change (for comparing runs)


@contextlib.contextmanager
def clip_recorder(torch: Any, clips: List[Dict[str, Any]]) -> Iterator[Dict[str, Callable]]:
    """Patch torch's clip functions to record what they see before clipping."""
    import torch.nn.utils as nnu
    import torch.nn.utils.clip_grad as cg

    orig_norm = cg.clip_grad_norm_
    orig_value = cg.clip_grad_value_

    def grads_of(parameters: Any) -> List[Any]:
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        return [p.grad for p in parameters if getattr(p, "grad", None) is not None]

    def clip_grad_norm_(parameters: Any, max_norm: Any, *args: Any, **kwargs: Any) -> Any:
        parameters = list(parameters) if not isinstance(parameters, torch.Tensor) else [parameters]
        total = orig_norm(parameters, max_norm, *args, **kwargs)
        clips.append({"function": "clip_grad_norm_", "threshold": float(max_norm), "seen": float(total)})
        return total

    def clip_grad_value_(parameters: Any, clip_value: Any, *args: Any, **kwargs: Any) -> Any:
        parameters = list(parameters) if not isinstance(parameters, torch.Tensor) else [parameters]
        grads = grads_of(parameters)
        flat = torch.cat([g.detach().float().abs().flatten() for g in grads]) if grads else torch.zeros(1)
        clips.append(
            {
                "function": "clip_grad_value_",
                "threshold": float(clip_value),
                "seen": float(flat.max()),
                "fraction_clipped": float((flat > float(clip_value)).float().mean()),
            }
        )
        return orig_value(parameters, clip_value, *args, **kwargs)

    patched = {"clip_grad_norm_": clip_grad_norm_, "clip_grad_value_": clip_grad_value_}
    saved = [(mod, name, getattr(mod, name)) for mod in (nnu, cg) for name in patched if hasattr(mod, name)]
    try:
        for mod, name, _ in saved:
            setattr(mod, name, patched[name])
        yield patched
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


def spelled_by_role(roles: Dict[str, Any], prefix: str = "") -> Dict[str, List[str]]:
    """{role: [spelled names in order]}, with `self.`/`args.` paths spelled out."""
    out: Dict[str, List[str]] = {}
    for name, role in roles.items():
        if isinstance(role, dict):
            for sub, names in spelled_by_role(role, f"{prefix}{name}.").items():
                out.setdefault(sub, []).extend(names)
        else:
            out.setdefault(role, []).append(f"{prefix}{name}")
    return out


def by_role(values: Dict[str, Any], missing: Optional[Callable[[str], Any]] = None) -> Callable[[str, str], Any]:
    """A `value_for` for `bind_by_role`: the lab's values by role, a torch name (`module:`, `api:`)
    resolved, anything else `missing(path)` (default `Missing`: an error only if used)."""
    fallback = missing or Missing

    def value_for(role: str, path: str) -> Any:
        if role in values:
            return values[role]
        if role.startswith(("module:", "api:")):
            return resolve_qualname(role.split(":", 1)[1])
        return fallback(path)

    return value_for


def bind_by_role(roles: Dict[str, Any], value_for: Callable[[str, str], Any], label: str = "") -> Dict[str, Any]:
    """Free names -> values: `value_for(role, spelled path)` for each role, namespaces as
    `Namespace` objects, names no role binds as `Missing` (an error only if used)."""
    out: Dict[str, Any] = {}
    for name, role in roles.items():
        path = f"{label}{name}"
        if isinstance(role, dict):
            ns = Namespace(path)
            for attr, value in bind_by_role(role, value_for, f"{path}.").items():
                object.__setattr__(ns, attr, value)
            out[name] = ns
        elif role == "missing":
            out[name] = Missing(path)
        else:
            out[name] = value_for(role, path)
    return out


def _count_calls(obj: Any, method: str, counts: Dict[str, int]) -> None:
    original = getattr(obj, method)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        counts[method] = counts.get(method, 0) + 1
        return original(*args, **kwargs)

    setattr(obj, method, wrapper)


def run_training(lab: Any, spec: TrainingSpec, prepared: Prepared, scaler_enabled: bool) -> RunRecord:
    """Run the slice for `spec.iterations` micro-batches on fresh lab objects."""
    torch = lab.torch
    record = RunRecord(scaler_enabled=scaler_enabled)
    lab.seed_all()
    model = lab.model()
    params = list(model.parameters())
    start = [p.detach().clone() for p in params]
    named = spelled_by_role(prepared.roles)
    # one optimizer per spelled name, over disjoint parameters (two optimizers stepped through
    # one scaler are the documented multi-optimizer pattern, not one optimizer stepped twice)
    opt_names = named.get("optimizer") or ["<optimizer>"]
    optimizers = {
        name: lab.optimizer(params[i :: len(opt_names)] or params, spec.optimizer or "SGD", lr=spec.lr) for i, name in enumerate(opt_names)
    }
    opt = optimizers[opt_names[0]]
    counts = record.scaler_calls
    scalers = {name: lab.scaler(enabled=scaler_enabled) for name in named.get("scaler") or ["<scaler>"]}
    scaler = next(iter(scalers.values()))
    record.init_scale = float(scaler.get_scale())
    for each in scalers.values():
        for method in ("scale", "unscale_", "step", "update"):
            _count_calls(each, method, counts)

    def on_step(*_: Any) -> None:
        record.optimizer_steps += 1

    for each in optimizers.values():
        each.register_step_post_hook(on_step)
    criterion = torch.nn.MSELoss()
    wrapped = _tiny_model_wrapper(torch)(model, criterion)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda _s: 1.0)
    state = {"iteration": 0}
    if spec.overflow_at is not None:
        target = params[0]

        def poison(grad: Any) -> Any:
            if state["iteration"] == spec.overflow_at:
                return torch.full_like(grad, float("inf"))
            return grad

        target.register_hook(poison)
    threshold = spec.threshold if spec.threshold is not None else 1.0
    clips = record.clips
    with clip_recorder(torch, clips) as patched:

        def value_for(role: str, k: int, x: Any, y: Any) -> Any:
            if role.startswith("module:") or role.startswith("api:"):
                qual = role.split(":", 1)[1]
                short = qual.rsplit(".", 1)[-1]
                return patched.get(short) or resolve_qualname(qual)
            return {
                "scaler": scaler,
                "optimizer": opt,
                "criterion": criterion,
                "model": wrapped,
                "scheduler": scheduler,
                "params": params,
                "x": x,
                "y": y,
                "batch": Batch((x, y)),
                "index": k,
                "accum": lab.ACCUM,
                "threshold": threshold,
                "flag": True,
                "device": lab.device,
                "dtype": spec.dtype if spec.dtype is not None else torch.float32,
                "sink": Sink(),
                "loader": [Batch(lab.batch(j)) for j in range(lab.ACCUM)],
            }[role]

        def bind(roles: Dict[str, Any], k: int, x: Any, y: Any, loss: Any, label: str) -> Dict[str, Any]:
            out: Dict[str, Any] = {}
            for name, role in roles.items():
                if isinstance(role, dict):
                    ns = Namespace(f"{label}{name}")
                    for attr, value in bind(role, k, x, y, loss, f"{label}{name}.").items():
                        object.__setattr__(ns, attr, value)
                    out[name] = ns
                elif role == "missing":
                    out[name] = Missing(f"{label}{name}")
                elif role == "loss":
                    out[name] = loss_by_name.get(f"{label}{name}", loss)
                elif role == "optimizer":
                    out[name] = optimizers.get(f"{label}{name}", opt)
                elif role == "scaler":
                    out[name] = scalers.get(f"{label}{name}", scaler)
                else:
                    out[name] = value_for(role, k, x, y)
            return out

        globs = slice_globals(lab, {})
        for k in range(spec.iterations):
            state["iteration"] = k
            x, y = lab.batch(k)
            with lab.autocast(spec.dtype):
                loss = criterion(model(x).float(), y)
                # a second spelled loss (`loss_G`, `loss_D`) is its own forward pass: its own graph
                loss_by_name = {n: loss if i == 0 else criterion(model(x).float(), y) for i, n in enumerate(named.get("loss") or [])}
            globs.update(bind(prepared.roles, k, x, y, loss, ""))
            before = dict(counts)
            error = run_slice(prepared, globs)
            record.iterations_run = k + 1
            if error is not None:
                record.exception = {**lab.exc(error), "iteration": k, "line": _error_line(error)}
                break
            updated = counts["update"] > before["update"]
            stepped = counts["step"] > before["step"] or counts["unscale_"] > before["unscale_"]
            if not updated and (spec.complete_update == "always" or (spec.complete_update == "if-stepped" and stepped)):
                try:
                    scaler.update()
                except Exception as exc:  # noqa: BLE001
                    record.harness_update_error = {**lab.exc(exc), "iteration": k}
                    record.scale_history.append(lab.num(scaler.get_scale()))
                    break
            record.scale_history.append(lab.num(scaler.get_scale()))
    with torch.no_grad():
        delta = sum(float((p.detach().float() - s.float()).pow(2).sum()) for p, s in zip(params, start))
        record.param_delta = math.sqrt(delta) if math.isfinite(delta) else float("inf")
        record.nonfinite_params = int(sum(int((~torch.isfinite(p)).sum()) for p in params))
        record.delta = torch.cat([(p.detach().float() - s.float()).flatten() for p, s in zip(params, start)])
    return record


def slice_globals(lab: Any, env: Dict[str, Any]) -> Dict[str, Any]:
    """The globals a training-step slice runs in: the safe builtins, the names the slice's
    rewrites call (`return` as `__amplint_return__`, the lab's device), then `env`."""
    return {
        "__builtins__": _SAFE_BUILTINS,
        "__amplint_return__": _Return,
        "__amplint_device__": lab.device,
        "__amplint_device_type__": lab.device_type,
        **RUNTIME_NAMES,
        **env,
    }


def run_slice(prepared: Prepared, globs: Dict[str, Any]) -> Optional[Exception]:
    """Run the slice once in `globs` (from `slice_globals`): None when it ran to its end or
    a top-level `return`, else the exception the user's code raised (its traceback kept).
    A name no lab role could bind raises `Unbindable`: no verdict rests on such a run."""
    try:
        exec(prepared.code, globs)  # noqa: S102 - the user's own flagged code
    except _Return:
        return None
    except Unbound as exc:
        raise Unbindable(exc.names) from None
    except Exception as exc:  # noqa: BLE001
        return exc
    return None


def _error_line(exc: BaseException) -> Optional[int]:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<flagged code>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def compare_scaling(lab: Any, spec: TrainingSpec, prepared: Optional[Prepared] = None) -> Tuple[RunRecord, RunRecord]:
    """Run the slice with the GradScaler enabled and disabled (same seeds, same batches)."""
    prepared = prepared or prepare_training(spec)
    enabled = run_training(lab, spec, prepared, True)
    disabled = run_training(lab, spec, prepared, False)
    return enabled, disabled


def _tiny_module() -> Any:
    """A module passed into the flagged function (`head(model(x))`): a tiny real one that
    returns its input (worker side: torch is imported here only when a slice needs it)."""
    import torch

    return torch.nn.Identity()


@contextlib.contextmanager
def cuda_region(enabled: Any = True) -> Iterator[None]:
    """`torch.autocast("cuda", enabled=...)` of the user's code on a CPU-only lab (AMP303): sets
    CUDA autocast's thread-local flag as the real region does on a GPU (on CPU tensors it changes
    nothing; the real one would disable itself without CUDA)."""
    import torch

    before = torch.is_autocast_enabled("cuda")
    torch.set_autocast_enabled("cuda", bool(enabled))
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", before)


RUNTIME_NAMES.update(__amplint_missing__=Missing, __amplint_unbound__=Unbound, __amplint_module__=_tiny_module, __amplint_cuda_region__=cuda_region)
