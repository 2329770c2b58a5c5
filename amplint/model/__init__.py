"""The AMP model: what rules read, and the only place they import from.

`ModuleContext.build` walks a parsed file once (`collector.py`) and derives
scalers and optimizers (`scalers.py`), low-precision casts (`dtypes.py`),
training-step events (`events.py`) and the file's facts (`facts.py`); rules
query it instead of walking the tree. The names below are everything a rule
needs: the model's types and queries, the rule base class and diagnostics
(from `amplint.core`), and the fix-edit builders (`edits.py`). They load on
first use (PEP 562), so importing `amplint.model.facts` (the engine does, for
project facts) imports neither libcst nor the collector.
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    # core.rule
    "Invalid": "..core.rule",
    "Rule": "..core.rule",
    "Valid": "..core.rule",
    "example_source": "..core.rule",
    # core.diagnostics
    "Applicability": "..core.diagnostics",
    "Diagnostic": "..core.diagnostics",
    "Edit": "..core.diagnostics",
    "Fix": "..core.diagnostics",
    "Location": "..core.diagnostics",
    "Related": "..core.diagnostics",
    "Severity": "..core.diagnostics",
    # context
    "ModuleContext": ".context",
    "is_version_test": ".context",
    # types
    "Assignment": ".types",
    "AutocastRegion": ".types",
    "CallInfo": ".types",
    "Event": ".types",
    "Frame": ".types",
    "LiteralInfo": ".types",
    "LowPrecisionCast": ".types",
    "MatMulInfo": ".types",
    "OptimizerInfo": ".types",
    "Path": ".types",
    "Reference": ".types",
    "ScalerInfo": ".types",
    "Scope": ".types",
    # literals
    "call_arg": ".literals",
    "call_chain": ".literals",
    "folded_number": ".literals",
    "in_fp16": ".literals",
    "literal_bool": ".literals",
    "literal_number": ".literals",
    "literal_string": ".literals",
    "module_numbers": ".literals",
    # guards
    "GuardedPaths": ".guards",
    # paths
    "enclosing": ".paths",
    "exclusive": ".paths",
    "loops": ".paths",
    "path_contains": ".paths",
    "precedes": ".paths",
    # regions
    "active_region": ".regions",
    "held_autocasts": ".regions",
    "HeldAutocast": ".regions",
    "enabled_argument": ".regions",
    "scaler_enabled_argument": ".scalers",
    "autocast_parameters": ".torchapi",
    "off_under_guard": ".regions",
    "autocast_op_of": ".regions",
    "autocast_ops": ".regions",
    "AutocastOp": ".regions",
    "region_within": ".regions",
    "same_device": ".regions",
    # scalers
    "is_grad_scaler_call": ".scalers",
    "optimizer_classes": ".scalers",
    # accelerators
    "scaling_accelerator": ".accelerators",
    "scaling_choice": ".accelerators",
    "config_scaling_accelerator": ".accelerators",
    "accelerator_precision": ".accelerators",
    "accumulating_accelerator": ".accelerators",
    "ACCELERATORS": ".accelerators",
    # fabrics (Lightning Fabric's fp16 backward, issue 23)
    "scaling_fabric": ".fabrics",
    "fp16_fabrics": ".fabrics",
    "FABRICS": ".fabrics",
    "fsdp_full_fabrics": ".fabrics",
    # bindings
    "assignment_before": ".bindings",
    "constructed_class": ".bindings",
    "module_class": ".bindings",
    "self_bindings": ".bindings",
    "sees_self_of": ".bindings",
    # references
    "imported_names": ".references",
    # dtypes
    "fp32_cast": ".dtypes",
    "is_device_expr": ".dtypes",
    "strip_views": ".dtypes",
    # training_casts (AMP201/AMP206: a low-precision cast of a module an optimizer then updates)
    "TrainedCast": ".training_casts",
    "describe_cast": ".training_casts",
    "trained_casts": ".training_casts",
    "choice_casts": ".training_casts",
    "cast_subjects": ".training_casts",
    "not_a_training_conversion": ".training_casts",
    "references_parameters": ".training_casts",
    "master_wrapped": ".training_casts",
    # literal_dtypes
    "dtype_choices": ".literal_dtypes",
    "region_dtype_choices": ".literal_dtypes",
    "region_choice_naming": ".literal_dtypes",
    "choice_naming": ".literal_dtypes",
    # runtime_choices
    "Option": ".runtime_choices",
    "option_read": ".runtime_choices",
    "options": ".runtime_choices",
    "option_values": ".runtime_choices",
    "choice_precision": ".runtime_choices",
    # event_index
    "events_after": ".event_index",
    "events_before": ".event_index",
    # steps
    "innermost_common_loop": ".steps",
    "lines_between": ".steps",
    "loop_body_source": ".steps",
    "step_data": ".steps",
    "step_region": ".steps",
    "step_source": ".steps",
    # scaler_rebuilds (AMP107; AMP402 leaves a per-epoch scaler's checkpoint alone)
    "rebuilt_per_iteration": ".scaler_rebuilds",
    "rebuilt_scalers": ".scaler_rebuilds",
    "scales_only_bf16": ".scalers",
    "scales_bf16_unless_property": ".scalers",
    # updates (AMP105/AMP202: an optimizer update within reach of a backward)
    "file_updates": ".updates",
    "update_reachable": ".updates",
    # names
    "dotted_name": ".names",
    "EMPTY": ".names",
    "ImportTable": ".names",
    # walk
    "child_fields": ".walk",
    "CONDITIONAL": ".walk",
    "descendants": ".walk",
    "subnodes": ".walk",
    "own_hook": ".walk",
    "parent_map": ".walk",
    "SKIP": ".walk",
    # torchapi
    "AMP_CUSTOM_BWD": ".torchapi",
    "AMP_CUSTOM_FWD": ".torchapi",
    "AUTOCAST_AWARE_OP_NAMESPACES": ".torchapi",
    "AUTOCAST_CONTEXTS": ".torchapi",
    "AUTOCAST_LOWER_PRECISION_FUNCS": ".torchapi",
    "AUTOCAST_LOWER_PRECISION_METHODS": ".torchapi",
    "AUTOCAST_OP_FUNCTIONS": ".torchapi",
    "AUTOCAST_OP_METHODS": ".torchapi",
    "AUTOCAST_OP_MODULES": ".torchapi",
    "AUTOGRAD_FUNCTION": ".torchapi",
    "BF16_DTYPES": ".torchapi",
    "BF16_SUPPORT_FUNCTIONS": ".torchapi",
    "CAPABILITY_FUNCTIONS": ".torchapi",
    "CLIP_FUNCTIONS": ".torchapi",
    "CPP_EXTENSION_LOADERS": ".torchapi",
    "CUSTOM_FWD_BWD": ".torchapi",
    "CUSTOM_OP_DECORATORS": ".torchapi",
    "DATA_PARALLEL_CLASSES": ".torchapi",
    "DATA_PARALLEL_FUNCTIONS": ".torchapi",
    "DEFAULT_INIT_SCALE": ".torchapi",
    "DEPRECATED_AMP": ".torchapi",
    "DeprecatedApi": ".torchapi",
    "DEVICE_DEFAULT_DTYPE": ".torchapi",
    "dtype_of_qualname": ".torchapi",
    "DTYPE_PRESERVING_METHODS": ".torchapi",
    "DTYPE_STRINGS": ".torchapi",
    "FLOAT_FACTORIES": ".torchapi",
    "FLOAT_OUTPUT_MODULES": ".torchapi",
    "FP16_DTYPES": ".torchapi",
    "FP16_FLUSH_TO_ZERO": ".torchapi",
    "FP16_MAX": ".torchapi",
    "FP16_MIN_SUBNORMAL": ".torchapi",
    "MODULE_FP32": ".torchapi",
    "FP32_DTYPES": ".torchapi",
    "FUSED_CAPABLE": ".torchapi",
    "GRAD_SCALERS": ".torchapi",
    "is_optimizer_class": ".torchapi",
    "is_torch_optimizer_class": ".torchapi",
    "MASTER_WRAPPER": ".torchapi",
    "LOWER_PRECISION_OPS": ".torchapi",
    "LOWER_PRECISION_OPS_CPU": ".torchapi",
    "LOWER_PRECISION_OPS_CUDA": ".torchapi",
    "REGISTER_AUTOCAST": ".torchapi",
    "runs_in_lower_precision": ".torchapi",
    # facts
    "AUTOCAST": ".facts",
    "AUTOCAST_OR_LIBRARY": ".facts",
    "AUTOCAST_REACHED": ".facts",
    "AUTOCAST_RUNS": ".facts",
    "CALLED_ELSEWHERE": ".facts",
    "UNFORCED": ".facts",
    "forced_in_file": ".mmcv_fp16",
    "RUNNER_AUTOCAST": ".facts",
    "ARGUMENT_PASSED": ".facts",
    "condition_holds": ".facts",
    "FileFacts": ".facts",
    "FP16": ".facts",
    "FP32_DEFAULT": ".facts",
    "FLAG_SET": ".facts",
    "IMPORTER_CALLS": ".facts",
    "LIGHTNING_FP16": ".facts",
    "DTYPE_PROPERTY": ".facts",
    "DTYPE_PROPERTY_MAY_FP16": ".facts",
    "own_trainer_precision": ".lightning_trainers",
    "KERNEL_FP32": ".facts",
    "KERNEL_NOT_MIXED": ".facts",
    "MODULES_CAST": ".facts",
    "REACHED": ".facts",
    "RESUMED": ".facts",
    "RUNS": ".facts",
    "with_requirement": ".facts",
    "ProjectFacts": ".facts",
    # edits
    "append_argument_edit": ".edits",
    "call_is_plain": ".edits",
    "can_bind": ".edits",
    "drop_imported_name": ".edits",
    "ensure_import": ".edits",
    "insert_keyword_edits": ".edits",
    "insert_line_before": ".edits",
    "is_suppressed": ".edits",
    "make_fix": ".edits",
    "module_alias": ".edits",
    "name_uses": ".edits",
    "replace_node": ".edits",
    "rewrite_with_imports": ".edits",
    "torch_prefix": ".edits",
    # project (the project-wide model: cross-file findings)
    "Project": ".project.graph",
    "ProjectCall": ".project.graph",
    "Witness": ".project.graph",
    "chain_text": ".project.graph",
    "dispatch_view": ".project.dispatch",
    "project_dtype_choices": ".project.choices",
    "optimizer_builds": ".project.choices",
    "CastModule": ".project.cast_training",
    "ChosenCast": ".project.cast_training",
    "cast_modules": ".project.cast_training",
    "chosen_casts": ".project.cast_training",
    "launched_casts": ".project.cast_training",
    "EvaluatedCast": ".project.evaluated",
    "evaluated_casts": ".project.evaluated",
    # accelerate's scaling Accelerator across files, and per-parameter gradient hooks (AMP102/AMP104)
    "project_scaling_accelerator": ".project.accelerate_hooks",
    "launched_accelerators": ".project.accelerate_hooks",
    "project_option": ".project.accelerate_hooks",
    "grad_hooks": ".project.accelerate_hooks",
    "hook_sites": ".project.accelerate_hooks",
    "enclosing_calls": ".project.accelerate_hooks",
    # the wrapper kind fact and precision configs (issue 23: AMP801-AMP808)
    "ScaleConfig": ".project.wrappers",
    "command_line_bool": ".project.launchers",
    "ScaleFinding": ".project.wrappers",
    "ScaleView": ".project.wrappers",
    "Wrapper": ".project.wrappers",
    "WrapperPolicy": ".project.wrappers",
    "clip_owner_of": ".project.wrappers",
    "deepspeed_engine_calls": ".project.wrappers",
    "deepspeed_run_time_engine": ".project.wrappers",
    "torch_scaler_pass": ".project.wrappers",
    "config_place": ".project.wrappers",
    "lightning_precision_dtype": ".project.wrappers",
    "exclusive_branches": ".project.wrappers",
    "scale_file_diagnostics": ".project.wrappers",
    "scale_project_diagnostics": ".project.wrappers",
    "scale_file_view": ".project.wrappers",
    "scale_project_view": ".project.wrappers",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'amplint.model' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(_EXPORTS))
