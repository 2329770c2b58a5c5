"""One file's facts about distributed wrappers and precision settings: the "scale summary".

The rules of issue 23 (AMP801-AMP808) ask what a model object is wrapped by -- plain,
DDP, FSDP1 (`FullyShardedDataParallel`), FSDP2 (`fully_shard`), a DeepSpeed engine
(`deepspeed.initialize`), accelerate's `prepare`, Lightning Fabric's `setup` -- and what
precision the wrapper, its policy and its configuration set. This module reads, with
Python's `ast` only (no libcst, no torch), what one file says about that:

* `events`: the calls that matter, each with its function, position and `if` path:
  wrappers (`wrap`), framework and policy constructors (`ctor`: `Fabric(...)`,
  `Accelerator(...)`, `TrainingArguments(...)`, `DeepSpeedPlugin(...)`, `MixedPrecision(...)`,
  `MixedPrecisionPolicy(...)`, `GradScaler(...)`, Lightning strategies), torch clips
  (`clip`), `.backward(...)` (`back`), `.step(...)` (`step`), DDP comm hooks (`hook`),
  low-precision casts of modules (`cast`: `.bfloat16()`, `.half()`, `.to(dtype)`,
  `from_pretrained(torch_dtype=...)`, a model built under `torch.set_default_dtype(...)`),
  and autocast regions (`autocast`);
* `binds`/`returns`/`deps`: per function, what its names are bound to (as small value
  references), what it returns, and which names and callees each name's value reads
  (`loss` derives from `engine(...)`);
* `dicts`: dict literals shaped like a DeepSpeed config, with the line of each key;
* `paths`: string literals naming a `.json`/`.yaml` file (configs the code names);
* `holders`: the classes (nested ones too, `Trainer.Models`) whose generated constructor keeps
  each keyword argument as the attribute of its name -- a `@dataclass` or a `NamedTuple` that
  defines no `__init__` -- with their fields: `Models(generator=FSDP(g))` holds the FSDP module
  in `.generator` (`wrappers.ScaleView` reads such container attributes);
* `options`/`compared`/`refused`: the argparse options of the file (default, choices), the
  string literals the code compares a name to (`args.precision in ["16-mixed", "bf16"]`: the
  values it expects the option to take) and those an `if` refuses along with DeepSpeed
  (`if args.precision == "16" and args.deepspeed_config_path: raise ...`).

Spellings are kept as dotted text; `wrappers.py` resolves them across files. Computed only
for a file whose text holds one of `RELEVANT` (`relevant`), and only in projects where some
file holds a distributed API (`ANCHORS`): a project without these APIs never pays for it.
"""
from __future__ import annotations

import ast
import re
from typing import Any, Dict, List, Optional, Tuple

from .. import torchapi
from ..precision_names import lightning_precision
from ...core.pyast import parse
from .astutil import dotted, walk_expression
from .dtype_maps import read_dtype_map

#: bump when the shape changes (part of the cache entry)
VERSION = 16
#: a call that builds an optimizer by its name (`AdamW8bit`, `build_optimizer`, `Adafactor`)
_OPTIMIZER_NAME = re.compile(r"(?i)optimi[sz]er|adam|\bsgd\b|^sgd|lion|adafactor|lamb$")

#: a file holding one of these may wrap a model for distributed training or set its precision
#: outside autocast: the project model then reads scale summaries (the text index role "d")
ANCHORS = (
    "FullyShardedDataParallel", "fully_shard", "FSDP", "deepspeed", "DeepSpeed", "register_comm_hook",
    "MixedPrecision", "Fabric", "setup_module",
)
#: a file holding none of these has nothing a scale rule reads
RELEVANT = ANCHORS + (
    "clip_grad", "GradScaler", "backward", "step(", "set_default_dtype", "set_default_tensor_type", "bfloat16", "float16",
    "half(", "torch_dtype", "Accelerator", "TrainingArguments", ".json", ".yaml", ".yml", "autocast", "fp16", "bf16",
    "zero_optimization",
)

FSDP1 = frozenset((
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
))
FSDP2 = frozenset((
    "torch.distributed.fsdp.fully_shard",
    "torch.distributed.fsdp._fully_shard.fully_shard",
    "torch.distributed.fsdp._fully_shard._fully_shard.fully_shard",
    "torch.distributed._composable.fsdp.fully_shard",
    "torch.distributed._composable.fsdp.fully_shard.fully_shard",
))
#: `wrap(module)` wraps with the `wrapper_cls` of the `enable_wrap(...)` context it runs in (a
#: no-op outside one); `enable_wrap` sets that class and its keyword arguments
CONTEXT_WRAPS = frozenset(("torch.distributed.fsdp.wrap.wrap",))
ENABLE_WRAPS = frozenset(("torch.distributed.fsdp.wrap.enable_wrap",))
DDP = frozenset(("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel"))
DEEPSPEED_INIT = frozenset(("deepspeed.initialize",))
FSDP1_POLICIES = frozenset((
    "torch.distributed.fsdp.MixedPrecision",
    "torch.distributed.fsdp.api.MixedPrecision",
    "torch.distributed.fsdp.fully_sharded_data_parallel.MixedPrecision",
))
FSDP2_POLICIES = frozenset((
    "torch.distributed.fsdp.MixedPrecisionPolicy",
    "torch.distributed.fsdp._fully_shard.MixedPrecisionPolicy",
    "torch.distributed.fsdp._fully_shard._fsdp_api.MixedPrecisionPolicy",
    "torch.distributed._composable.fsdp.MixedPrecisionPolicy",
    "torch.distributed._composable.fsdp.fully_shard.MixedPrecisionPolicy",
))
SHARDED_SCALERS = frozenset((
    "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    "torch.distributed.fsdp.ShardedGradScaler",
))
PLAIN_SCALERS = frozenset(q for q in torchapi.GRAD_SCALERS if q not in SHARDED_SCALERS)
FABRICS = frozenset(("lightning.Fabric", "lightning.fabric.Fabric", "lightning.fabric.fabric.Fabric", "lightning_fabric.Fabric", "lightning_fabric.fabric.Fabric"))
ACCELERATORS = frozenset(("accelerate.Accelerator", "accelerate.accelerator.Accelerator"))
DS_PLUGINS = frozenset(("accelerate.DeepSpeedPlugin", "accelerate.utils.DeepSpeedPlugin", "accelerate.utils.dataclasses.DeepSpeedPlugin"))
HF_ARGS = frozenset((
    "transformers.TrainingArguments", "transformers.Seq2SeqTrainingArguments",
    "transformers.training_args.TrainingArguments", "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
))
COMM_HOOKS = {
    "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook": "fp16",
    "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_wrapper": "fp16",
    "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.bf16_compress_hook": "bf16",
    "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.bf16_compress_wrapper": "bf16",
}
#: `ddp_comm_hooks/__init__.py` re-exports the module as `default` (`from . import default_hooks as default`)
COMM_HOOKS.update({q.replace(".default_hooks.", ".default."): d for q, d in list(COMM_HOOKS.items())})
#: TransformerEngine's FP8 regions (`fp8_autocast` is deprecated for `autocast` in TE 2.x)
TE_AUTOCASTS = frozenset((
    "transformer_engine.pytorch.fp8_autocast", "transformer_engine.pytorch.fp8.fp8_autocast",
    "transformer_engine.pytorch.quantization.fp8_autocast", "transformer_engine.pytorch.autocast",
    "transformer_engine.pytorch.quantization.autocast",
))
#: TransformerEngine modules whose weights run FP8 GEMMs: (in, out) parameter names
TE_LINEARS = {
    "Linear": ("in_features", "out_features"),
    "LayerNormLinear": ("in_features", "out_features"),
    "LayerNormMLP": ("hidden_size", "ffn_hidden_size"),
}
TORCH_LINEARS = frozenset(("torch.nn.Linear", "torch.nn.modules.linear.Linear"))
FLOAT8_CONVERTERS = frozenset(("torchao.float8.convert_to_float8_training", "torchao.float8.float8_linear_utils.convert_to_float8_training"))
#: calls whose first argument is only looked at for its type
_TYPE_CHECKS = frozenset(("isinstance", "issubclass", "type"))
#: Lightning strategy classes by last name (their package is checked too)
_LIGHTNING_ROOTS = ("lightning", "lightning_fabric", "pytorch_lightning")
_STRATEGIES = {"FSDPStrategy": "fsdp", "DeepSpeedStrategy": "deepspeed", "DDPStrategy": "ddp", "ModelParallelStrategy": "fsdp2"}
_LOW_TENSOR_TYPES = {"torch.HalfTensor": "fp16", "torch.cuda.HalfTensor": "fp16", "torch.BFloat16Tensor": "bf16", "torch.cuda.BFloat16Tensor": "bf16"}
#: methods that return the module they are called on
_KEEPING = frozenset(("cuda", "cpu", "to", "train", "eval", "half", "float", "bfloat16", "requires_grad_", "type", "xpu", "double", "to_empty"))
#: calls that return their module compiled (`OptimizedModule`: the same parameters, the same wrapper)
COMPILERS = frozenset(("torch.compile",))
#: top-level keys that make a dict literal a DeepSpeed config
_DS_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "zero_optimization", "gradient_accumulation_steps", "gradient_clipping", "steps_per_print", "fp16", "bf16")
_CONFIG_SUFFIXES = (".json", ".yaml", ".yml")
#: class decorators whose generated `__init__` keeps each keyword argument as its attribute
_HOLDER_DECORATORS = frozenset(("dataclass", "define", "frozen", "mutable"))

Summary = Dict[str, Any]


def deepspeed_in_use(test: ast.AST, negated: bool = False) -> Optional[bool]:
    """Whether DeepSpeed is in use where the `if` test holds (`negated`: where it fails), as
    the test spells it: a flag whose name says DeepSpeed (`args.deepspeed`, `self.use_deepspeed`,
    `accelerator.state.deepspeed_plugin`; not a call such as `is_deepspeed_available()`), its
    `not`, `is None` / `is not None` / `== False` comparisons, `isinstance(m, DeepSpeedEngine)`,
    `distributed_type == DistributedType.DEEPSPEED`, a choice compared to a string naming
    DeepSpeed (`train_engine == "deepspeed"`, `!=`, `in ("deepspeed", "ds_zero3")` with every
    string naming it), and an `and` (an `or`, negated) holding one. A flag may be the switch of a
    config section naming DeepSpeed (`config.deepspeed.enable`, `args.deepspeed.enabled`), and
    `hasattr(config, "deepspeed")` failing says DeepSpeed is off (holding, nothing). An `and`
    failing (an `or` holding) says what every side says alike (`hasattr(config, "deepspeed")
    and config.deepspeed.enable` failing: off). None: the test says nothing about it."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return deepspeed_in_use(test.operand, not negated)
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And) == negated:
            # an `or` holding, an `and` failing: one side's case at least, so only what all say
            said = {deepspeed_in_use(side, negated) for side in test.values}
            return said.pop() if len(said) == 1 else None
        for side in test.values:
            found = deepspeed_in_use(side, negated)
            if found is not None:
                return found
        return None
    if isinstance(test, (ast.Name, ast.Attribute)):
        return (not negated) if _flag_names_deepspeed(test) else None
    if isinstance(test, ast.Call) and dotted(test.func) == "isinstance" and len(test.args) == 2:
        return (not negated) if "deepspeed" in ast.dump(test.args[1]).lower() else None
    if isinstance(test, ast.Call) and dotted(test.func) == "hasattr" and len(test.args) == 2 and not test.keywords:
        return False if negated and _string_naming_deepspeed(test.args[1]) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(left, (ast.Name, ast.Attribute)) and _flag_names_deepspeed(left) and isinstance(right, ast.Constant):
            if right.value is None or right.value is False:
                used = isinstance(op, (ast.IsNot, ast.NotEq))
            elif right.value is True:
                used = isinstance(op, (ast.Is, ast.Eq))
            else:
                return None
            if not isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)):
                return None
            return used != negated
        if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Attribute) and right.attr.upper() == "DEEPSPEED":
            return isinstance(op, ast.Eq) != negated
        if isinstance(op, (ast.Eq, ast.NotEq)) and _string_naming_deepspeed(right):
            return isinstance(op, ast.Eq) != negated  # `train_engine == "deepspeed"`: the engine chosen by name
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) and right.elts:
            if all(_string_naming_deepspeed(e) for e in right.elts):
                return isinstance(op, ast.In) != negated
    return None


#: module methods that run no forward: a layer only these reach never runs its GEMM
_NO_FORWARD = frozenset((
    "state_dict", "load_state_dict", "named_parameters", "parameters", "buffers", "named_buffers",
    "modules", "named_modules", "children", "named_children", "extra_repr", "get_extra_state", "set_extra_state",
))


def _state_only_result(fn: Any, call: ast.Call, parents: Dict[int, ast.AST]) -> bool:
    """`call`'s result is bound to a local name of `fn` (`module = self._make_module(name)`)
    every load of which in `fn` is the receiver of a `_NO_FORWARD` method called, or the first
    argument of a type check; the name bound nowhere else in `fn`."""
    stmt = parents.get(id(call))
    if not (isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return False
    local = stmt.targets[0].id
    for node in ast.walk(fn):
        if not isinstance(node, ast.Name) or node.id != local:
            continue
        if isinstance(node.ctx, ast.Store):
            if node is not stmt.targets[0]:
                return False  # bound again: what it holds there is not known here
            continue
        up = parents.get(id(node))
        if isinstance(up, ast.Attribute) and up.attr in _NO_FORWARD:
            caller = parents.get(id(up))
            if isinstance(caller, ast.Call) and caller.func is up:
                continue
        if isinstance(up, ast.Call) and isinstance(up.func, ast.Name) and up.func.id in _TYPE_CHECKS and up.args and up.args[0] is node:
            continue
        return False
    return True


def _mentioned_outside_calls(tree: ast.Module, name: str) -> bool:
    """`name` is read other than as the callee of a call (`fn = self._make_module`, `map(_make, ...)`)."""
    callees = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callees.add(id(node.func))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) and id(node) not in callees:
            return True
        if isinstance(node, ast.Attribute) and node.attr == name and id(node) not in callees:
            return True
    return False


def _string_naming_deepspeed(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and "deepspeed" in node.value.lower()


def _vars_of(node: Optional[ast.AST]) -> Optional[str]:
    """`vars(args)` / `args.__dict__`: the namespace spelled, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" and len(node.args) == 1:
        return dotted(node.args[0])
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return dotted(node.value)
    return None


def _compared_literals(node: ast.Compare) -> List[Tuple[str, List[Any]]]:
    """`args.precision == "16"`, `str(args.precision) in ["16-mixed", "bf16"]`: the dotted name
    compared (through `str(...)`) and the string or integer literals it is compared to."""
    out: List[Tuple[str, List[Any]]] = []
    left = node.left
    if isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "str" and len(left.args) == 1:
        left = left.args[0]
    name = dotted(left) if isinstance(left, ast.Attribute) else None
    if name is None:
        return out
    values: List[Any] = []
    for op, right in zip(node.ops, node.comparators):
        if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
            continue
        elts = right.elts if isinstance(right, (ast.List, ast.Tuple, ast.Set)) else [right]
        for e in elts:
            v = _constant(e)
            if isinstance(v, (str, int)) and not isinstance(v, bool):
                values.append(v)
    if values:
        out.append((name, values))
    return out


def _names_deepspeed(node: ast.AST) -> bool:
    spelled = dotted(node)
    return spelled is not None and "deepspeed" in spelled.rsplit(".", 1)[-1].lower()


#: the switch of a config section (`config.deepspeed.enable`)
_SWITCHES = frozenset(("enable", "enabled", "use", "on", "active"))


def _flag_names_deepspeed(node: ast.AST) -> bool:
    """A flag naming DeepSpeed: `args.deepspeed`, `self.use_deepspeed`, or a section's switch
    (`config.deepspeed.enable`)."""
    if _names_deepspeed(node):
        return True
    return isinstance(node, ast.Attribute) and node.attr.lower() in _SWITCHES and _names_deepspeed(node.value)


def relevant(source: str) -> bool:
    return any(word in source for word in RELEVANT)


def anchored(source: str) -> bool:
    """Whether the text may use a distributed wrapper or precision API (text index role "d")."""
    return any(word in source for word in ANCHORS)


def summarize(source: str) -> Optional[Summary]:
    """The scale summary of one Python text; None when it does not parse. Asked only for the
    files of a project some file of which may use a distributed API (`index.scale_universe`)
    and for a file passing a wrapper rule's gate."""
    tree = parse(source)
    if tree is None:
        return None
    return _Reader(source).run(tree)


def summarize_both(source: str) -> Tuple[Optional[Dict[str, Any]], Optional[Summary]]:
    """The project summary (`summary.py`) and the scale summary of one text from one parse: the
    project pass wants both for the files of a project with a distributed API."""
    from .summary import _Summarizer

    tree = parse(source)
    if tree is None:
        return None, None
    return _Summarizer(source).run(tree), _Reader(source).run(tree)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines()
        #: the offset of each line's start (by "\n"), made when `_may_fake` first asks
        self._starts: Optional[List[int]] = None
        self._dict_index: Dict[Tuple[int, int], int] = {}
        self.default_open: Dict[str, Optional[Dict[str, Any]]] = {}  # per function: an open low-precision set_default_dtype
        self.imports: Dict[str, List[Any]] = {}
        self.classes: Dict[str, Dict[str, Any]] = {}
        self.functions: Dict[str, Dict[str, Any]] = {}
        self.binds: Dict[str, Dict[str, List[Any]]] = {}
        self.returns: Dict[str, List[Any]] = {}
        self.deps: Dict[str, Dict[str, List[List[str]]]] = {}
        self.uses: Dict[str, List[str]] = {}
        self.events: List[Dict[str, Any]] = []
        self.dicts: List[Dict[str, Any]] = []
        self.paths: List[Dict[str, Any]] = []
        self.mutated: Dict[str, List[str]] = {}  # per function: names whose dict is changed in place
        self.path: List[List[int]] = []  # the `if` frames around the statement read: [id, branch]
        self._tests: Dict[int, ast.AST] = {}  # each `if` frame's test (its text goes on scaler and hook events)
        # a project's own DDP comm hook is recognised by what its body does (it reduces a bucket)
        self._reduces = any(w in source for w in ("all_reduce", "allreduce", "reduce_scatter"))
        self.no_engine = 0  # `if` branches around it taken only when DeepSpeed is not in use
        self.on_engine = 0  # `if` branches around it taken only when DeepSpeed is in use
        self._walked: Tuple[Any, List[ast.AST]] = (None, [])  # the last expression `_expression` walked, its nodes
        self._bodies: Dict[str, List[ast.stmt]] = {}  # per function: its statements (`_single_value`)
        self._methods: Dict[str, Dict[str, Any]] = {}  # per module-level class: its methods' defs by name
        self.holders: Dict[str, List[str]] = {}  # container classes (`@dataclass`, `NamedTuple`): their fields
        self.options: Dict[str, Dict[str, Any]] = {}  # argparse options by dest: default, choices, position
        self.compared: Dict[str, List[Any]] = {}  # `args.precision in ["16-mixed", ...]`: the literals a name is compared to
        self.refused: Dict[str, List[Any]] = {}  # the literals a guard refuses along with DeepSpeed (`raise`)

    # ------------------------------------------------------------------ driver

    def run(self, tree: ast.Module) -> Summary:
        from .astutil import import_bindings

        self.imports = import_bindings(tree.body)[0]
        self._function("<module>", tree.body, None, [], 1)
        self._type_probes(tree, "<module>")
        self._state_only_builders(tree)
        return {
            "v": VERSION,
            "imports": self.imports,
            "classes": self.classes,
            "functions": self.functions,
            "binds": self.binds,
            "returns": self.returns,
            "deps": self.deps,
            "uses": self.uses,
            "events": self.events,
            "dicts": self.dicts,
            "paths": self.paths,
            "mutated": self.mutated,
            "holders": self.holders,
            "options": self.options,
            "compared": self.compared,
            "refused": self.refused,
        }

    def qualname(self, spelled: Optional[str]) -> Optional[str]:
        if not spelled:
            return None
        root, _, rest = spelled.partition(".")
        target = self.imports.get(root)
        if target is None or target[0]:
            return None
        base = f"{target[1]}.{target[2]}" if target[2] else target[1]
        return f"{base}.{rest}" if rest else base

    def dtype(self, node: Optional[ast.AST]) -> Optional[str]:
        """'fp16' | 'bf16' | 'fp32' for a dtype literal (`torch.float16`, `"bf16"`); '?' for
        anything else (decided at run time); None for no node."""
        if node is None:
            return None
        if isinstance(node, ast.Constant):
            if node.value is None:
                return None
            if isinstance(node.value, str):
                return torchapi.DTYPE_STRINGS.get(node.value.replace("torch.", ""), "?")
            return "?"
        found = torchapi.dtype_of_qualname(self.qualname(dotted(node)))
        return found or "?"

    def dtype_choice(self, node: Optional[ast.AST], qual: str = "<module>") -> Optional[Dict[str, Any]]:
        """A dtype picked at run time from a dict literal by an option (`{"fp16": torch.float16,
        "bf16": torch.bfloat16}[args.mixed_precision]`, also `[args.grad_precision or
        args.mixed_precision]`): {"k": the string keys that pick fp16, "o": the options'
        attribute names}; None for anything else, or when no key picks fp16. The pick may be
        a plain name of function `qual` (or of the module) bound once, by that subscript
        (`dtype = {...}[args.precision]` then `reduce_dtype=dtype`), and the dict a name bound
        once to a dict literal and never changed in place (`DTYPES = {...}` then
        `DTYPES[args.precision]`)."""
        if isinstance(node, ast.Name):
            node = self._single_value(node.id, qual)
        if not isinstance(node, ast.Subscript):
            return None
        table = node.value
        if isinstance(table, ast.Name):
            if self._changed(table.id, qual):
                return None  # `DTYPES["fp16"] = ...`: the literal is not what is read
            table = self._single_value(table.id, qual)
        if not isinstance(table, ast.Dict):
            return None
        keys = []
        for key, value in zip(table.keys, table.values):
            if not isinstance(key, ast.Constant) or not isinstance(key.value, str):
                return None
            found = self.dtype(value)
            if found not in ("fp16", "bf16", "fp32"):
                return None
            if found == "fp16":
                keys.append(key.value)
        index = node.slice
        operands = index.values if isinstance(index, ast.BoolOp) and isinstance(index.op, ast.Or) else [index]
        options = []
        for operand in operands:
            if not isinstance(operand, ast.Attribute) or not isinstance(operand.value, ast.Name):
                return None
            options.append(operand.attr)
        return {"k": keys, "o": options} if keys else None

    def dtype_mapping(self, node: Optional[ast.AST], qual: str) -> Optional[Dict[str, Any]]:
        """A dtype read from a property (or an argument-less method) of the class of method `qual`
        that maps a setting's string values to dtype literals and maps one to `torch.float16`
        (`self.autocast_precision`, whose body is `if self.precision == "amp_bf16": return
        torch.bfloat16 elif self.precision == "amp_fp16": return torch.float16 ... else: raise`):
        the class's own code names that value as supported. {"k": the values that pick fp16, "o":
        the setting's attribute, "p": the property, "pr": the row of its fp16 return}; None for
        anything else: another shape of body, a test that is not the one setting compared with
        string literals, a return that is not a dtype literal, no value picking fp16
        (`dtype_maps.read_dtype_map`, AMP105's reader too)."""
        call = isinstance(node, ast.Call)
        if call:
            if node.args or node.keywords:
                return None
            node = node.func
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"):
            return None
        cls = self.functions.get(qual, {}).get("cls")
        found = (self._methods.get(cls) or {}).get(node.attr) if cls else None
        if found is None:
            return None
        mapping = read_dtype_map(found, self._float_dtype)
        if mapping is None or mapping.setting is None or mapping.kind != ("method" if call else "property"):
            return None  # not the chain, a property called, a method read without a call, another decorator
        keys = [value for value, dtype in mapping.values.items() if dtype == "fp16"]
        if not keys:
            return None
        return {"k": keys, "o": mapping.setting, "p": node.attr, "pr": mapping.rows[keys[0]]}

    def _float_dtype(self, node: ast.AST) -> Optional[str]:
        """`dtype`'s answer for a dtype literal ('fp16', 'bf16', 'fp32'), else None."""
        found = self.dtype(node)
        return found if found in ("fp16", "bf16", "fp32") else None

    def _context_shards(self, node: ast.Call, kw: Dict[str, ast.AST], qual: str) -> Optional[List[str]]:
        """The sharding strategies an `enable_wrap(...)` call may set: its `sharding_strategy=`,
        or the one of the options dict it spreads (`**fsdp_args`, bound once in the function to
        a `dict(...)` call or a dict literal it never changes in place); a strategy spelled as a
        name bound once to a choice of strategies gives each. [] when none is set (FSDP's
        default, FULL_SHARD); None when not known (a parameter, a dict built otherwise)."""
        options: Dict[str, ast.AST] = dict(kw)
        for k in node.keywords:
            if k.arg is not None:
                continue
            spread = k.value
            if isinstance(spread, ast.Name):
                if self._changed(spread.id, qual):
                    return None
                spread = self._single_value(spread.id, qual)
            if isinstance(spread, ast.Call) and dotted(spread.func) == "dict" and not spread.args:
                if any(i.arg is None for i in spread.keywords):
                    return None
                options.update({i.arg: i.value for i in spread.keywords if i.arg})
            elif isinstance(spread, ast.Dict) and all(isinstance(key, ast.Constant) for key in spread.keys):
                options.update({key.value: v for key, v in zip(spread.keys, spread.values)})  # type: ignore[union-attr]
            else:
                return None
        value = options.get("sharding_strategy")
        if value is None:
            return []
        if isinstance(value, ast.Name):
            value = self._single_value(value.id, qual)
        choices = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        out = [dotted(c) for c in choices]
        return None if any(not c for c in out) else out  # type: ignore[return-value]

    def _changed(self, name: str, qual: str) -> bool:
        """Whether function `qual` or the module changes the dict `name` in place (`name[k] = v`,
        `del name[k]`, `name.update(...)` and the like)."""
        for scope in dict.fromkeys((qual, "<module>")):
            for node in _own_nodes(self._bodies.get(scope) or []):
                if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
                    base = node.value
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _DICT_CHANGES:
                    base = node.func.value
                else:
                    continue
                if isinstance(base, ast.Name) and base.id == name:
                    return True
        return False

    def _single_value(self, name: str, qual: str) -> Optional[ast.AST]:
        """The value of the one plain assignment `name = value` of function `qual`'s own body
        (nested functions and classes apart), or of the module's when the function neither binds
        nor takes `name`; None when the name is bound otherwise (a parameter, a loop, a `with`,
        an unpacking, an augmented or annotated-only assignment) or more than once."""
        scopes = [qual]
        while "." in scopes[-1] and scopes[-1].rsplit(".", 1)[0] in self._bodies:
            scopes.append(scopes[-1].rsplit(".", 1)[0])  # a nested function: the one around it
        if qual != "<module>":
            scopes.append("<module>")
        for scope in scopes:
            body = self._bodies.get(scope)
            if body is None:
                return None
            if scope != "<module>" and name in self.functions.get(scope, {}).get("params", ()):
                return None
            values: List[Optional[ast.AST]] = []
            for node in _own_nodes(body):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name) and target.id == name:
                            values.append(node.value)
                        elif any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target)):
                            values.append(None)
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.withitem, ast.NamedExpr)):
                    target = node.optional_vars if isinstance(node, ast.withitem) else node.target
                    if target is not None and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target)):
                        values.append(node.value if isinstance(node, ast.AnnAssign) else None)
                elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
                    return None
            if values:
                return values[0] if len(values) == 1 else None
        return None

    # ------------------------------------------------------------------ scopes

    def _function(self, qual: str, body: List[ast.stmt], cls: Optional[str], params: List[str], line: int) -> None:
        self.functions[qual] = {"cls": cls or "", "params": params, "r": line}
        self._bodies[qual] = body
        outer, outer_off, outer_on = self.path, self.no_engine, self.on_engine
        self.path, self.no_engine, self.on_engine = [], 0, 0
        for stmt in body:
            self._statement(stmt, qual, cls)
        self.path, self.no_engine, self.on_engine = outer, outer_off, outer_on

    def _def(self, node: Any, outer: str, cls: Optional[str]) -> None:
        qual = node.name if outer == "<module>" else f"{outer}.{node.name}"
        if cls is not None and outer == cls:
            qual = f"{cls}.{node.name}"
        args = node.args
        params = [a.arg for a in (*getattr(args, "posonlyargs", []), *args.args, *args.kwonlyargs)]
        self._function(qual, node.body, cls if outer == cls else None, params, node.lineno)
        self._type_probes(node, qual)
        faked = _faked_sharders(node) if self._may_fake(node) else ()
        if faked:
            self.functions[qual]["fakes"] = faked
        if self._reduces and len(params) >= 2:
            d = self._compress_dtype(node)
            if d is not None:
                self.functions[qual]["hook"] = d

    def _type_probes(self, node: Any, qual: str) -> None:
        """Mark the FP8 linear layers built in function `qual` (`node`) only for a type check, so
        that no forward of theirs can run (`"probe": 1`): the call is the first argument of
        `isinstance`/`issubclass`/`type`, or it is bound to a local name of the function every
        load of which is (none at all included): MS-AMP's `te_linear = te.Linear(4, 4); assert
        isinstance(te_linear, MSAMPLinear)`. A name bound at module level may be imported: not
        marked. What the function does with the name otherwise (a call, an argument, a return, a
        container, an attribute) keeps the layer live."""
        linears = [e for e in self.events if e["e"] == "linear" and e["f"] == qual]
        if not linears:
            return
        probed: set = set()  # (row, column) of the calls a type check takes as its argument
        loads: Dict[str, int] = {}  # local name -> its loads that are no type check
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in _TYPE_CHECKS and sub.args:
                first = sub.args[0]
                if isinstance(first, ast.Call):
                    pos = self._position(first)
                    probed.add((pos["r"], pos["c"]))
            elif isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Store):
                loads[sub.id] = loads.get(sub.id, 0) + 1
        for sub in ast.walk(node):
            # a load as a type check's first argument is no use of the layer
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in _TYPE_CHECKS and sub.args:
                first = sub.args[0]
                if isinstance(first, ast.Name) and first.id in loads:
                    loads[first.id] -= 1
        for e in linears:
            t = e.get("t")
            if (e["r"], e["c"]) in probed or (qual != "<module>" and t and "." not in t and not loads.get(t)):
                e["probe"] = 1

    def _state_only_builders(self, tree: ast.Module) -> None:
        """Mark the FP8 linear layers a private builder of the file returns as it builds them
        (`return te.Linear(1, 1)` in `_make_module`) when no forward of theirs can run: the
        builder is called in the file, and every call binds its result to a local name of a
        function each load of which is the receiver of a method that runs no forward
        (`state_dict`, `load_state_dict`, `named_parameters`, ...; TransformerEngine's
        checkpoint test builds modules only to save and load their state) or a type check's
        argument. A public builder may be called from another file: not marked."""
        candidates = [
            e for e in self.events
            if e["e"] == "linear" and not e.get("probe") and e["f"] != "<module>" and e["f"].rsplit(".", 1)[-1].startswith("_")
        ]
        if not candidates:
            return
        returned: Dict[str, set] = {}  # builder name -> the (row, column) of the calls it returns as built
        for qual in {e["f"] for e in candidates}:
            body = self._bodies.get(qual) or []
            for stmt in body:
                for sub in ast.walk(stmt):  # a nested function's return holds its own events, matched to none here
                    if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Call):
                        pos = self._position(sub.value)
                        returned.setdefault(qual, set()).add((pos["r"], pos["c"]))
        marked = [e for e in candidates if (e["r"], e["c"]) in returned.get(e["f"], set())]
        if not marked:
            return
        names = {e["f"].rsplit(".", 1)[-1] for e in marked}
        verdict: Dict[str, bool] = {}
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            parents: Dict[int, ast.AST] = {}
            for node in ast.walk(fn):
                for child in ast.iter_child_nodes(node):
                    parents[id(child)] = node
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else None
                if name not in names:
                    continue
                verdict[name] = verdict.get(name, True) and _state_only_result(fn, node, parents)
        for name in names:
            # a bare mention elsewhere (`fn = self._make_module`, a module-level call) may hand it on
            verdict[name] = verdict.get(name, False) and not _mentioned_outside_calls(tree, name)
        for e in marked:
            if verdict.get(e["f"].rsplit(".", 1)[-1]):
                e["probe"] = 1

    def _may_fake(self, node: Any) -> bool:
        """Whether `_faked_sharders(node)` can find a fake: every call it counts is named
        `setattr`, `patch` or `object`, and that identifier is written in the lines of the
        function (its decorators to its last line; an ASCII text spells identifiers as they are,
        NFKC leaves ASCII alone). Most functions name none of them, and the walk of every node
        of every function (nested ones again) was ~a fifth of a scale summary. A text with a lone
        CR (a line break for CPython's line numbers, not for the offsets here) is always walked."""
        starts = self._starts
        if starts is None:
            source = self.source
            if source.count("\r") != source.count("\r\n"):
                return True
            starts = self._starts = [0, *(m.end() for m in re.finditer("\n", source))]
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        last = getattr(node, "end_lineno", None)
        if last is None or first < 1 or last > len(starts):
            return True
        text = self.source[starts[first - 1] : starts[last] if last < len(starts) else len(self.source)]
        if not text.isascii():
            return True
        return "setattr" in text or "patch" in text or "object" in text

    def _compress_dtype(self, node: Any) -> Optional[str]:
        """'fp16' | 'bf16' when the function is a gradient-compression comm hook of the project's
        own (a copy of torch's `fp16_compress_hook`): it casts a tensor to the low dtype and
        all-reduces (or reduce-scatters) it, or it calls torch's compress hook itself."""
        casts: set = set()
        reduces = False
        for sub in ast.walk(node):
            if not isinstance(sub, ast.Call):
                continue
            spelled = dotted(sub.func) or ""
            last = spelled.rsplit(".", 1)[-1]
            if last in ("all_reduce", "allreduce", "reduce_scatter", "reduce_scatter_tensor", "all_reduce_coalesced"):
                reduces = True
            hq = self.qualname(spelled)
            if hq in COMM_HOOKS:
                return COMM_HOOKS[hq]
            if isinstance(sub.func, ast.Attribute) and sub.func.attr in ("to", "half", "bfloat16", "type"):
                tag = self._method_tag(sub)
                if tag in ("to:fp16", "to:bf16"):
                    casts.add(tag[3:])
        if reduces and len(casts) == 1:
            return casts.pop()
        return None

    def _statement(self, stmt: ast.stmt, qual: str, cls: Optional[str]) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._def(stmt, qual, None)
            return
        if isinstance(stmt, ast.ClassDef):
            if qual == "<module>":
                self._holders(stmt, stmt.name, 0)
                self.classes[stmt.name] = {"bases": [dotted(b) or "" for b in stmt.bases], "r": stmt.lineno}
                self._methods[stmt.name] = {s.name: s for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
                for s in stmt.body:
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self._def(s, stmt.name, stmt.name)
            return
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            opened = []
            for item in stmt.items:
                self._expression(item.context_expr, qual)
                event = self._with_item(item.context_expr, qual, stmt)
                if event is not None:
                    opened.append(event)
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, item.context_expr, qual, cls)
            for s in stmt.body:
                self._statement(s, qual, cls)
            return
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            value = stmt.value
            if value is None:
                return
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            self._expression(value, qual, targets=targets)
            for target in targets:
                self._mutation(target, qual)
                self._sharding_set(target, value, stmt, qual)
                self._bind(target, value, qual, cls)
            return
        if isinstance(stmt, ast.Return):
            if stmt.value is not None:
                self._expression(stmt.value, qual)
                ref = self.vref(stmt.value)
                if ref is not None:
                    self.returns.setdefault(qual, []).append(ref)
            return
        if isinstance(stmt, ast.Expr):
            self._expression(stmt.value, qual, statement=True)
            return
        if isinstance(stmt, ast.AugAssign):
            self._expression(stmt.value, qual)
            self._mutation(stmt.target, qual)
            return
        if isinstance(stmt, ast.If):
            self._expression(stmt.test, qual)
            if stmt.body and isinstance(stmt.body[0], ast.Raise) and any(_names_deepspeed(n) for n in walk_expression(stmt.test)):
                for n in walk_expression(stmt.test):
                    if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Eq, ast.In)):
                        for name, values in _compared_literals(n):
                            known = self.refused.setdefault(name, [])
                            known.extend(v for v in values if v not in known and len(known) < 32)
            frame = stmt.lineno * 1000 + stmt.col_offset
            self._tests[frame] = stmt.test
            for branch, body in ((0, stmt.body), (1, stmt.orelse)):
                used = deepspeed_in_use(stmt.test, negated=branch == 1)
                off, on = used is False, used is True
                self.path.append([frame, branch])
                self.no_engine += off
                self.on_engine += on
                for s in body:
                    self._statement(s, qual, cls)
                self.no_engine -= off
                self.on_engine -= on
                self.path.pop()
            return
        for name, value in ast.iter_fields(stmt):
            if isinstance(value, list):
                for v in value:
                    if isinstance(v, ast.stmt):
                        self._statement(v, qual, cls)
                    elif isinstance(v, ast.excepthandler):
                        for s in v.body:
                            self._statement(s, qual, cls)
                    elif hasattr(ast, "match_case") and isinstance(v, ast.match_case):
                        for s in v.body:
                            self._statement(s, qual, cls)
                    elif isinstance(v, ast.expr):
                        self._expression(v, qual)
            elif isinstance(value, ast.expr):
                self._expression(value, qual)
            if name == "target" and isinstance(stmt, (ast.For, ast.AsyncFor)) and isinstance(stmt.target, ast.Name):
                self.deps.setdefault(qual, {}).setdefault(stmt.target.id, [[], []])

    def _holders(self, node: ast.ClassDef, qual: str, depth: int) -> None:
        """Record `node` (and the classes nested in it, a level or two) when it is a container
        whose constructor keeps its keyword arguments as attributes of their names: decorated
        `@dataclass` / `@dataclass(...)` (or attrs' `@define`/`@frozen`), or a `NamedTuple`, and
        defining neither `__init__` nor `__post_init__` (which may bind something else); its
        fields in order, or none when a base class may declare fields before them (then only
        keyword arguments are read)."""
        body = node.body
        own = {s.name for s in body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
        decorators = {(dotted(d.func if isinstance(d, ast.Call) else d) or "").rsplit(".", 1)[-1] for d in node.decorator_list}
        bases = {(dotted(b) or "").rsplit(".", 1)[-1] for b in node.bases}
        if (decorators & _HOLDER_DECORATORS or "NamedTuple" in bases) and not own & {"__init__", "__post_init__", "__attrs_post_init__"}:
            fields = [s.target.id for s in body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
            # positional arguments fill the fields in order only when no base class declares some first
            self.holders[qual] = fields[:64] if not bases - {"NamedTuple", "object", ""} else []
        if depth < 2:
            for s in body:
                if isinstance(s, ast.ClassDef):
                    self._holders(s, f"{qual}.{s.name}", depth + 1)

    # ------------------------------------------------------------------ values

    def vref(self, node: Optional[ast.AST], depth: int = 0) -> Optional[Dict[str, Any]]:
        """A small reference to what an expression is: {"c": callee, "a": [args], "k": {kw}, "m": [methods]},
        {"n": name}, {"s": string}, {"dl": dict index}, {"o": opened file}, {"j": json.load of}."""
        if node is None or depth > 4:
            return None
        methods: List[str] = []
        while isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr in _KEEPING:
                methods.append(self._method_tag(node))
                node = node.func.value
                continue
            compiled = self._compiled(node)
            if compiled is None:
                break
            node = compiled  # `torch.compile(FSDP(m))` wraps the FSDP module: its parameters, its kind
        methods.reverse()
        out: Optional[Dict[str, Any]] = None
        if isinstance(node, ast.Call):
            spelled = dotted(node.func)
            if spelled is not None:
                q = self.qualname(spelled)
                if q in ("json.load", "json.loads") and node.args:
                    out = {"j": self.vref(node.args[0], depth + 1)}
                elif spelled == "open" and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                    out = {"o": node.args[0].value}
                else:
                    out = {"c": spelled, "r": node.lineno, "cc": self._column(node.lineno, node.col_offset)}
                    args = [self._spelled(a) for a in node.args if not isinstance(a, ast.Starred)]
                    if any(args):
                        out["a"] = args
                    kws = {k.arg: self._spelled(k.value) for k in node.keywords if k.arg}
                    kws = {k: v for k, v in kws.items() if v}
                    if kws:
                        out["k"] = kws
                    dtype_kw = next((k.value for k in node.keywords if k.arg in ("torch_dtype", "dtype")), None)
                    if dtype_kw is not None:
                        out["dt"] = self.dtype(dtype_kw)
        elif isinstance(node, (ast.Name, ast.Attribute)):
            spelled = dotted(node)
            if spelled is not None:
                out = {"n": spelled}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) <= 300:
            out = {"s": node.value}
        elif isinstance(node, ast.Dict):
            index = self._dict(node)
            if index is not None:
                out = {"dl": index}
        elif isinstance(node, ast.Tuple) and not methods and len(node.elts) <= 8:
            out = {"tu": [self._spelled(e) for e in node.elts]}  # `return engine, optimizer`
        if out is not None and methods:
            out["m"] = methods
        return out

    def _compiled(self, call: ast.Call) -> Optional[ast.AST]:
        """The module `torch.compile(module, ...)` compiles; None for any other call (or a
        `torch.compile(...)` that shows no module: the decorator form). The `OptimizedModule`
        it returns holds the module as `_orig_mod` and hands on its attributes, so its
        `parameters()` are the module's own, and its `clip_grad_norm_` / `backward` the
        wrapper's: the wrapper kind passes through."""
        if self.qualname(dotted(call.func)) not in COMPILERS:
            return None
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return None
        if call.args:
            return call.args[0]
        return next((k.value for k in call.keywords if k.arg == "model"), None)

    def _spelled(self, node: ast.AST) -> Optional[Any]:
        """An argument as the resolver reads it: a dotted name, `X.parameters()` (as
        "X.parameters()"), a string, an inline dict literal's index, or a nested call's vref."""
        if isinstance(node, (ast.Name, ast.Attribute)):
            return dotted(node)
        if isinstance(node, ast.Call):
            return self.vref(node, 1)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) <= 300:
            return {"s": node.value}
        if isinstance(node, ast.Dict):
            index = self._dict(node)
            return {"dl": index} if index is not None else None
        return None

    def _method_tag(self, call: ast.Call) -> str:
        assert isinstance(call.func, ast.Attribute)
        name = call.func.attr
        if name in ("to", "type"):
            for arg in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]:
                d = self.dtype(arg)
                if d in ("fp16", "bf16", "fp32"):
                    return f"to:{d}"
        return {"half": "to:fp16", "bfloat16": "to:bf16", "float": "to:fp32", "double": "to:fp32"}.get(name, name)

    def _bind(self, target: ast.AST, value: ast.AST, qual: str, cls: Optional[str], alternative: bool = False) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            ref = self.vref(value)
            for i, t in enumerate(target.elts):
                name = dotted(t)
                if name is not None and ref is not None:
                    self.binds.setdefault(qual, {}).setdefault(name, []).append({"u": ref, "i": i})
                if isinstance(t, ast.Name):
                    self._dep(qual, t.id, value)
            return
        name = dotted(target)
        if name is None:
            return
        if isinstance(value, ast.IfExp):
            for side in (value.body, value.orelse):
                self._bind(target, side, qual, cls, alternative=True)
            return
        ref = self.vref(value)
        if ref == {"n": name} and not alternative:
            # `model = torch.compile(model)`: the name keeps the value it had (no self-reference); an
            # `x if c else model` side stays, so `latest` still knows the earlier value may hold
            ref = None
        if ref is not None:
            refs = self.binds.setdefault(qual, {}).setdefault(name, [])
            if len(refs) < 16:
                refs.append(ref)
        if isinstance(target, ast.Name):
            self._dep(qual, target.id, value)

    def _sharding_set(self, target: ast.AST, value: ast.AST, stmt: ast.stmt, qual: str) -> None:
        """`core.fsdp_defaults["sharding_strategy"] = ShardingStrategy.NO_SHARD`: a dict of FSDP
        options (which a wrap may spread, `FSDP(m, **self.fsdp_defaults)`) gets its sharding
        strategy set (event `shardset`: the dict's spelling, the value's)."""
        if not (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) and target.slice.value == "sharding_strategy"):
            return
        held = dotted(target.value)
        if held:
            self._event("shardset", stmt, qual, d=held, v=dotted(value) or "?")

    def _mutation(self, target: ast.AST, qual: str) -> None:
        """`cfg["fp16"]["enabled"] = ...`: the dict `cfg` changes after it was built."""
        node = target
        while isinstance(node, ast.Subscript):
            node = node.value
        if node is not target:
            name = dotted(node)
            if name:
                mutated = self.mutated.setdefault(qual, [])
                if name not in mutated:
                    mutated.append(name)

    def _dep(self, qual: str, name: str, value: ast.AST) -> None:
        """What the value of `name` reads: names, and callees (the loss from `engine(...)`)."""
        entry = self.deps.setdefault(qual, {}).setdefault(name, [[], []])
        walked = self._walked
        for node in walked[1] if walked[0] is value else walk_expression(value):
            if isinstance(node, ast.Name) and node.id not in entry[0] and len(entry[0]) < 24:
                entry[0].append(node.id)
            elif isinstance(node, ast.Call):
                spelled = dotted(node.func)
                if spelled and spelled not in entry[1] and len(entry[1]) < 24:
                    entry[1].append(spelled)

    def _dict(self, node: ast.Dict) -> Optional[int]:
        """A DeepSpeed-shaped dict literal, recorded with its values and key lines."""
        at = (node.lineno, node.col_offset)
        if at in self._dict_index:
            return self._dict_index[at]
        keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        if not any(k in ("fp16", "bf16", "zero_optimization") for k in keys) or not any(k in _DS_KEYS for k in keys):
            return None
        lines: Dict[str, List[int]] = {}
        choices: Dict[str, List[Any]] = {}
        values = self._literal(node, (), lines, choices)
        record = {"v": values, "l": lines, "r": node.lineno, "c": self._column(node.lineno, node.col_offset)}
        if choices:
            record["ch"] = choices  # `"loss_scale": 1 if args.no_scaler else 0`: the literal values a key may take
        self.dicts.append(record)
        self._dict_index[at] = len(self.dicts) - 1
        return len(self.dicts) - 1

    def _literal(
        self, node: ast.AST, prefix: Tuple[str, ...], lines: Dict[str, List[int]], choices: Optional[Dict[str, List[Any]]] = None,
    ) -> Any:
        if isinstance(node, ast.Dict):
            out: Dict[str, Any] = {}
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    path = (*prefix, k.value)
                    lines[".".join(path)] = [k.lineno, self._column(k.lineno, k.col_offset)]
                    out[k.value] = self._literal(v, path, lines, choices) if len(path) < 6 else "?"
                    if out[k.value] == "?" and choices is not None and isinstance(v, ast.IfExp):
                        sides = [self._literal(side, path, {}) for side in (v.body, v.orelse)]
                        if not any(side == "?" or isinstance(side, dict) for side in sides):
                            choices[".".join(path)] = sides
                elif k is None:
                    out["**"] = "?"  # `**base`: more than it shows
            return out
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool)) or (
            isinstance(node, ast.Constant) and node.value is None
        ):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float)):
            return -node.operand.value
        return "?"  # decided at run time

    # ------------------------------------------------------------------ calls

    def _expression(self, expr: ast.AST, qual: str, targets: Optional[List[ast.AST]] = None, statement: bool = False) -> None:
        nodes = list(walk_expression(expr))
        self._walked = (expr, nodes)  # the value a binding's `_dep` then reads: walked once
        for node in nodes:
            if isinstance(node, ast.Call):
                self._call(node, qual, targets if node is expr else None, statement and node is expr)
            elif isinstance(node, ast.Compare):
                for name, values in _compared_literals(node):
                    known = self.compared.setdefault(name, [])
                    known.extend(v for v in values if v not in known and len(known) < 32)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower().endswith(_CONFIG_SUFFIXES) and len(node.value) < 300:
                self.paths.append({"s": node.value, "f": qual, "r": node.lineno, "c": self._column(node.lineno, node.col_offset)})

    def _position(self, node: ast.AST) -> Dict[str, Any]:
        end = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
        return {
            "r": node.lineno,  # type: ignore[attr-defined]
            "c": self._column(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            "er": end,
            "ec": self._column(end, getattr(node, "end_col_offset", 0) or 0),
        }

    def _event(self, kind: str, node: ast.AST, qual: str, **data: Any) -> Dict[str, Any]:
        event = {"e": kind, "f": qual, **self._position(node), **{k: v for k, v in data.items() if v is not None}}
        if self.path:
            event["p"] = [list(p) for p in self.path]
            if kind in ("hook", "scalerlike") or data.get("k") == "scaler":
                # the text of each `if` around it: a scaler and a hook in different functions are
                # compared by the tests they are under (AMP803)
                event["pt"] = [_test_text(self._tests.get(frame)) for frame, _ in self.path]
        if self.no_engine:
            event["nds"] = 1  # on a branch taken only without DeepSpeed (`else` of `if args.deepspeed:`)
        if self.on_engine:
            event["dso"] = 1  # on a branch taken only with DeepSpeed (`if args.deepspeed:`)
        self.events.append(event)
        return event

    def _call(self, node: ast.Call, qual: str, targets: Optional[List[ast.AST]], statement: bool) -> None:
        spelled = dotted(node.func)
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        receiver = dotted(node.func.value) if isinstance(node.func, ast.Attribute) else None
        q = self.qualname(spelled)
        target = self._targets(targets)
        if method in ("update", "setdefault", "pop") and receiver:
            mutated = self.mutated.setdefault(qual, [])
            if receiver not in mutated:
                mutated.append(receiver)
        if spelled:
            uses = self.uses.setdefault(qual, [])
            if spelled not in uses and len(uses) < 200:
                uses.append(spelled)
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        if method == "add_argument" and node.args:
            self._option(node, kw)
        if q in CONTEXT_WRAPS:
            subject = node.args[0] if node.args else kw.get("module")
            self._event(
                "wrap", node, qual, k="ctxwrap", t=target, s=dotted(subject) if subject is not None else None,
                shard=dotted(kw.get("sharding_strategy")) if "sharding_strategy" in kw else None,
                kwd=1 if any(k.arg is None for k in node.keywords) else None,
            )
            return
        if q in ENABLE_WRAPS:
            wrapper_cls = kw.get("wrapper_cls")
            self._event(
                "ctor", node, qual, k="enable_wrap", wc=self.qualname(dotted(wrapper_cls)) if wrapper_cls is not None else None,
                shards=self._context_shards(node, kw, qual),
            )
            return
        if q in FSDP1 or q in DDP:
            kind = "fsdp1" if q in FSDP1 else "ddp"
            subject = node.args[0] if node.args else kw.get("module")
            self._event(
                "wrap", node, qual, k=kind, t=target, s=dotted(subject) if subject is not None else None,
                sv=self.vref(subject) if subject is not None and not isinstance(subject, (ast.Name, ast.Attribute)) else None,
                mp=self._spelled(kw["mixed_precision"]) if "mixed_precision" in kw else None,
                mpr=self._position(kw["mixed_precision"]) if "mixed_precision" in kw else None,
                mpn=1 if "mixed_precision" in kw and _may_be_none(kw["mixed_precision"]) else None,
                shard=dotted(kw.get("sharding_strategy")) if "sharding_strategy" in kw else None,
                kwd=[d for d in (dotted(k.value) for k in node.keywords if k.arg is None) if d] or None,
            )
            return
        if q in FSDP2:
            subject = node.args[0] if node.args else kw.get("module")
            self._event(
                "wrap", node, qual, k="fsdp2", t=target, s=dotted(subject) if subject is not None else None,
                mp=self._spelled(kw["mp_policy"]) if "mp_policy" in kw else None,
                mpr=self._position(kw["mp_policy"]) if "mp_policy" in kw else None,
                mpn=1 if "mp_policy" in kw and _may_be_none(kw["mp_policy"]) else None,
            )
            return
        if q in DEEPSPEED_INIT:
            subject = kw.get("model")
            config = kw.get("config", kw.get("config_params"))
            self._event(
                "wrap", node, qual, k="deepspeed", t=target, s=dotted(subject) if subject is not None else None,
                cfg=self._spelled(config) if config is not None else None,
                opt=dotted(kw.get("optimizer")) if "optimizer" in kw else None,
                args=1 if "args" in kw else None,
            )
            return
        if method in ("prepare", "setup", "setup_module") and receiver and (node.args or node.keywords):
            kind = "accelerate" if method == "prepare" else "fabric"
            subjects = [dotted(a) for a in node.args if not isinstance(a, ast.Starred)]
            self._event("wrap", node, qual, k=kind, t=target, s=subjects[0] if subjects else None, ss=subjects, recv=receiver, m=method)
            return
        if q in FSDP1_POLICIES or q in FSDP2_POLICIES:
            fields = ("param_dtype", "reduce_dtype", "buffer_dtype")
            values = {f: kw.get(f) for f in fields}
            for i, a in enumerate(node.args[:3]):
                values.setdefault(fields[i], a)
                if values[fields[i]] is None:
                    values[fields[i]] = a
            self._event(
                "ctor", node, qual, k="policy", cls="fsdp1" if q in FSDP1_POLICIES else "fsdp2", t=target,
                param=self.dtype(values["param_dtype"]), reduce=self.dtype(values["reduce_dtype"]),
                rpos=self._position(values["reduce_dtype"]) if values["reduce_dtype"] is not None else None,
                rch=self.dtype_choice(values["reduce_dtype"] if values["reduce_dtype"] is not None else values["param_dtype"], qual),
                rmap=self.dtype_mapping(values["reduce_dtype"] if values["reduce_dtype"] is not None else values["param_dtype"], qual),
                star=1 if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords) else None,
            )
            return
        if q in torchapi.GRAD_SCALERS or (q and q.startswith("torch.") and q.endswith("GradScaler")):
            enabled = kw.get("enabled")
            if enabled is None and q not in SHARDED_SCALERS and q.startswith(("torch.amp", "torch.cpu")) and len(node.args) >= 5:
                enabled = node.args[4]
            value = enabled.value if isinstance(enabled, ast.Constant) and isinstance(enabled.value, bool) else (True if enabled is None else None)
            self._event("ctor", node, qual, k="scaler", sharded=1 if q in SHARDED_SCALERS else 0, en=value, t=target, q=q)
            return
        if q in FABRICS:
            self._event(
                "ctor", node, qual, k="fabric", t=target, prec=self._precision(kw.get("precision")),
                strategy=self._strategy(kw.get("strategy")), acc=_constant(kw.get("accelerator")),
                star=1 if any(k.arg is None for k in node.keywords) or node.args else None,
            )
            return
        if q and q.split(".")[0] in _LIGHTNING_ROOTS and q.rsplit(".", 1)[-1] in _STRATEGIES:
            cfg = kw.get("config")
            self._event(
                "ctor", node, qual, k="strategy", t=target, sk=_STRATEGIES[q.rsplit(".", 1)[-1]],
                cfg=self._spelled(cfg) if cfg is not None else None,
                mp=1 if "mixed_precision" in kw else None,
            )
            return
        if q and q.split(".")[0] in _LIGHTNING_ROOTS and q.rsplit(".", 1)[-1] == "Trainer":
            self._event(
                "ctor", node, qual, k="trainer", t=target, prec=self._precision(kw.get("precision")),
                strategy=self._strategy(kw.get("strategy")), popt=self._precision_option(node, qual),
            )
            return
        if q in ACCELERATORS:
            plugin = kw.get("deepspeed_plugin")
            self._event(
                "ctor", node, qual, k="accelerator", t=target, mp=_constant(kw.get("mixed_precision")) if "mixed_precision" in kw else None,
                mpr=self._position(kw["mixed_precision"]) if "mixed_precision" in kw else None,
                mpq=1 if "mixed_precision" in kw and not isinstance(kw["mixed_precision"], ast.Constant) else None,
                ds=self._spelled(plugin) if plugin is not None and not (isinstance(plugin, ast.Constant) and plugin.value is None) else None,
                fsdp=1 if "fsdp_plugin" in kw and not (isinstance(kw["fsdp_plugin"], ast.Constant) and kw["fsdp_plugin"].value is None) else None,
                star=1 if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args) else None,
            )
            return
        if q in DS_PLUGINS:
            cfg = kw.get("hf_ds_config")
            self._event("ctor", node, qual, k="dsplugin", t=target, cfg=self._spelled(cfg) if cfg is not None else None)
            return
        if q in HF_ARGS:
            flags = {}
            for flag in ("fp16", "bf16"):
                value = kw.get(flag)
                flags[flag] = value.value if isinstance(value, ast.Constant) and isinstance(value.value, bool) else (False if value is None else None)
            ds = kw.get("deepspeed")
            self._event(
                "ctor", node, qual, k="trainargs", t=target, fp16=flags["fp16"], bf16=flags["bf16"],
                fp16r=self._position(kw["fp16"]) if "fp16" in kw else None, bf16r=self._position(kw["bf16"]) if "bf16" in kw else None,
                cfg=self._spelled(ds) if ds is not None else None,
                fsdp=_fsdp_option(kw.get("fsdp")), fsdpr=self._position(kw["fsdp"]) if "fsdp" in kw else None,
                fsdpx=_fsdp_config_kind(kw["fsdp_config"]) if "fsdp_config" in kw else None,
                star=1 if any(k.arg is None for k in node.keywords) or node.args else None,
            )
            return
        if q in torchapi.CLIP_FUNCTIONS or (q and q.startswith("torch.nn.utils") and q.rsplit(".", 1)[-1] in ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm")):
            first = node.args[0] if node.args else kw.get("parameters")
            owner = None
            if isinstance(first, ast.Call) and isinstance(first.func, ast.Attribute) and first.func.attr in ("parameters",):
                owner = dotted(first.func.value)
            elif isinstance(first, ast.Call) and dotted(first.func) in ("list", "filter") and first.args:
                inner = first.args[-1]
                if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "parameters":
                    owner = dotted(inner.func.value)
            name = q.rsplit(".", 1)[-1]
            limit = node.args[1] if len(node.args) > 1 else kw.get("max_norm", kw.get("clip_value"))
            self._event(
                "clip", node, qual, fn="value" if "value" in name else "norm", o=owner,
                pn=dotted(first) if isinstance(first, (ast.Name, ast.Attribute)) else None,
                lim=ast.get_source_segment(self.source, limit) if limit is not None else None,
                spelled=spelled,
                simple=1 if len(node.args) + len(node.keywords) == 2 and all(k.arg in ("parameters", "max_norm") for k in node.keywords) and not any(isinstance(a, ast.Starred) for a in node.args) else None,
            )
            return
        if method == "clip_grad_norm_" and receiver and not (q or "").startswith("torch."):
            self._event("ownclip", node, qual, recv=receiver)  # a wrapper's own clip (FSDP1's, accelerate's)
            return
        if method == "backward" and isinstance(node.func, ast.Attribute):
            recv = node.func.value
            inner = None
            if isinstance(recv, ast.Call) and isinstance(recv.func, ast.Attribute) and recv.func.attr == "scale":
                inner = dotted(recv.func.value)
            self._event(
                "back", node, qual, recv=dotted(recv), n=len(node.args), a0=dotted(node.args[0]) if node.args else None,
                scaled=inner,
            )
            return
        if method == "step" and receiver:
            self._event("step", node, qual, recv=receiver, n=len(node.args))
            return
        if method == "register_comm_hook" and (len(node.args) >= 2 or "hook" in kw):
            hook = node.args[1] if len(node.args) >= 2 else kw["hook"]
            hq = self.qualname(dotted(hook.func) if isinstance(hook, ast.Call) else dotted(hook))
            if hq in COMM_HOOKS:
                self._event("hook", node, qual, d=COMM_HOOKS[hq], recv=receiver)
            elif dotted(hook):
                # a project's own hook: resolved across files by what its body does (`functions[..]["hook"]`)
                self._event("hook", node, qual, hs=dotted(hook), recv=receiver)
            return
        if q in ("torch.set_default_dtype", "torch.set_default_tensor_type"):
            arg = node.args[0] if node.args else None
            if q == "torch.set_default_dtype":
                d = self.dtype(arg)
            else:
                d = _LOW_TENSOR_TYPES.get(self.qualname(dotted(arg)) or "", "fp32") if arg is not None else None
            event = self._event("default", node, qual, d=d)
            self.default_open[qual] = event if d in ("fp16", "bf16") else None
            return
        te_name = q.rsplit(".", 1)[-1] if q and q.startswith("transformer_engine.pytorch") else None
        if te_name in TE_LINEARS or q in TORCH_LINEARS:
            names = TE_LINEARS.get(te_name or "", ("in_features", "out_features"))
            dims = [kw.get(names[0], node.args[0] if node.args else None), kw.get(names[1], node.args[1] if len(node.args) > 1 else None)]
            values = [d.value if isinstance(d, ast.Constant) and isinstance(d.value, int) and not isinstance(d.value, bool) else None for d in dims]
            if any(v is not None for v in values):
                self._event("linear", node, qual, lib="te" if te_name else "torch", cls=te_name or "Linear", dims=values, t=(target or [None])[0])
            return
        if q in FLOAT8_CONVERTERS:
            subject = node.args[0] if node.args else kw.get("module")
            self._event("float8", node, qual, s=dotted(subject) if subject is not None else None, filter=1 if "module_filter_fn" in kw else None)
            return
        if method in ("half", "bfloat16", "to", "float") and statement and receiver:
            tag = self._method_tag(node)
            if tag in ("to:fp16", "to:bf16", "to:fp32"):
                self._event("cast", node, qual, t=receiver, d=tag[3:], via="inplace")
            return
        last = (spelled or "").rsplit(".", 1)[-1]
        if (q or "").startswith("torch.optim.") and "lr_scheduler" not in (q or "") or _OPTIMIZER_NAME.search(last):
            self._event("opt", node, qual)  # an optimizer built here: the file trains
        if targets is not None:
            self._assigned_call(node, qual, target, method)

    def _assigned_call(self, node: ast.Call, qual: str, target: Optional[List[str]], method: Optional[str]) -> None:
        """`model = Net().bfloat16()`, `model = AutoModel.from_pretrained(..., torch_dtype=torch.bfloat16)`:
        a module made low precision where it is bound."""
        if not target or not target[0]:
            return
        if "scaler" in target[0].rsplit(".", 1)[-1].lower():
            # `loss_scaler = NativeScaler()`: a project's own scaler wrapper (AMP803 reads where it is built)
            self._event("scalerlike", node, qual, t=target[0])
        tag = self._method_tag(node) if method in ("half", "bfloat16", "to", "type", "float") else None
        if tag in ("to:fp16", "to:bf16", "to:fp32"):
            self._event("cast", node, qual, t=target[0], d=tag[3:], via="method")
            return
        if method in ("from_pretrained", "from_config"):
            dtype_kw = next((k.value for k in node.keywords if k.arg in ("torch_dtype", "dtype")), None)
            d = self.dtype(dtype_kw) if dtype_kw is not None else None
            if d in ("fp16", "bf16"):
                self._event("cast", node, qual, t=target[0], d=d, via="load")
                return
        opened = self.default_open.get(qual)
        if opened is not None and dotted(node.func):
            # built while `torch.set_default_dtype(torch.bfloat16)` holds: its parameters are low precision
            self._event("cast", node, qual, t=target[0], d=opened["d"], via="default", at=[opened["r"], opened["c"], opened["er"], opened["ec"]])

    def _targets(self, targets: Optional[List[ast.AST]]) -> Optional[List[str]]:
        if not targets:
            return None
        first = targets[0]
        if isinstance(first, (ast.Tuple, ast.List)):
            return [dotted(e) or "" for e in first.elts]
        name = dotted(first)
        return [name] if name else None

    def _option(self, node: ast.Call, kw: Dict[str, ast.AST]) -> None:
        """`parser.add_argument("--precision", default="bf16", choices=[...])`: the option's dest,
        its literal default and choices, and where it is declared."""
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        long = next((f for f in flags if f.startswith("--")), None)
        dest = _constant(kw.get("dest")) if "dest" in kw else (long[2:].replace("-", "_") if long else None)
        if not isinstance(dest, str) or not dest or len(self.options) >= 256:
            return
        entry: Dict[str, Any] = {**self._position(node)}
        default = _constant(kw.get("default")) if "default" in kw else None
        if isinstance(default, (str, int)) and not isinstance(default, bool):
            entry["d"] = default
        choices = kw.get("choices")
        if isinstance(choices, (ast.List, ast.Tuple, ast.Set)):
            values = [_constant(e) for e in choices.elts]
            if all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values):
                entry["ch"] = values
        self.options[dest] = entry

    def _precision_option(self, node: ast.Call, qual: str) -> Optional[str]:
        """The option a Lightning `Trainer(...)`'s precision reads, as the code spells it: a
        `precision=args.precision`, or spread from the parsed arguments -- `**vars(args)`, or
        `**trainer_args` built `{k: v for k, v in vars(args).items() if k in keys}` with
        "precision" among the literal `keys` -- as "args.precision". None otherwise."""
        given = next((k.value for k in node.keywords if k.arg == "precision"), None)
        if given is not None:
            spelled = dotted(given)
            return spelled if spelled and "." in spelled else None
        for k in node.keywords:
            if k.arg is not None:
                continue
            value = k.value
            if isinstance(value, ast.Name):
                value = self._single_value(value.id, qual)
            namespace = _vars_of(value)
            if namespace:
                return f"{namespace}.precision"
            if isinstance(value, ast.DictComp) and len(value.generators) == 1:
                gen = value.generators[0]
                it = gen.iter
                if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "items":
                    namespace = _vars_of(it.func.value)
                    if namespace and all(self._keeps(cond, qual, "precision") for cond in gen.ifs) and gen.ifs:
                        return f"{namespace}.precision"
        return None

    def _keeps(self, cond: ast.AST, qual: str, key: str) -> bool:
        """`k in keys` whose literal `keys` (inline or a name bound once) holds `key`."""
        if not (isinstance(cond, ast.Compare) and len(cond.ops) == 1 and isinstance(cond.ops[0], ast.In)):
            return False
        keys = cond.comparators[0]
        if isinstance(keys, ast.Name):
            keys = self._single_value(keys.id, qual)
        return isinstance(keys, (ast.List, ast.Tuple, ast.Set)) and key in [_constant(e) for e in keys.elts]

    def _precision(self, node: Optional[ast.AST]) -> Optional[str]:
        """A Lightning `precision=` literal, normalised ("16" -> "16-mixed"); "?" when not literal."""
        if node is None:
            return None
        value = _constant(node)
        if value is None:
            return "?"
        return lightning_precision(value)

    def _strategy(self, node: Optional[ast.AST]) -> Optional[Any]:
        """A Lightning `strategy=`: a string ("fsdp", "deepspeed_stage_2"), a name to resolve, or an inline ctor."""
        if node is None:
            return None
        value = _constant(node)
        if isinstance(value, str):
            return {"s": value}
        return self._spelled(node)

    def _with_item(self, expr: ast.AST, qual: str, stmt: ast.AST) -> Optional[Dict[str, Any]]:
        if not isinstance(expr, ast.Call):
            return None
        q = self.qualname(dotted(expr.func))
        if q in TE_AUTOCASTS:
            kw = {k.arg: k.value for k in expr.keywords if k.arg}
            enabled_node = kw.get("enabled", expr.args[0] if expr.args else None)
            value = _constant(enabled_node)
            enabled = True if enabled_node is None else (value if isinstance(value, bool) else None)
            end = getattr(stmt, "end_lineno", None) or expr.lineno
            return self._event("fp8", expr, qual, en=enabled, end=end, spelled=dotted(expr.func))
        if q not in torchapi.AUTOCAST_CONTEXTS:
            return None
        parameters = torchapi.autocast_parameters(q)
        kw = {k.arg: k.value for k in expr.keywords if k.arg}

        def arg(name: str) -> Optional[ast.AST]:
            if name in kw:
                return kw[name]
            position = parameters.index(name)
            return expr.args[position] if position < len(expr.args) else None

        device = torchapi.AUTOCAST_CONTEXTS[q]
        if device is None:
            value = _constant(arg("device_type"))
            device = value if isinstance(value, str) else None
        dtype_node = arg("dtype")
        dtype = self.dtype(dtype_node) if dtype_node is not None else (torchapi.DEVICE_DEFAULT_DTYPE.get(device) if device else "?")
        enabled_node = arg("enabled")
        enabled = True if enabled_node is None else (_constant(enabled_node) if isinstance(_constant(enabled_node), bool) else None)
        end = getattr(stmt, "end_lineno", None) or expr.lineno
        return self._event("autocast", expr, qual, d=dtype, dev=device, en=enabled, end=end)

    def _column(self, row: int, byte_offset: int) -> int:
        if 0 < row <= len(self.lines):
            line = self.lines[row - 1]
            if not line.isascii():
                return len(line.encode("utf-8")[:byte_offset].decode("utf-8", "replace")) + 1
        return byte_offset + 1


#: the sharding entry points a test may replace with a fake: FSDP2's and FSDP1's
_SHARDERS = ("fully_shard", "FullyShardedDataParallel", "FSDP")


#: the words of `TrainingArguments(fsdp=...)` (`FSDPOption`): any of them turns FSDP on
FSDP_OPTIONS = frozenset(("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "no_shard", "offload", "auto_wrap"))


def _test_text(node: Optional[ast.AST]) -> str:
    """An `if` test as normalised text (at most 160 characters), "" when unknown."""
    if node is None:
        return ""
    try:
        return ast.unparse(node)[:160]
    except (ValueError, RecursionError):  # pragma: no cover - a tree ast itself parsed
        return ""


def _fsdp_option(node: Optional[ast.AST]) -> Optional[int]:
    """`TrainingArguments(fsdp=...)` as a literal: 1 when it turns FSDP on (`True`, `"full_shard
    auto_wrap"`, a list of such words), 0 when it leaves it off (absent, `False`, `""`, `None`, `[]`),
    None when decided at run time (a name, a call) or a word the Trainer does not know."""
    if node is None:
        return 0
    if isinstance(node, ast.Constant):
        if node.value in (None, False, ""):
            return 0
        if node.value is True:
            return 1
        if isinstance(node.value, str):
            words = node.value.split()
            return 1 if words and all(w in FSDP_OPTIONS for w in words) else None
        return None
    if isinstance(node, (ast.List, ast.Tuple)):
        if not node.elts:
            return 0
        words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
        return 1 if all(isinstance(w, str) and w in FSDP_OPTIONS for w in words) else None
    return None


def _fsdp_config_kind(node: ast.AST) -> str:
    """`TrainingArguments(fsdp_config=...)`: "p" for a dict literal that keeps PyTorch's FSDP (no
    `xla` / `fsdp_xla` key, which hands sharding to torch_xla), "?" for anything else (a file, a
    name: what it holds is not read here)."""
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
        if not any(k.value in ("xla", "fsdp_xla") for k in node.keys):
            return "p"
    if isinstance(node, ast.Constant) and node.value is None:
        return "p"
    return "?"


_DICT_CHANGES = frozenset(("update", "setdefault", "pop", "popitem", "clear", "__setitem__"))


def _own_nodes(body: List[ast.stmt]) -> Any:
    """The nodes of a scope's statements, not those of the functions, lambdas and classes it
    defines (their names are their own)."""
    stack: List[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.append(child)


def _faked_sharders(node: Any) -> List[str]:
    """The sharding entry points (`_SHARDERS`) the function replaces with a fake for its own run:
    `monkeypatch.setattr(fsdp_module, "fully_shard", fake)`, `monkeypatch.setattr(
    "torch.distributed.fsdp.fully_shard", fake)`, `mock.patch("...fully_shard")` /
    `patch.object(fsdp, "fully_shard")` in its body or as its decorator. What it builds for them
    (a `MixedPrecisionPolicy`) reaches the fake, not a real sharding: no gradient is reduced."""
    found: List[str] = []
    calls = [d for d in node.decorator_list if isinstance(d, ast.Call)]
    calls += [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    for call in calls:
        method = call.func.attr if isinstance(call.func, ast.Attribute) else (call.func.id if isinstance(call.func, ast.Name) else "")
        if method not in ("setattr", "patch", "object"):
            continue
        if method == "setattr" and isinstance(call.func, ast.Name):
            continue  # the builtin `setattr(obj, name, value)` rebinds an attribute for good, not for a test
        for arg in call.args[:2]:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                last = arg.value.rsplit(".", 1)[-1]
                if last in _SHARDERS and last not in found:
                    found.append(last)
    return found


def _may_be_none(node: ast.AST) -> bool:
    """A wrapper's policy argument that may be None: a literal None, or a choice with None among
    its alternatives (`policy if not cfg.pure_bf16 else None`: that path wraps with no policy)."""
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.IfExp):
        return _may_be_none(node.body) or _may_be_none(node.orelse)
    if isinstance(node, ast.BoolOp):
        return any(_may_be_none(v) for v in node.values)
    return False


def _constant(node: Optional[ast.AST]) -> Any:
    return node.value if isinstance(node, ast.Constant) else None
