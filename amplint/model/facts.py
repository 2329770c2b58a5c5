"""Project facts: what the whole project says about its precision.

Some hazards only matter if the project runs fp16 somewhere: a `-1e9` mask in a
model file is harmless in a bf16-only project. Rules emit such diagnostics with
`condition="fp16"`; the engine keeps them only if the project facts (merged
over every file, so the order files are read in never matters) or the
`precision` setting say fp16 is possible.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from .precision_names import FP16_CAST_WORDS, FP16_WORDS, LOW_PRECISION_WORDS

#: the diagnostic holds if the project may run any code in fp16
FP16 = "fp16"
#: the diagnostic holds if the project uses autocast anywhere
AUTOCAST = "autocast"
#: ... or if the file is a module of an importable package of a project that anticipates autocast
#: somewhere (`anticipates_autocast`): library code runs under its users' autocast whether or not the
#: library opens a region itself
AUTOCAST_OR_LIBRARY = "autocast-or-library"
#: ... the project uses autocast anywhere, and a low-precision autocast of the project may run the
#: file's code: some program loading the file may enter one (`model/embedded.py`: a module imports
#: both; for a vendored library copy, a module outside it); AUTOCAST_OR_LIBRARY asks that too
#: where its library clause (a package the project distributes) does not hold
AUTOCAST_REACHED = "autocast-reached"
#: the diagnostic holds if the project may resume from a checkpoint: some file of it (a `.py`, a
#: notebook) restores an optimizer's state or names a resume (`project_resumes`); without a file on
#: disk the diagnostic's own file is the project, and the rule attaches it only where that file
#: shows none
RESUMED = "resumed"
#: the diagnostic holds if the project's default run is fp32: no file of the project fixes a low
#: precision anywhere (`fp32_default`), so low precision comes only from a run-time choice left off
#: by default (accelerate's config, a launcher flag). Not read from the facts (it holds while they
#: are off, and facts only ever turn on): from the project's text, when conditions are resolved
FP32_DEFAULT = "fp32-default"
#: the diagnostic holds if some Lightning `Trainer` of the project runs fp16 mixed precision (its
#: plugin scales the loss) on the path the project configures (`lightning_trainers.fp16_trainer`);
#: read from the project's text when conditions are resolved, like FP32_DEFAULT
LIGHTNING_FP16 = "lightning-fp16"
#: `dtype-property=<name>` (`<name>()` for a method call): the project maps a config's precision
#: to a dtype through the property (method) `<name>` among literal dtypes that include float16
#: (`dtype_properties.fp16_dtype_property`: `cfg.autocast_precision` returning `torch.float16` for
#: `precision="amp_fp16"`); read from the project's text when conditions are resolved
DTYPE_PROPERTY = "dtype-property"
#: `dtype-property-may-fp16=<name>` (or `<name>@<function>`), as a base condition or a requirement:
#: the diagnostic holds unless the project's property (method) `<name>` is known to map to dtypes
#: other than float16 only (`dtype_properties.dtype_property_values`: dinov3's `ModelDtype.autocast_dtype`
#: of `torch.bfloat16` and `torch.float32`) and, with `@<function>`, no other project file spells the
#: function whose parameter carries the value into the region (a caller the file does not show may pass
#: float16); what a finding that matters only when a scaler scales fp16 needs (AMP402)
DTYPE_PROPERTY_MAY_FP16 = "dtype-property-may-fp16"

#: folders whose files are run, not imported by users (relative to the project root)
_NOT_LIBRARY_DIRS = frozenset(("tests", "test", "testing", "examples", "example", "scripts", "benchmarks", "docs"))
_NOT_LIBRARY_FILES = frozenset(("__main__.py", "setup.py", "conftest.py", "manage.py"))


@dataclass(frozen=True)
class FileFacts:
    fp16: bool = False  # fp16 autocast, .half(), torch.float16, an enabled GradScaler
    bf16: bool = False
    dtype_unknown: bool = False  # an autocast region whose dtype is decided at run time
    autocast: bool = False  # an autocast region that may run low precision (not enabled=False, not fp32)
    #: the file anticipates autocast: a region of any enabled state (not fp32), custom_fwd /
    #: custom_bwd, the autocast state queried, a GradScaler constructed
    autocast_aware: bool = False


@dataclass(frozen=True)
class ProjectFacts:
    fp16: bool = False
    bf16: bool = False
    dtype_unknown: bool = False
    autocast: bool = False
    autocast_aware: bool = False

    @classmethod
    def from_files(cls, files: Iterable[FileFacts]) -> "ProjectFacts":
        fp16 = bf16 = unknown = autocast = aware = False
        for f in files:
            fp16 |= f.fp16
            bf16 |= f.bf16
            unknown |= f.dtype_unknown
            autocast |= f.autocast
            aware |= f.autocast_aware
        return cls(fp16=fp16, bf16=bf16, dtype_unknown=unknown, autocast=autocast, autocast_aware=aware)

    @property
    def may_run_fp16(self) -> bool:
        return self.fp16 or self.dtype_unknown


def library_module(filename: Optional[str], root: Optional[str] = None) -> bool:
    """Whether `filename` is a module of an importable package: a `.py` file next to an
    `__init__.py`, not a test, a `__main__`/setup script, or under tests/, examples/,
    scripts/, benchmarks/ or docs/ of the project. Read when conditions are resolved
    (never cached with a file's results: adding an `__init__.py` changes the answer)."""
    if not filename or not filename.endswith(".py") or filename.startswith("<"):
        return False
    name = os.path.basename(filename)
    if name in _NOT_LIBRARY_FILES or name.startswith("test_") or name.endswith("_test.py"):
        return False
    folder = os.path.dirname(os.path.abspath(filename))
    if not os.path.isfile(os.path.join(folder, "__init__.py")):
        return False
    where = os.path.abspath(filename)
    if root:
        base = os.path.abspath(root)
        if where.startswith(base + os.sep):
            where = where[len(base) + 1 :]
    return not any(part in _NOT_LIBRARY_DIRS for part in where.split(os.sep)[:-1])


_IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import|import[ \t]+([\w.]+))", re.M)


def _silent_with_imports(
    filename: str, text: str, root: Optional[str], words: "re.Pattern[str]", imported: bool = False
) -> Optional[str]:
    """The project root of `filename` when neither its text nor a project module it imports
    matches `words` (a module that cannot be read counts as matching); else None. `imported`: a
    module it imports is read for what it may do to the file's tensors
    (`precision_names.imported_text_matches`: a dtype test or a dtype it picks for its own
    tensors does not count)."""
    from .texts import project_root, read_text

    if words.search(text):
        return None
    folder = os.path.dirname(os.path.abspath(filename))
    base = project_root(filename, root) or folder
    for module in _local_imports(text, folder, base):
        other = read_text(module)
        if other is None or _matches(words, other, imported):
            return None
    return base


def _matches(words: "re.Pattern[str]", text: str, imported: bool) -> bool:
    from .precision_names import imported_text_matches

    return imported_text_matches(words, text) if imported else bool(words.search(text))


def fp32_script(filename: Optional[str], root: Optional[str] = None) -> bool:
    """`filename` is a script run on its own that no low-precision code can reach: it has an
    `if __name__ == "__main__":` block, and neither its text, nor the project modules it
    imports, nor a project module that imports it names a low-precision dtype, autocast, a
    loss scaler or a precision flag (pytorch/examples' gat/main.py, next to the repository's
    fp16 examples). The project's fp16 elsewhere cannot give its tensors that dtype, so an
    fp16-conditional finding there does not hold. Read when conditions are resolved."""
    from .texts import MAIN_GUARD, project_files, read_text

    if not filename or not filename.endswith(".py"):
        return False
    text = read_text(filename)
    if text is None or not MAIN_GUARD.search(text):
        return False
    base = _silent_with_imports(filename, text, root, LOW_PRECISION_WORDS)
    if base is None:
        return False
    path = os.path.abspath(filename)
    files = project_files(base, (".py",))
    for _, other in _importers(path, files, _stems(files), {path}):
        if LOW_PRECISION_WORDS.search(other):
            return False  # an importer that may run low precision keeps the finding
    return True


def fp32_default(filename: Optional[str], root: Optional[str] = None) -> bool:
    """No file of the project `filename` belongs to (its code, notebooks, launch scripts,
    configs and docs: `_FP32_DEFAULT_SUFFIXES`) fixes a low precision
    (`LOW_PRECISION_FIXED_WORDS`: an fp16/bf16 dtype, cast or spelling, torch's own autocast, a
    GradScaler, a dtype chosen by name or kept in a `*_dtype` variable, DeepSpeed, a framework
    precision such as "16-mixed"): the tensors of its default run are fp32, and only a run-time
    choice nobody wrote down (accelerate's config or launch flag: `accelerator.autocast()` is
    off by default) makes them fp16/bf16. lucidrains/audiolm-pytorch's `Attend`, which forces SDPA
    onto the flash kernel on an A100 while the trainer's precision is the user's accelerate
    config. A listing at its limit, or a file that cannot be read, is not known: False."""
    from .precision_names import LOW_PRECISION_FIXED_WORDS
    from .texts import project_root, read_text, whole_listing

    if not filename or not filename.endswith(".py"):
        return False
    base = project_root(filename, root)
    if base is None:
        return False
    files = whole_listing(base, _FP32_DEFAULT_SUFFIXES)
    if files is None or os.path.abspath(filename) not in {os.path.abspath(f) for f in files}:
        return False
    for path in files:
        text = read_text(path)
        if text is None or LOW_PRECISION_FIXED_WORDS.search(text):
            return False
    return True


#: what `fp32_default` reads: code, notebooks, launchers (`accelerate launch --mixed_precision
#: fp16`), configs a run reads (a DeepSpeed JSON, a Lightning/Hydra YAML: `precision: 16-mixed`),
#: and docs (a README's documented launch command is the path users take)
_FP32_DEFAULT_SUFFIXES = (".py", ".ipynb", ".sh", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".md", ".rst", ".txt")


#: how many rounds of importers `fp16_unreachable` follows up from the file (PatchTST's Pyraformer:
#: `Modules.py` <- `SubLayers.py` <- `Layers.py` <- `Pyraformer_LR.py` <- `long_range_main.py`)
_IMPORTER_ROUNDS = 6


def fp16_unreachable(filename: Optional[str], root: Optional[str] = None) -> bool:
    """`filename` is a file the project runs itself (not a module of an importable package:
    `library_module`), and no fp16 can reach its tensors: neither its text, nor the project
    modules it imports, nor the project modules importing it (and theirs, `_IMPORTER_ROUNDS`
    rounds up), nor the project modules each importer imports, name an fp16 dtype or cast,
    autocast, a loss scaler, a mixed-precision flag or a dtype looked up at run time
    (`FP16_WORDS`; a bf16/fp32 choice may be there), and some project module imports it (one
    nothing names may be built from fp16 code by a registry) or it runs itself (`runs_itself`:
    a test module, a `__main__` script). lerobot's
    reference pi0 model under `tests/`, whose only precisions are "bfloat16"/"float32", next
    to fp16 code elsewhere in the repository. A library module is never asked: its users'
    fp16 is not in the project. Read when conditions are resolved."""
    return _unreached_by(FP16_WORDS, filename, root)


def cast_unreachable(filename: Optional[str], root: Optional[str] = None) -> bool:
    """As `fp16_unreachable`, for casts of modules: no code reaching the file may cast a module
    to fp16 (`FP16_CAST_WORDS`), though fp16 autocast may run there. Then the buffers and
    parameters its modules make in fp32 stay fp32 (`torchapi.MODULE_FP32`), and what they
    promote is fp32 too: microsoft/LoRA's GPT-2 `w * self.bias - 1e10 * (1 - self.bias)` under
    apex O1. Read when conditions are resolved."""
    return _unreached_by(FP16_CAST_WORDS, filename, root)


def _unreached_by(words: "re.Pattern[str]", filename: Optional[str], root: Optional[str]) -> bool:
    """`filename` is not a library module, neither its text, nor the project modules it imports,
    nor those importing it (`_IMPORTER_ROUNDS` rounds up) nor what each of those imports match
    `words`, and some module imports it or it runs itself."""
    from .texts import project_files, read_text

    if not filename or not filename.endswith(".py") or library_module(filename, root):
        return False
    text = read_text(filename)
    if text is None:
        return False
    base = _silent_with_imports(filename, text, root, words, imported=True)
    if base is None:
        return False
    path = os.path.abspath(filename)
    files = project_files(base, (".py",))
    stems = _stems(files)
    seen = {path}
    frontier = [path]
    for _ in range(_IMPORTER_ROUNDS):
        following = []
        for target in frontier:
            for other_path, other in _importers(target, files, stems, seen):
                if words.search(other):
                    return False  # an importer that may run fp16 keeps the finding
                if _imports_words(other_path, other, base, words, imported=True):
                    return False  # ... and so does one that imports code that may (its trainer)
                seen.add(other_path)
                following.append(other_path)
        frontier = following
        if not frontier:
            break
    # importers left unread, or none at all (a module nothing names may be built by a registry
    # or a config from fp16 code): not known, unless the file is a program of its own
    return not frontier and (len(seen) > 1 or runs_itself(path, text))


#: a module a test runner collects (pytest's default `python_files`, unittest's `test*.py`)
_TEST_MODULE = re.compile(r"^(?:test_.*|.*_test)\.py$")


def runs_itself(filename: str, text: str) -> bool:
    """`filename` is a program of its own: a test module a runner collects (`test_*.py`,
    `*_test.py`) or a script with an `if __name__ == "__main__":` block. Nothing needs to import
    it for it to run, so a registry or config building it from fp16 code is not the way its
    tensors come (OpenNMT-py's `onmt/tests/test_beam_search.py`, which fills fp32 beam scores)."""
    from .texts import MAIN_GUARD

    return bool(_TEST_MODULE.match(os.path.basename(filename))) or bool(MAIN_GUARD.search(text))


def _imports_words(filename: str, text: str, base: str, words: "re.Pattern[str]", imported: bool = False) -> bool:
    """A project module `text` (of `filename`) imports matches `words` (or cannot be read): an
    importer of the file whose own imports bring fp16 code into its program (a script that imports
    the model and a trainer that autocasts). `imported`: as for `_silent_with_imports`."""
    from .texts import read_text

    for module in _local_imports(text, os.path.dirname(os.path.abspath(filename)), base):
        other = read_text(module)
        if other is None or _matches(words, other, imported):
            return True
    return False


def _stems(files: Iterable[str]) -> Dict[str, List[str]]:
    from .project.index import module_stem

    out: Dict[str, List[str]] = {}
    for path in files:
        out.setdefault(module_stem(path), []).append(path)
    return out


def _importers(target: str, files: Iterable[str], stems: Dict[str, List[str]], seen: Set[str]) -> Iterator[Tuple[str, str]]:
    """(path, text) of the readable project files not in `seen` with an import that may load
    `target` (`project.index.may_import`)."""
    from .project.index import may_import, module_stem
    from .texts import read_text

    stem = module_stem(target)
    namesakes = [p for p in stems.get(stem, ()) if p != target]
    for other_path in files:
        if other_path in seen:
            continue
        other = read_text(other_path)
        if other is not None and stem in other and may_import(other_path, other, target, namesakes):
            yield other_path, other


def _local_imports(text: str, folder: str, base: str) -> List[str]:
    """The project files `text`'s imports name (`from model import X` next to it, `import
    pkg.sub` under the project root): one level, files that exist."""
    found = []
    for m in _IMPORT_LINE.finditer(text):
        spelled = m.group(1) or m.group(2) or ""
        dots = len(spelled) - len(spelled.lstrip("."))
        parts = [p for p in spelled.lstrip(".").split(".") if p]
        if not parts:
            continue
        starts = [folder] if dots else [folder, base]
        for start in starts:
            for _ in range(max(0, dots - 1)):
                start = os.path.dirname(start)
            target = os.path.join(start, *parts)
            for candidate in (target + ".py", os.path.join(target, "__init__.py")):
                if os.path.isfile(candidate):
                    found.append(candidate)
    return found


def anticipates_autocast(facts: ProjectFacts, precision: str = "auto") -> bool:
    """The project's code anticipates running under autocast somewhere: it enters a region (also
    `enabled=False`, to keep a caller's autocast out; not a `dtype=torch.float32` one), decorates
    a Function with `custom_fwd`/`custom_bwd`, queries the autocast state, builds a GradScaler,
    or the setting names a precision. A package that does none of these was not written to run
    under autocast, its users' or its own: fp32-only BasicSR and stylegan2, torchtitan (bf16
    parameters from FSDP, never autocast) in the blind drill; its own code decides what its
    Functions see, so a library module of it is not assumed to run under some user's autocast."""
    return facts.autocast or facts.autocast_aware or precision in ("fp16", "bf16")


#: a condition `<base>|<requirement>|...` also needs each requirement, read from the project's files
#: where the diagnostic's file is known (a requirement is `<kind>` or `<kind>=<name>`):
#: `kernel-not-mixed=<name>`: the project's source of the kernel bound as `<name>` is not one built
#: for low-precision activations next to fp32 weights; `kernel-fp32=<name>`: it takes float32 only
#: (`model/kernels.py`; AMP501)
KERNEL_NOT_MIXED = "kernel-not-mixed"
KERNEL_FP32 = "kernel-fp32"
#: some code reaching the file may cast its modules to fp16 (`cast_unreachable` does not hold): what
#: a finding on a tensor a module holds in fp32 (`torchapi.MODULE_FP32`) needs
MODULES_CAST = "modules-cast"
#: `reached=<name>`: the module-level definition `<name>` holding the site can run, as the project
#: uses a library copy vendored into it (`embedded.definition_reached`)
REACHED = "reached"
#: some program loading the file may enter a low-precision autocast (`embedded.unreached` does not
#: hold): what a finding on a tensor that only autocast makes fp16 needs (a matmul of `.float()`ed
#: operands: fp32 outside autocast, whatever casts the modules)
AUTOCAST_RUNS = "autocast-runs"
#: `flag-set=<name>`: some project file other than the diagnostic's own may set the private flag
#: attribute `<name>` whose truth selects the code (`flag_may_be_set`): what a finding in a branch
#: the file itself only ever turns off needs (a base condition of its own, holding everywhere else)
FLAG_SET = "flag-set"
#: `runs=<definition>` (or `runs`, for the module's top level), as a base condition or a
#: requirement: some program of the project may run the code holding the site, the module-level
#: `def`/`class` `<definition>` of the file (`embedded.never_runs` does not hold: the file is
#: loaded by some program, or it is a script whose `__main__` block reaches the definition):
#: what a finding that holds wherever the code runs needs (AMP001's deprecated call warns only
#: when it runs)
RUNS = "runs"
#: `called-elsewhere=<name>`: some project file other than the diagnostic's own spells `<name>`
#: (a word) where a low-precision autocast of the project may run it (`spelled_under_autocast`):
#: what a finding on a Function whose own file's every application casts its kernel's inputs by
#: hand needs (AMP501; a test applying it on inputs it built, with no autocast reaching it, does not count)
CALLED_ELSEWHERE = "called-elsewhere"
#: `unforced=<Function>`: some application of the project's Function `<Function>` (a class of
#: the diagnostic's file) may run outside an mmcv `@force_fp32()` method of a module setting
#: `fp16_enabled` (`mmcv_fp16.forced_only` does not hold): what a finding on a Function whose
#: inputs autocast may make low precision needs (AMP501; bevfusion's `bev_pool`, applied only by
#: `BaseTransform.bev_pool`, runs with fp32 inputs and autocast off)
UNFORCED = "unforced"
#: code the diagnostic's file does not show may run its entry points under a low-precision
#: autocast (`embedded.runner_may_autocast`: a `conftest.py` above it that may enter one, or a
#: project module importing it): what a finding on a Function that only the file's own entry
#: points apply, in a file entering no autocast, needs (AMP501: a test's own Function)
RUNNER_AUTOCAST = "runner-autocast"
#: `argument-passed=<Class>.<param>.<index>` (a base condition or a requirement): some
#: construction of the project's class `<Class>` may pass its `__init__` parameter `<param>`
#: (positional `<index>`, after `self`; `argument_may_be_passed`): what a finding under a guard
#: on the attribute that parameter sets, whose default turns the guard off, needs (AMP101's
#: `if self.clip_grad_norm > 0.0:` when no builder passes `clip_grad_norm`)
ARGUMENT_PASSED = "argument-passed"
#: `importer-calls=<name>`: some project file that may import the diagnostic's file imports
#: `<name>` by that word and calls it (`<name>(` or `@<name>`; `importer_calls`): what a finding
#: on a module that only re-exports a deprecated name (GLIP's `utils/amp.py`) needs
IMPORTER_CALLS = "importer-calls"


def with_requirement(condition: str, kind: str, name: str = "") -> str:
    """`condition`, also needing the requirement `kind` (of `name`, for the kinds that take one)."""
    return f"{condition}|{kind}={name}" if name else f"{condition}|{kind}"


def _unreached(filename: Optional[str], root: Optional[str], precision: str) -> bool:
    from .embedded import unreached

    return unreached(filename, root, anywhere=precision in ("fp16", "bf16"))


def _unreached_embedded(filename: Optional[str], root: Optional[str], by: str = AUTOCAST) -> bool:
    from .embedded import unreached_embedded

    return unreached_embedded(filename, root, by)


def _library_code(facts: ProjectFacts, precision: str, filename: Optional[str], root: Optional[str]) -> bool:
    """A module of a package the project distributes (not a copy embedded in it), in a project
    that anticipates autocast: it runs under its users' autocast. A subproject of a checkout
    (its own packaging below the `.git`) is asked by its own files: an autocast of a sibling
    subproject, which cannot import it, was not written for it."""
    from .embedded import distributed, embedded_package, subproject_anticipates

    return (
        anticipates_autocast(facts, precision) and library_module(filename, root)
        and distributed(filename, root) and embedded_package(filename, root) is None
        and (precision in ("fp16", "bf16") or subproject_anticipates(filename, root))
    )


def _requirement_holds(requirement: str, filename: Optional[str], root: Optional[str], precision: str = "auto") -> bool:
    from .embedded import definition_reached
    from .kernels import kernel_dtypes

    kind, _, name = requirement.partition("=")
    if kind == KERNEL_NOT_MIXED:
        return kernel_dtypes(name, filename, root) != "mixed"
    if kind == KERNEL_FP32:
        return kernel_dtypes(name, filename, root) == "fp32"
    if kind == MODULES_CAST:
        return not cast_unreachable(filename, root)
    if kind == REACHED:
        return definition_reached(filename, name, root)
    if kind == AUTOCAST_RUNS:
        return not _unreached(filename, root, precision)
    if kind == RUNS:
        return filename is None or site_runs(filename, name or None, root)
    if kind == RUNNER_AUTOCAST:
        from .embedded import runner_may_autocast

        return runner_may_autocast(filename, root)
    if kind == CALLED_ELSEWHERE:
        return spelled_under_autocast(filename, name, root, precision)
    if kind == UNFORCED:
        from .mmcv_fp16 import forced_only

        return filename is None or not forced_only(filename, name, root, lambda path: not _unreached(path, root, precision))
    if kind == ARGUMENT_PASSED:
        return argument_may_be_passed(filename, name, root)
    if kind == IMPORTER_CALLS:
        return importer_calls(filename, name, root)
    if kind == DTYPE_PROPERTY_MAY_FP16:
        return property_may_be_fp16(filename, name, root, precision)
    raise ValueError(f"unknown requirement {requirement!r}")


#: a resume in a project's text: an optimizer's state restored (`optimizer.load_state_dict(`,
#: `self.opt_g.load_state_dict(`, `load_state_dict(ckpt["optimizer"])`), or a resume, a restore
#: or a checkpoint load named (`args.resume`, `--resume_from`, `load_checkpoint(`, `restore(`)
_RESUME = re.compile(
    r"opt\w*(?:\[[^\]\n]*\])?\s*\.\s*load_state_dict\s*\(|load_state_dict\s*\([^)\n]*opt"
    r"|resum|restor|load_(?:checkpoint|ckpt|model_and_optim|optim)|\bload_state\s*\(",
    re.IGNORECASE,
)
_resumes: Dict[Tuple[str, int], bool] = {}


def project_resumes(filename: str, root: Optional[str] = None) -> bool:
    """Some file of the diagnostic's project may resume from a checkpoint (`_RESUME` in a `.py`
    file or a notebook); True when the project cannot be read whole (cut at the listing's limit).
    A file that is not on disk is its own project (`lint_source`, stdin). Read when conditions are
    resolved."""
    from .texts import files_stamp, project_root, read_text, whole_listing

    base = project_root(filename, root)
    if base is None:
        return False  # no project on disk: the file (which shows no resume) is all there is
    listing = whole_listing(base, (".py", ".ipynb"))
    if listing is None:
        return True
    key = (base, files_stamp(listing))
    found = _resumes.get(key)
    if found is None:
        if len(_resumes) > 32:
            _resumes.clear()
        found = _resumes[key] = any(_RESUME.search(read_text(p) or "") for p in listing)
    return found


def property_may_be_fp16(filename: Optional[str], spec: str, root: Optional[str] = None, precision: str = "auto") -> bool:
    """`spec` is `<name>` or `<name>@<function>` (`DTYPE_PROPERTY_MAY_FP16`): False only when the
    project's definitions of the property `<name>` are all known and none returns float16, and no
    project file other than `filename` spells `<function>`. A run said to be fp16 (`precision`) may
    be; one said to be bf16 is not. Read when conditions are resolved."""
    from .dtype_properties import dtype_property_values

    if precision in ("fp16", "bf16"):
        return precision == "fp16"
    if filename is None:
        return True
    name, _, function = spec.partition("@")
    values = dtype_property_values(filename, name, root)
    if values is None or "fp16" in values:
        return True
    return bool(function) and flag_may_be_set(filename, function, root)


def flag_may_be_set(filename: str, name: str, root: Optional[str] = None) -> bool:
    """Some project `.py` file other than `filename` spells `name` (a word): it may set the flag
    (a subclass's `self.<name> = True`, a `setattr`, a keyword). True when the project cannot be
    read whole (cut at the listing's limit); a file that is not on disk is its own project (the
    rule read that file already). Read when conditions are resolved."""
    return _another_file_spells(filename, name, root, lambda path: True)


def _another_file_spells(filename: str, name: str, root: Optional[str], counts: Callable[[str], bool]) -> bool:
    """A project `.py`/`.ipynb` file other than `filename` spells the word `name` and `counts(path)`
    holds for it; True when the project cannot be read whole, False outside a project."""
    from .texts import project_root, read_text, whole_listing

    base = project_root(filename, root)
    if base is None:
        return False
    listing = whole_listing(base, (".py", ".ipynb"))
    if listing is None:
        return True
    word = re.compile(rf"\b{re.escape(name)}\b")
    own = os.path.abspath(filename)
    return any(os.path.abspath(p) != own and word.search(read_text(p) or "") and counts(p) for p in listing)


def importer_calls(filename: Optional[str], name: str, root: Optional[str] = None) -> bool:
    """Some project `.py` file that may import `filename` (`project.index.may_import`) imports
    `name` from it (`from pkg.amp import name`, `from .amp import (...)`) and calls it (`name(`,
    `@name`); torch's own module of that name (`from torch.cuda.amp import`) is not it. False
    outside a project or when the project cannot be read whole (precision first: the module
    itself calls nothing). Read when conditions are resolved."""
    from .project.index import module_stem
    from .texts import project_root, whole_listing

    if filename is None:
        return False
    base = project_root(filename, root)
    if base is None:
        return False
    listing = whole_listing(base, (".py",))
    if listing is None:
        return False
    word = re.escape(name)
    target = os.path.abspath(filename)
    # the name imported from this module (`from pkg.utils.amp import GradScaler`, `from .amp import
    # (...)`), not the same name from torch itself (that file's own import is its own finding)
    stem = re.escape(module_stem(target))
    imported = re.compile(
        rf"^[ \t]*from[ \t]+(?!torch\.)(?:\S*\.)?{stem}[ \t]+import[ \t]*(?:\([^)]*|[^\n]*)\b{word}\b", re.MULTILINE
    )
    called = re.compile(rf"(?<![\w.]){word}[ \t]*\(|^[ \t]*@{word}\b", re.MULTILINE)
    files = [os.path.abspath(p) for p in listing]
    for _path, text in _importers(target, files, _stems(files), {target}):
        if imported.search(text) and called.search(text):
            return True
    return False


def spelled_under_autocast(filename: str, name: str, root: Optional[str] = None, precision: str = "auto") -> bool:
    """Some project file other than `filename` spells `name` (a word) and a low-precision autocast
    of the project may run its code (`embedded.unreached` does not hold; a notebook always may):
    a caller of the named Function the diagnostic's file does not show, which may hand it what
    autocast made. True when the project cannot be read whole; a file that is not on disk is its
    own project. Read when conditions are resolved."""
    return _another_file_spells(filename, name, root, lambda path: not _unreached(path, root, precision))


#: project files other than code that may name a class to build (a config's `_target_`, a registry's `type=`)
_CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml", ".cfg", ".ini", ".gin", ".jsonnet")


def argument_may_be_passed(filename: str, spec: str, root: Optional[str] = None) -> bool:
    """Some construction of the class `<Class>` (`spec` is `<Class>.<param>.<index>`) in the
    diagnostic's project may pass its `__init__` parameter `<param>`: a call of the class with
    that keyword, a `**` mapping, a `*` sequence or more than `<index>` positionals. Also True
    when the project names the class other than by calling it (a subclass, an alias, a registry
    or a `partial`, a config file or a notebook naming it), constructs it nowhere (its users
    do), or cannot be read whole. Lightning's `Class.load_from_checkpoint(path, **kw)` builds it
    from a construction's saved arguments and its keywords: only those keywords are read. `super(Class, self)`, `isinstance(x, Class)` and imports of
    it by its own name do not count. Read when conditions are resolved."""
    import ast

    from .texts import project_root, read_text, whole_listing

    name, param, index_text = spec.rsplit(".", 2)
    index = int(index_text)
    base = project_root(filename, root)
    if base is None:
        return True  # only the diagnostic's file is known: its users may pass it
    listing = whole_listing(base, (".py", ".ipynb") + _CONFIG_SUFFIXES)
    if listing is None:
        return True
    word = re.compile(rf"\b{re.escape(name)}\b")
    calls = 0
    for path in listing:
        text = read_text(path) or ""
        if not word.search(text):
            continue
        if not path.endswith(".py"):
            return True  # a config or a notebook names it
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return True
        exempt: Set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id == "super" and node.args:
                    exempt.add(id(node.args[0]))
                elif node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
                    exempt.add(id(node.args[1]))
            elif isinstance(node, (ast.ImportFrom, ast.Import)):
                if any(a.name.rsplit(".", 1)[-1] == name and a.asname not in (None, name) for a in node.names):
                    return True  # imported under another name: its calls are spelled otherwise
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "load_from_checkpoint" and _names_class(node.func.value, name)
            ):
                # Lightning builds the class from the checkpoint's saved arguments (those of a
                # construction, read here too) and these keywords
                if any(k.arg in (None, param, "hparams_file") for k in node.keywords):
                    return True
                exempt.add(id(node.func.value))
                continue
            if isinstance(node, ast.Call) and _names_class(node.func, name):
                calls += 1
                if len(node.args) > index or any(isinstance(a, ast.Starred) for a in node.args):
                    return True
                if any(k.arg is None or k.arg == param for k in node.keywords):
                    return True
                exempt.add(id(node.func))
        for node in ast.walk(tree):
            if _names_class(node, name) and id(node) not in exempt and not isinstance(getattr(node, "ctx", None), ast.Store):
                return True  # handed on (a subclass's base, a registry, a `partial`)
    return calls == 0


def _names_class(node: "object", name: str) -> bool:
    import ast

    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def site_runs(filename: str, definition: Optional[str], root: Optional[str] = None) -> bool:
    """Some program of the project may run the module-level definition `definition` of the file
    (None: its top level): `embedded.never_runs` does not hold."""
    from .embedded import never_runs

    return not never_runs(filename, definition, root)


def _fp16_kept_out(filename: str, root: Optional[str]) -> bool:
    """No fp16 the project runs reaches the file: a script no low-precision code reaches, a
    file the project runs that no fp16 source reaches, or a module of a vendored library copy
    that no project code outside it that may run fp16 imports (salesforce/LAVIS's uniformer
    annotator: its mmcv ops run nowhere), or a plain module no program of the project loads
    (`embedded.never_loaded`: VMamba's unused file of a vendored s4nd copy)."""
    from .embedded import never_loaded

    return (
        fp32_script(filename, root) or fp16_unreachable(filename, root) or _unreached_embedded(filename, root, FP16)
        or never_loaded(filename, root)
    )


def condition_holds(
    condition: str, facts: ProjectFacts, precision: str = "auto", filename: Optional[str] = None, root: Optional[str] = None
) -> bool:
    """Whether a diagnostic's condition holds; `filename` (the diagnostic's file) only for
    file-dependent conditions (without it they hold only through the project facts, and a
    kernel requirement, which no fact changes, is not asked)."""
    if "|" in condition:
        base, *requirements = condition.split("|")
        if not condition_holds(base, facts, precision, filename, root):
            return False
        return filename is None or all(_requirement_holds(r, filename, root, precision) for r in requirements)
    if condition == FP16:
        if precision == "fp16":
            return True
        if precision == "bf16":
            return False
        return facts.may_run_fp16 and not (filename is not None and _fp16_kept_out(filename, root))
    if condition == AUTOCAST:
        return facts.autocast or precision in ("fp16", "bf16")
    if condition == AUTOCAST_REACHED:
        if not condition_holds(AUTOCAST, facts, precision):
            return False
        return filename is None or not _unreached(filename, root, precision)
    if condition == RESUMED:
        return filename is not None and project_resumes(filename, root)
    if condition == FP32_DEFAULT:
        if precision in ("fp16", "bf16"):
            return False
        return filename is None or fp32_default(filename, root)
    if condition == RUNS or condition.startswith(RUNS + "="):
        return filename is None or site_runs(filename, condition[len(RUNS) + 1 :] or None, root)
    if condition.startswith(ARGUMENT_PASSED + "="):
        return filename is None or argument_may_be_passed(filename, condition[len(ARGUMENT_PASSED) + 1 :], root)
    if condition.startswith(FLAG_SET + "="):
        return filename is None or flag_may_be_set(filename, condition[len(FLAG_SET) + 1 :], root)
    if condition.startswith(DTYPE_PROPERTY + "="):
        if precision == "bf16":
            return False
        from .dtype_properties import fp16_dtype_property

        return filename is None or fp16_dtype_property(filename, condition[len(DTYPE_PROPERTY) + 1 :], root) is not None
    if condition.startswith(DTYPE_PROPERTY_MAY_FP16 + "="):
        return filename is None or property_may_be_fp16(filename, condition[len(DTYPE_PROPERTY_MAY_FP16) + 1 :], root, precision)
    if condition == LIGHTNING_FP16:
        if precision in ("fp16", "bf16"):
            return precision == "fp16"
        from .lightning_trainers import fp16_trainer

        return filename is not None and fp16_trainer(filename, root)
    if condition == AUTOCAST_OR_LIBRARY:
        if _library_code(facts, precision, filename, root):
            return True
        return condition_holds(AUTOCAST_REACHED, facts, precision, filename, root)
    raise ValueError(f"unknown diagnostic condition {condition!r}")
