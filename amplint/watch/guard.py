"""The guard: observes a training run from inside its process, read-only.

`install()` wraps a few torch entry points in place (GradScaler's scale /
unscale_ / step / update, and a subclass's own on its first construction, the
global optimizer step hooks, `Tensor.backward`,
`torch.autocast.__enter__`, `clip_grad_norm_` / `clip_grad_value_`,
`torch.save`, `nn.Module.__init__` for build sites and to find a DeepSpeed
engine, whose `_take_model_step` is wrapped). Every wrapper calls the
original with the same arguments and only reads tensors, so the run computes
the same numbers (tests/test_watch_run.py compares losses bit for bit). One
step record per optimizer step goes to DIR/events.jsonl: at `scaler.update()`
for an enabled GradScaler (one record for all the optimizers it stepped), at a
DeepSpeed engine's model step, at `optimizer.step()` otherwise.

Per step the guard reads no tensor value on the host (a read on CUDA waits for
the device, stalling the pipeline): whether scaler.step skipped the update is
seen by the optimizer step hook not firing inside it (fused optimizers, which
decide on the device, are read), the loss scale is copied on the device, and
gradient norms stay tensors. Step records are kept unresolved and turned into
numbers in batches (`flush_steps`: every 32 steps, 2 s, before any other
record, at exit), which is also when the loss-scale-collapse detector runs.
"""
from __future__ import annotations

import atexit
import math
import os
import sys
import threading
import time
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import sites, underflow
from .events import EventLog, finite_or_none
from .findings import CollapseDetector, finding
from .incident import Incidents
from .sources import Sources

_GUARD: Optional["Guard"] = None


class Options:
    """What `amplint run` / `amplint.watch()` pass through AMPLINT_WATCH_* (see docs/run.md)."""

    def __init__(self, collapse_steps: int = 8, skip_share: float = 0.25, min_steps: int = 50, grad_norm: bool = True,
                 incident_burst: int = 2, incident_max_bytes: int = 256 * 1024 * 1024, arm_steps: int = 50,
                 max_bytes: int = 64 * 1024 * 1024) -> None:
        self.collapse_steps = collapse_steps
        self.skip_share = skip_share
        self.min_steps = min_steps
        self.grad_norm = grad_norm
        self.incident_burst = incident_burst
        self.incident_max_bytes = incident_max_bytes
        self.arm_steps = arm_steps
        self.max_bytes = max_bytes

    @classmethod
    def from_env(cls, env: Dict[str, str]) -> "Options":
        o = cls()
        for key, conv in (("collapse_steps", int), ("skip_share", float), ("min_steps", int), ("incident_burst", int),
                          ("incident_max_bytes", int), ("arm_steps", int), ("max_bytes", int)):
            raw = env.get("AMPLINT_WATCH_" + key.upper())
            if raw:
                setattr(o, key, conv(raw))
        if env.get("AMPLINT_WATCH_GRAD_NORM") == "0":
            o.grad_norm = False
        return o


class _Iteration:
    """One GradScaler's bookkeeping between two update() calls."""

    __slots__ = ("scaled", "unscaled", "scaled_after_unscale", "stepped", "skipped", "optimizers", "norms", "pending_norm")

    def __init__(self) -> None:
        self.scaled = False
        self.unscaled: Dict[int, Tuple[frozenset, sites.Site]] = {}
        self.scaled_after_unscale: set = set()
        self.stepped: set = set()
        self.skipped = False  # a scaler.step of this iteration skipped its optimizer
        self.optimizers: Dict[int, Any] = {}
        self.norms: List[Any] = []  # gradient norms (0-dim tensors or floats) of the unscaled gradients, per group
        # optimizer id -> its params, unscaled by the user and not measured yet: a clip_grad_norm_
        # over exactly them returns the norm for free, else scaler.step measures them
        self.pending_norm: Dict[int, List[torch.Tensor]] = {}


def local_grad(tensor: Any) -> Any:
    """A gradient as this rank holds it: a DTensor's (FSDP2's) local shard, never a collective
    (the guard must not add one: a rank-local check turned into an all-reduce hangs the others)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if to_local is not None and type(tensor).__name__ == "DTensor" else tensor


def _grad_norm(params: List[torch.Tensor], divide: Any = None) -> Any:
    """The 2-norm of the gradients as a 0-dim tensor on their device (no host read), divided by
    `divide` (a scale, float or tensor) when given. For DTensor (FSDP2) gradients, the norm of
    this rank's local shards."""
    grads = [local_grad(p.grad) for p in params if p.grad is not None and not p.grad.is_sparse]
    if not grads:
        return 0.0
    norms = torch._foreach_norm([g.detach() for g in grads])
    total = torch.linalg.vector_norm(torch.stack([n.float().to(norms[0].device) for n in norms]))
    return total if divide is None else total / divide


def _resolve_norm(norms: Optional[List[Any]]) -> Optional[float]:
    """The combined norm of several groups' norms, read on the host now."""
    if norms is None:
        return None
    return finite_or_none(math.hypot(*[float(n) for n in norms]))


def _scale_now(scaler: Any) -> Any:
    """The scaler's current scale, without waiting for the device: a float on CPU (reading
    is free), else a copy on the device, read when the step record is resolved."""
    scale = getattr(scaler, "_scale", None)
    if not isinstance(scale, torch.Tensor):
        return float(scaler.get_scale())
    return float(scale) if scale.device.type == "cpu" else scale.detach().clone()


class _ParamIds:
    """optimizer -> (its parameters, their ids), rebuilt only when its param_groups change."""

    def __init__(self) -> None:
        self.cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def __call__(self, optimizer: Any) -> Tuple[List[torch.Tensor], frozenset]:
        groups = optimizer.param_groups
        key = tuple((id(g["params"]), len(g["params"])) for g in groups)
        try:
            hit = self.cache.get(optimizer)
        except TypeError:  # pragma: no cover - an optimizer that refuses weak references
            hit = None
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        params = [p for g in groups for p in g["params"]]
        ids = frozenset(id(p) for p in params)
        try:
            self.cache[optimizer] = (key, params, ids)
        except TypeError:  # pragma: no cover
            pass
        return params, ids


class _PeakMemory:
    """Peak memory so far: CUDA's max_memory_allocated (cheap, every step), else the process's
    peak resident set, read every `every` steps (getrusage is a syscall, slow in some sandboxes;
    the peak only grows, so the last reading is a lower bound in between)."""

    def __init__(self, every: int = 64) -> None:
        self.every = every
        self.calls = 0
        self.rss: Optional[int] = None

    def __call__(self) -> Tuple[Optional[int], str]:
        if torch.cuda.is_initialized():  # (is_available() costs microseconds per call; this does not)
            return int(torch.cuda.max_memory_allocated()), "cuda"
        if self.calls % self.every == 0:
            try:
                import resource

                self.rss = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
            except ImportError:  # pragma: no cover - not POSIX
                return None, "none"
        self.calls += 1
        return self.rss, "rss"


class Guard:
    def __init__(self, directory: str, options: Optional[Options] = None) -> None:
        self.options = options or Options()
        self.directory = os.path.abspath(directory)
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.log = EventLog(self.directory, self.rank, self.options.max_bytes)
        self.local = threading.local()
        self.step = 0
        self.header_done = False
        self.autocast: Optional[Tuple[str, str]] = None
        self.fp16_autocast = False
        self.reported: set = set()
        self.iterations: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self.scaled_outputs: Dict[int, Any] = {}  # id -> weakref of scaler.scale()'s latest results (bounded)
        self.checked_optimizers: "weakref.WeakSet" = weakref.WeakSet()
        self.param_ids = _ParamIds()
        self.plain_norm: Optional[List[Any]] = None
        self.clip_norm: Optional[Any] = None  # clip_grad_norm_'s own total (before clipping) this step
        self.pending: List[List[Any]] = []  # step records not yet resolved into numbers (see flush_steps)
        self.flushed_at: Optional[float] = None
        self.update_site: Optional[sites.Site] = None  # a scaler.update() call: AMP701's line when no source is known
        self.scaler_classes: set = set()  # the GradScaler classes a `scaler` record was written for
        self.wrapped_classes: set = set()  # GradScaler subclasses (and DeepSpeed engines) whose own methods are wrapped
        self.module_classes: set = set()  # nn.Module classes constructed so far
        self.last_time: Optional[float] = None
        self.peak_memory = _PeakMemory()
        self.skipped_run = 0
        self.detector = CollapseDetector(self.options.collapse_steps, self.options.skip_share, self.options.min_steps)
        self.build_sites = sites.BuildSites()
        self.sources = Sources(self.build_sites, self.options.arm_steps, self.write)
        self.saves_without_scaler: List[Dict[str, Any]] = []
        self.fp16_saves: List[Dict[str, Any]] = []
        self.fp32_saved = False
        self.scaler_state_saved = False
        self.restore: List[Tuple[Any, str, Any]] = []
        self._torch_save = torch.save
        self.incidents = Incidents(self.directory, self.options.incident_burst, self.options.incident_max_bytes, self._torch_save, self.write)

    # ---- output -------------------------------------------------------------------------
    def header(self) -> Dict[str, Any]:
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        device, capability = "cpu", None
        if cuda:
            index = torch.cuda.current_device()
            device = torch.cuda.get_device_name(index)
            capability = ".".join(map(str, torch.cuda.get_device_capability(index)))
        return {
            "type": "header", "torch": torch.__version__, "cuda": torch.version.cuda, "device": device,
            "capability": capability, "autocast_device": self.autocast[0] if self.autocast else None,
            "autocast_dtype": self.autocast[1] if self.autocast else None, "argv": list(sys.argv)[:20],
            "grad_norm": bool(self.options.grad_norm),
        }

    def write(self, record: Dict[str, Any]) -> None:
        self.flush_steps()  # the steps before this record come before it in the file
        if not self.header_done:
            self.header_done = True
            self.log.write(self.header())
        self.log.write(record)

    def report(self, code: str, site: sites.Site, message: str, step: Optional[int] = None, **data: Any) -> None:
        """A finding, once per code and line; `step` defaults to the step in progress."""
        key = (code, site[0], site[1])
        if key in self.reported:
            return
        self.reported.add(key)
        self.write(finding(code, site[0], site[1], message, self.step + 1 if step is None else step, **data))

    # ---- steps --------------------------------------------------------------------------
    def emit_step(self, scale_before: Any, scale_after: Any, skipped: bool, norms: Optional[List[Any]]) -> None:
        """Queue this step's record; its tensor values are read in `flush_steps`, in a batch."""
        now = time.perf_counter()
        elapsed = None if self.last_time is None else now - self.last_time
        self.last_time = now
        self.step += 1
        peak, kind = self.peak_memory()
        self.pending.append([self.step, scale_before, scale_after, skipped, norms, elapsed, peak, kind])
        self.fp16_autocast = False
        self.clip_norm = None
        if self.flushed_at is None:
            self.flushed_at = now
        if len(self.pending) >= 32 or now - self.flushed_at > 2.0:
            self.flush_steps()

    def flush_steps(self) -> None:
        """Read the queued steps' values, write their records, and feed the collapse detector."""
        self.flushed_at = time.perf_counter()
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        if not self.header_done:
            self.header_done = True
            self.log.write(self.header())
        for step, before, after, skipped, norms, elapsed, peak, kind in batch:
            before = None if before is None else float(before)
            after = None if after is None else float(after)
            self.log.write_step(step, before, after, skipped, _resolve_norm(norms), elapsed, peak, kind)
            if before is not None and after is not None:
                self.collapse(step, before, after, skipped)
        self.log.flush()

    def collapse(self, step: int, before: float, after: float, skipped: bool) -> None:
        """AMP701, located at the first non-finite module when one was found."""
        message = self.detector.feed(step, before, after, skipped)
        if message is None:
            return
        src = self.sources.first
        if src is not None:
            message += f"; first non-finite: {src['kind']} of `{src['module']}` ({src['class']})"
        where = (src["filename"], src["line"]) if src and src.get("filename") else (self.update_site or ("<unknown>", 0))
        self.report("AMP701", where, message, step=step, since_step=self.detector.run_start or self.detector.first_skip)

    def _iteration(self, scaler: Any) -> _Iteration:
        it = self.iterations.get(scaler)
        if it is None:
            it = self.iterations[scaler] = _Iteration()
        return it

    def _open_scaled_iterations(self) -> List[_Iteration]:
        return [it for s, it in list(self.iterations.items()) if it.scaled and getattr(s, "_enabled", False)]

    # ---- GradScaler -----------------------------------------------------------------------
    def scale(self, orig, scaler, outputs):
        result = orig(scaler, outputs)
        if getattr(scaler, "_enabled", False):
            it = self._iteration(scaler)
            it.scaled = True
            it.scaled_after_unscale.update(it.unscaled)
            if isinstance(result, torch.Tensor):
                outputs = self.scaled_outputs
                outputs[id(result)] = weakref.ref(result)
                if len(outputs) > 64:
                    del outputs[next(iter(outputs))]
        return result

    def unscale_(self, orig, scaler, optimizer):
        if not getattr(scaler, "_enabled", False):
            return orig(scaler, optimizer)
        it = self._iteration(scaler)
        site = sites.caller_site(3)
        if id(optimizer) in it.unscaled and id(optimizer) not in it.stepped:
            self.report("AMP104", site, "scaler.unscale_() called twice for one optimizer before scaler.update()")
        result = orig(scaler, optimizer)
        params, ids = self.param_ids(optimizer)
        it.unscaled[id(optimizer)] = (ids, site)
        it.optimizers[id(optimizer)] = optimizer
        if self.options.grad_norm:
            if getattr(self.local, "in_scaler_step", 0):
                it.norms.append(_grad_norm(params))  # scaler.step's own unscale_: the step follows
            else:
                it.pending_norm[id(optimizer)] = params
        return result

    def _measure_pending(self, it: _Iteration, key: Optional[int] = None) -> None:
        for opt_id in [key] if key is not None else list(it.pending_norm):
            params = it.pending_norm.pop(opt_id, None)
            if params is not None:
                it.norms.append(_grad_norm(params))

    def scaler_step(self, orig, scaler, optimizer, *args, **kwargs):
        if not getattr(scaler, "_enabled", False):
            return orig(scaler, optimizer, *args, **kwargs)
        it = self._iteration(scaler)
        if id(optimizer) in it.stepped:
            self.report("AMP103", sites.caller_site(3), "scaler.step() again without scaler.update() in between")
        if id(optimizer) in it.scaled_after_unscale and id(optimizer) in it.unscaled:
            site = it.unscaled[id(optimizer)][1]
            self.report("AMP104", site, "gradients were unscaled, then more scaled gradients were added before scaler.step(): "
                        "the step mixes unscaled and scaled gradients")
        fused = getattr(optimizer, "_step_supports_amp_scaling", False) and id(optimizer) not in it.unscaled
        self._measure_pending(it, id(optimizer))
        depth = getattr(self.local, "in_scaler_step", 0)
        self.local.in_scaler_step = depth + 1
        self.local.inner_steps = 0
        try:
            result = orig(scaler, optimizer, *args, **kwargs)
        finally:
            self.local.in_scaler_step = depth
        it.stepped.add(id(optimizer))
        it.optimizers[id(optimizer)] = optimizer
        if getattr(optimizer, "_step_supports_amp_scaling", False) or not isinstance(optimizer, torch.optim.Optimizer):
            # the step is always called (fused: it skips on the device), or no step hook sees it: read found_inf
            state = getattr(scaler, "_per_optimizer_states", {}).get(id(optimizer), {})
            it.skipped = it.skipped or sum(float(v) for v in state.get("found_inf_per_device", {}).values()) > 0
        else:
            it.skipped = it.skipped or self.local.inner_steps == 0  # scaler.step did not call optimizer.step()
        if fused and self.options.grad_norm:
            it.norms.append(_grad_norm(self.param_ids(optimizer)[0], scaler._get_scale_async()))
        return result

    def update(self, orig, scaler, new_scale=None):
        if not getattr(scaler, "_enabled", False):
            return orig(scaler, new_scale)
        it = self._iteration(scaler)
        states = getattr(scaler, "_per_optimizer_states", {})
        if not any(st.get("found_inf_per_device") for st in states.values()):
            self.report("AMP104", sites.caller_site(3), "scaler.update() with no scaler.step() since the last update "
                        "(update on every micro-batch?)")
            return orig(scaler, new_scale)
        skipped = it.skipped
        if not it.stepped:  # unscale_ then update, no step: what update() backs off on is found_inf
            skipped = sum(float(v) for st in states.values() for v in st.get("found_inf_per_device", {}).values()) > 0
        before = _scale_now(scaler)
        result = orig(scaler, new_scale)
        after = _scale_now(scaler)
        optimizers = list(it.optimizers.values())
        self.iterations[scaler] = _Iteration()
        self.skipped_run = self.skipped_run + 1 if skipped else 0
        if skipped or self.update_site is None:
            self.update_site = sites.caller_site(3)
        if type(scaler) not in self.scaler_classes:
            self.scaler_classes.add(type(scaler))
            site = sites.caller_site(3)
            self.write({"type": "scaler", "class": type(scaler).__name__, "module": type(scaler).__module__,
                        "filename": site[0], "line": site[1], "step": self.step + 1})
        self.emit_step(before, after, skipped, it.norms or None)
        if skipped:
            params = [p for o in optimizers for p in self.param_ids(o)[0]]
            self.sources.on_skipped(self.step, params)
            self.incidents.end_step(self.step, True, self.skipped_run, optimizers, scaler, before)
            if not self.incidents.done:
                self.incidents.arm(self._roots(params))
        else:
            self.incidents.end_step(self.step, False, 0, optimizers, scaler, before)
        self.sources.end_step(self.step)
        return result

    # ---- DeepSpeed ------------------------------------------------------------------------
    def engine_step(self, orig, engine, *args, **kwargs):
        """`DeepSpeedEngine._take_model_step`, which the engine runs once per optimizer step (on a
        gradient-accumulation boundary): one step record from the engine's own loss scaler (the
        scale before and after, `skipped_steps` growing means the overflow check skipped it), and
        AMP701 when the scaler raises at its minimum scale (DeepSpeed's abort)."""
        before = _engine_scale(engine)
        skipped_before = getattr(engine, "skipped_steps", None)
        self.local.in_engine_step = getattr(self.local, "in_engine_step", 0) + 1
        try:
            result = orig(engine, *args, **kwargs)
        except Exception as exc:
            if "loss scale already at minimum" in str(exc):
                try:  # the engine's exception goes on unchanged, whatever happens here
                    self.emit_step(before, before, True, None)
                    self.flush_steps()  # the detector has seen this step: since which step the scale fell
                    scale = "n/a" if before is None else f"{before:g}"
                    self.report("AMP701", sites.caller_site(3), f"DeepSpeed's loss scale reached its minimum ({scale}) "
                                "and the engine aborted the run", step=self.step,
                                since_step=self.detector.run_start or self.detector.first_skip, deepspeed_abort=True)
                except Exception:  # noqa: BLE001 - pragma: no cover
                    pass
            raise
        finally:
            self.local.in_engine_step -= 1
        after = _engine_scale(engine)
        skipped_now = getattr(engine, "skipped_steps", None)
        if isinstance(skipped_before, int) and isinstance(skipped_now, int):
            skipped = skipped_now > skipped_before
        else:
            skipped = bool(getattr(getattr(engine, "optimizer", None), "overflow", False))
        if skipped or self.update_site is None:
            self.update_site = sites.caller_site(3)
        if DeepSpeedEngineMark not in self.scaler_classes:
            self.scaler_classes.add(DeepSpeedEngineMark)
            site = sites.caller_site(3)
            scaler = getattr(getattr(engine, "optimizer", None), "loss_scaler", None)
            self.write({"type": "scaler", "class": type(scaler).__name__ if scaler is not None else type(engine).__name__,
                        "module": type(engine).__module__, "filename": site[0], "line": site[1], "step": self.step + 1})
        norm = None
        if self.options.grad_norm and not skipped:
            value = getattr(engine, "get_global_grad_norm", lambda: None)()
            norm = [value] if isinstance(value, (int, float, torch.Tensor)) else None
        self.emit_step(before, after, skipped, norm)
        if skipped:
            module = getattr(engine, "module", None)
            params = list(module.parameters()) if isinstance(module, torch.nn.Module) else []
            self.sources.on_skipped(self.step, params)
        self.sources.end_step(self.step)
        return result

    def module_class(self, cls: type) -> None:
        """First construction of a module class: a DeepSpeed engine (DeepSpeed's `DeepSpeedEngine`,
        or a subclass such as its pipeline engine) gets its `_take_model_step` wrapped, once. Seen
        here, not at import, because DeepSpeed imports torch (which installs the guard) before
        its engine class exists."""
        self.module_classes.add(cls)
        for klass in cls.__mro__:
            if (klass.__name__ == "DeepSpeedEngine" and str(klass.__module__).startswith("deepspeed")
                    and "_take_model_step" in klass.__dict__ and klass not in self.wrapped_classes):
                self.wrapped_classes.add(klass)
                self._wrap(klass, "_take_model_step", self.engine_step)
                package = sys.modules.get(str(klass.__module__).split(".")[0])
                if getattr(package, "__file__", None):  # lines are the user's `engine.step()`, not DeepSpeed's
                    sites.skip_package(os.path.dirname(os.path.abspath(package.__file__)))

    def _roots(self, params: List[torch.Tensor]) -> List[Any]:
        """The live modules holding any of `params`: the first of them a step calls is its outermost model call."""
        wanted = {id(p) for p in params}
        return [m for m in list(self.build_sites.sites.keys()) if any(id(p) in wanted for p in m.parameters())]

    # ---- optimizers -----------------------------------------------------------------------
    def optimizer_pre(self, optimizer, args, kwargs) -> None:
        if getattr(self.local, "in_scaler_step", 0) or getattr(self.local, "in_engine_step", 0):
            return
        site = None
        if optimizer not in self.checked_optimizers:
            self.checked_optimizers.add(optimizer)
            fp16 = [p for p in self.param_ids(optimizer)[0] if p.dtype == torch.float16]
            if fp16:
                site = sites.caller_site(3)
                self.report("AMP201", site, f"{type(optimizer).__name__} updates {len(fp16)} fp16 parameter tensors: "
                            "small updates round away without fp32 master weights")
        if self._open_scaled_iterations():
            self.report("AMP102", site or sites.caller_site(3), f"{type(optimizer).__name__}.step() called outside "
                        "scaler.step(): it applies gradients that are still multiplied by the loss scale")
        if self.clip_norm is not None:
            self.plain_norm = [self.clip_norm]  # the gradients were clipped: their norm before clipping
        elif self.options.grad_norm:
            self.plain_norm = [_grad_norm(self.param_ids(optimizer)[0])]

    def optimizer_post(self, optimizer, args, kwargs) -> None:
        if getattr(self.local, "in_scaler_step", 0):
            self.local.inner_steps = getattr(self.local, "inner_steps", 0) + 1  # scaler.step did step it
            return
        if getattr(self.local, "in_engine_step", 0):
            return  # a DeepSpeed engine's step: recorded by `engine_step`
        self.emit_step(None, None, False, self.plain_norm)
        self.plain_norm = None

    # ---- backward, autocast, clipping, saving ---------------------------------------------
    def backward(self, orig, tensor, *args, **kwargs):
        ref = self.scaled_outputs.get(id(tensor))
        scaled = ref is not None and ref() is tensor
        suspect = not scaled and (self.fp16_autocast or tensor.dtype == torch.float16)
        if not suspect:
            return orig(tensor, *args, **kwargs)
        site = sites.caller_site(3)
        if ("AMP105", site[0], site[1]) in self.reported:
            return orig(tensor, *args, **kwargs)
        probe = None
        if not kwargs.get("inputs") and len(args) < 4:  # (a backward restricted to some inputs is not measured)
            gradient = args[0] if args else kwargs.get("gradient")
            params = list({id(p): p for m in list(self.build_sites.sites.keys()) for p in m._parameters.values() if p is not None}.values())
            probe = underflow.before_backward(tensor, gradient, params)
        result = orig(tensor, *args, **kwargs)
        message = "backward through fp16 autocast without a GradScaler"
        data: Dict[str, Any] = {}
        if probe is not None:
            flushed, nonzero = underflow.after_backward(probe)
            if nonzero:
                share = flushed / nonzero
                message += (f": {100 * share:.1f}% of the gradient values ({flushed} of {nonzero}) were flushed to zero "
                            f"(nonzero with the loss scaled by {underflow.SCALE:g})")
                data = {"flushed_share": share, "flushed": flushed, "nonzero_scaled": nonzero}
        self.report("AMP105", site, message, **data)
        return result

    def autocast_enter(self, orig, ctx):
        result = orig(ctx)
        if getattr(ctx, "_enabled", False) and torch.is_grad_enabled():  # no_grad evaluation never reaches backward
            dtype = getattr(ctx, "fast_dtype", None)
            if self.autocast is None:
                self.autocast = (str(getattr(ctx, "device", "")), str(dtype).replace("torch.", ""))
            if dtype == torch.float16:
                self.fp16_autocast = True
        return result

    def clip(self, orig, parameters, *args, **kwargs):
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        open_its = self._open_scaled_iterations()
        free = None  # the iteration whose pending norm clip_grad_norm_'s own result gives
        if open_its:
            unscaled = set()
            for it in open_its:
                for ids, _ in it.unscaled.values():
                    unscaled |= ids
            if any(id(p) not in unscaled for p in params if p.grad is not None):
                self.report("AMP101", sites.caller_site(3), f"{getattr(orig, '__name__', 'clipping')} on gradients still "
                            "multiplied by the loss scale: call scaler.unscale_(optimizer) first")
            ids = {id(p) for p in params}
            for it in open_its:
                pending = [k for k, ps in it.pending_norm.items() if {id(p) for p in ps} == ids]
                if pending and getattr(orig, "__name__", "") == "clip_grad_norm_":
                    free = (it, pending[0])
                else:
                    self._measure_pending(it)  # measured before clipping changes them
        result = orig(params, *args, **kwargs)
        if free is not None and isinstance(result, torch.Tensor) and result.numel() == 1:
            it, key = free
            it.pending_norm.pop(key, None)
            it.norms.append(result.detach())
        elif not open_its and isinstance(result, torch.Tensor) and result.numel() == 1:
            self.clip_norm = result.detach()
        return result

    def save(self, orig, obj, *args, **kwargs):
        fp16, fp32, opt_state, scaler_state = _inspect_checkpoint(obj)
        site = sites.caller_site(3)
        if fp16:
            self.fp16_saves.append({"site": site, "step": self.step, "count": fp16})
        self.fp32_saved = self.fp32_saved or fp32 > 0
        if scaler_state:
            self.scaler_state_saved = True
        elif opt_state and any(getattr(s, "_enabled", False) for s in list(self.iterations.keys())):
            self.saves_without_scaler.append({"site": site, "step": self.step})
        return orig(obj, *args, **kwargs)

    def finish(self) -> None:
        """At exit, the checkpoint findings, judged on every save of the run: AMP401 when fp16
        tensors were saved and no fp32 ones ever were (an fp16 export beside an fp32 checkpoint is
        fine), AMP402 when optimizer state was saved and scaler state never was."""
        self.flush_steps()
        if self.fp16_saves and not self.fp32_saved:
            first = self.fp16_saves[0]
            self.report("AMP401", first["site"], f"torch.save of {first['count']} fp16 tensors and no fp32 copy of the "
                        "weights in any checkpoint of this run: the fp16 rounding is kept for good", step=first["step"], after=True)
        if self.saves_without_scaler and not self.scaler_state_saved:
            first = self.saves_without_scaler[0]
            self.report("AMP402", first["site"], "checkpoint with optimizer state but no GradScaler state "
                        "(scaler.state_dict()): a resumed run restarts the loss scale", step=first["step"], after=True)
        self.sources.disarm()
        self.incidents.disarm()
        self.log.close()

    # ---- patching -------------------------------------------------------------------------
    def _wrap(self, owner: Any, name: str, handler) -> None:
        original = getattr(owner, name)

        def wrapper(*args, **kwargs):
            return handler(original, *args, **kwargs)

        wrapper.__name__ = getattr(original, "__name__", name)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        wrapper.__wrapped__ = original
        setattr(owner, name, wrapper)
        self.restore.append((owner, name, original))

    def _wrap_scaler(self, cls: type) -> None:
        """Wrap the GradScaler methods `cls` defines itself (GradScaler: all four; ShardedGradScaler
        overrides scale, unscale_ and update). A call that reaches the same method name again
        from inside one (a subclass calling `super().update()`) runs unobserved: one step, one record."""
        if cls in self.wrapped_classes:
            return
        self.wrapped_classes.add(cls)
        local = self.local
        for name, handler in (("scale", self.scale), ("unscale_", self.unscale_), ("step", self.scaler_step), ("update", self.update)):
            if name not in cls.__dict__:
                continue

            def observed(orig, *args, _name=name, _handler=handler, **kwargs):
                inside = getattr(local, "scaler_calls", None)
                if inside is None:
                    inside = local.scaler_calls = set()
                if _name in inside:
                    return orig(*args, **kwargs)
                inside.add(_name)
                try:
                    return _handler(orig, *args, **kwargs)
                finally:
                    inside.discard(_name)

            self._wrap(cls, name, observed)

    def install(self) -> None:
        sites.skip_package(os.path.dirname(torch.__file__))
        from torch.amp.grad_scaler import GradScaler

        self._wrap_scaler(GradScaler)
        guard = self
        scaler_init = GradScaler.__init__

        def init_scaler(scaler, *args, **kwargs):
            scaler_init(scaler, *args, **kwargs)
            guard._wrap_scaler(type(scaler))  # a subclass (ShardedGradScaler) overrides some of them

        init_scaler.__wrapped__ = scaler_init
        GradScaler.__init__ = init_scaler
        self.restore.append((GradScaler, "__init__", scaler_init))
        self._wrap(torch.Tensor, "backward", self.backward)
        self._wrap(torch.autocast, "__enter__", self.autocast_enter)
        import torch.nn.utils.clip_grad as clip_grad

        for name in ("clip_grad_norm_", "clip_grad_value_"):
            original = getattr(clip_grad, name)
            self._wrap(clip_grad, name, self.clip)
            if getattr(torch.nn.utils, name, None) is original:
                setattr(torch.nn.utils, name, getattr(clip_grad, name))
                self.restore.append((torch.nn.utils, name, original))
        self._wrap(torch, "save", self.save)
        guard = self
        module_init = torch.nn.Module.__init__

        def init(module, *args, **kwargs):
            module_init(module, *args, **kwargs)
            guard.build_sites.record(module, sys._getframe(1))
            if type(module) not in guard.module_classes:
                guard.module_class(type(module))

        init.__wrapped__ = module_init
        torch.nn.Module.__init__ = init
        self.restore.append((torch.nn.Module, "__init__", module_init))
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self.hooks = [register_optimizer_step_pre_hook(self.optimizer_pre), register_optimizer_step_post_hook(self.optimizer_post)]

    def uninstall(self) -> None:
        for owner, name, original in reversed(self.restore):
            setattr(owner, name, original)
        self.restore = []
        for h in getattr(self, "hooks", []):
            h.remove()
        self.hooks = []


class DeepSpeedEngineMark:
    """Stands for DeepSpeed's engine in `Guard.scaler_classes` (one `scaler` record per process)."""


def _engine_scale(engine: Any) -> Optional[float]:
    """A DeepSpeed engine's current loss scale, read from its optimizer's loss scaler
    (`optimizer.loss_scaler.cur_scale`, else `optimizer.cur_scale`, else `optimizer.loss_scale`);
    None for an engine without one (bf16, fp32)."""
    opt = getattr(engine, "optimizer", None)
    for owner, name in ((getattr(opt, "loss_scaler", None), "cur_scale"), (opt, "cur_scale"), (opt, "loss_scale")):
        value = getattr(owner, name, None) if owner is not None else None
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def _inspect_checkpoint(obj: Any) -> Tuple[int, int, bool, bool]:
    """(fp16 tensors, fp32 tensors, holds optimizer state, holds GradScaler state), looking a bounded
    way in; tensors inside optimizer state do not count (its moments are the optimizer's business)."""
    fp16 = fp32 = 0
    opt_state = scaler_state = False
    stack = [(obj, 0)]
    seen = 0
    while stack and seen < 100000:
        value, depth = stack.pop()
        seen += 1
        if isinstance(value, torch.Tensor):
            fp16 += value.dtype == torch.float16
            fp32 += value.dtype == torch.float32
        elif isinstance(value, dict) and depth < 6:
            keys = set(k for k in value.keys() if isinstance(k, str))
            if {"state", "param_groups"} <= keys:
                opt_state = True
                continue
            if {"scale", "_growth_tracker"} <= keys:
                scaler_state = True
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple)) and depth < 6:
            stack.extend((v, depth + 1) for v in value)
    return fp16, fp32, opt_state, scaler_state


def install(directory: str, options: Optional[Options] = None) -> Guard:
    """Install the process-wide guard (idempotent) and finish it at exit."""
    global _GUARD
    if _GUARD is None:
        _GUARD = Guard(directory, options)
        _GUARD.install()
        atexit.register(_GUARD.finish)
    return _GUARD


def current() -> Optional[Guard]:
    return _GUARD


def uninstall() -> None:
    global _GUARD
    if _GUARD is not None:
        _GUARD.finish()
        _GUARD.uninstall()
        try:
            atexit.unregister(_GUARD.finish)
        except Exception:  # pragma: no cover
            pass
        _GUARD = None
