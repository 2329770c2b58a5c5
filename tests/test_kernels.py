"""AMP501 and the project's own extension sources (issue 22 shape 11): a kernel built for
fp16/bf16 activations next to fp32 weights (two dtypes dispatched separately) takes what
autocast hands it; one that dispatches float/double only raises on a single fp16 input."""
from __future__ import annotations

import textwrap

from amplint import Config
from amplint.engine.run import lint_paths
from amplint.model.kernels import kernel_dtypes

FUNCTION = textwrap.dedent(
    """\
    import torch
    import scan_cuda


    class ScanFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, u, delta, A):
            ctx.save_for_backward(u, delta, A)
            out = scan_cuda.fwd(u, delta, A)
            return out

        @staticmethod
        def backward(ctx, dout):
            u, delta, A = ctx.saved_tensors
            return scan_cuda.bwd(u, delta, A, dout)


    def step(model, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return model(x)
    """
)
SINGLE = textwrap.dedent(
    """\
    import torch
    from . import _C


    class _Align(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale=1.0):
            return _C.align_forward(x, scale)

        @staticmethod
        def backward(ctx, grad):
            return _C.align_backward(grad), None


    def step(model, x):
        with torch.autocast("cuda"):
            return model(_Align.apply(x))
    """
)
MIXED = """
#include <torch/extension.h>
#define DISPATCH_ITYPE(ITYPE, NAME, ...) if (ITYPE == at::ScalarType::Half) { using input_t = at::Half; __VA_ARGS__(); } else { using input_t = float; __VA_ARGS__(); }
#define DISPATCH_WTYPE(WTYPE, NAME, ...) { using weight_t = float; __VA_ARGS__(); }

std::vector<at::Tensor> scan_fwd(const at::Tensor &u, const at::Tensor &delta, const at::Tensor &A) {
    auto input_type = u.scalar_type();
    TORCH_CHECK(input_type == at::ScalarType::Float || input_type == at::ScalarType::Half || input_type == at::ScalarType::BFloat16);
    TORCH_CHECK(A.scalar_type() == at::ScalarType::Float);
    at::Tensor out = torch::empty_like(u);
    DISPATCH_ITYPE(u.scalar_type(), "scan_fwd", [&] {
        DISPATCH_WTYPE(A.scalar_type(), "scan_fwd", [&] {
            launch<input_t, weight_t>(u, delta, A, out);
        });
    });
    return {out};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("fwd", &scan_fwd, "scan forward");
    m.def("bwd", &scan_fwd, "scan backward");
}
"""
FLOAT_ONLY = """
#include <torch/extension.h>

at::Tensor align_forward_cuda(const at::Tensor& X, float scale) {
  auto Y = at::empty_like(X);
  AT_DISPATCH_FLOATING_TYPES(X.scalar_type(), "align_forward", [&] {
    align_kernel<scalar_t><<<1, 1>>>(X.data_ptr<scalar_t>(), Y.data_ptr<scalar_t>(), scale);
  });
  return Y;
}

inline at::Tensor align_forward(const at::Tensor& X, float scale) {
  if (X.is_cuda()) {
    return align_forward_cuda(X, scale);
  }
  AT_ERROR("Not implemented on the CPU");
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def(
      "align_forward",
      &align_forward,
      "align_forward");
}
"""
CONFIG = Config(select=("AMP501",))


def _project(root, py, cpp=None, name="ops.py"):
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / name).write_text(py)
    (root / "setup.py").write_text("")
    if cpp is not None:
        (root / "csrc").mkdir()
        (root / "csrc" / "kernel.cu").write_text(cpp)
    return [(d.location.row, d.message) for d in lint_paths([str(root)], Config(select=("AMP501",), root=str(root))).diagnostics]


def test_a_kernel_built_for_low_precision_inputs_next_to_fp32_weights_is_silent(tmp_path):
    assert _project(tmp_path, FUNCTION, MIXED) == []
    assert kernel_dtypes("fwd", str(tmp_path / "pkg" / "ops.py"), str(tmp_path)) == "mixed"


def test_without_its_source_the_kernel_is_reported_as_before(tmp_path):
    assert [row for row, _ in _project(tmp_path, FUNCTION)] == [7]


def test_a_float_only_kernel_is_reported_for_one_float_input(tmp_path):
    found = _project(tmp_path, SINGLE, FLOAT_ONLY)
    assert [row for row, _ in found] == [7]
    assert "takes float32 only" in found[0][1]
    assert kernel_dtypes("align_forward", str(tmp_path / "pkg" / "ops.py"), str(tmp_path)) == "fp32"


def test_one_float_input_needs_the_source_to_say_float_only(tmp_path):
    assert _project(tmp_path, SINGLE) == []


def test_a_kernel_that_also_takes_half_is_not_float_only(tmp_path):
    cpp = FLOAT_ONLY.replace("AT_DISPATCH_FLOATING_TYPES(", "AT_DISPATCH_FLOATING_TYPES_AND_HALF(")
    assert _project(tmp_path, SINGLE, cpp) == []


def test_kernel_dtypes_without_a_project_file():
    assert kernel_dtypes("fwd", "<string>") is None
    assert kernel_dtypes("fwd", "example.py") is None


def test_a_kernel_requirement_that_fails_starts_no_facts_pass(tmp_path, monkeypatch):
    """Facts only turn on: a condition that fails with every fact on (the kernel is built for
    mixed dtypes) is not worth reading the unparsed files' facts for."""
    import amplint.engine.parallel as parallel

    read = []
    original = parallel.facts_of_path
    monkeypatch.setattr(parallel, "facts_of_path", lambda path, config: read.append(path) or original(path, config))
    (tmp_path / "notes").mkdir()
    for i in range(3):  # files no rule's gate lets through, but the facts gate does
        (tmp_path / "notes" / f"notes{i}.py").write_text("HALF_WIDTH = 3  # half\n")
    no_autocast = FUNCTION.replace('    with torch.autocast("cuda", dtype=torch.bfloat16):\n        return model(x)\n', "    return model(x)\n")
    assert _project(tmp_path, no_autocast, MIXED, name="scan.py") == []
    assert read == []


FOCAL = textwrap.dedent(
    """\
    import torch
    import focal_cuda


    class FocalFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, targets, num_pos, alpha):
            loss, partial = focal_cuda.forward(logits, targets, num_pos, alpha)
            ctx.save_for_backward(partial, num_pos)
            return loss

        @staticmethod
        def backward(ctx, grad):
            partial, num_pos = ctx.saved_tensors
            return focal_cuda.backward(grad, partial, num_pos), None, None, None


    def step(model, x):
        with torch.autocast("cuda"):
            return model(x)
    """
)
FOCAL_CPP = """
#include <torch/extension.h>

std::vector<at::Tensor> focal_forward_cuda(const at::Tensor &logits, const at::Tensor &targets,
                                           const at::Tensor &num_pos, const float alpha) {
  AT_ASSERTM(targets.scalar_type() == at::kLong, "Invalid label type.");
  AT_ASSERTM(num_pos.numel() == 1 && num_pos.scalar_type() == at::kFloat, "Expect a float32 tensor.");
  at::Tensor loss = at::zeros({}, logits.options().dtype(at::kFloat));
  at::Tensor partial = at::empty_like(logits);
  AT_DISPATCH_FLOATING_TYPES_AND_HALF(logits.scalar_type(), "focal_fprop", [&] {
    focal_kernel<scalar_t><<<1, 1>>>(loss.data_ptr<float>(), partial.data_ptr<scalar_t>(),
                                     logits.data_ptr<scalar_t>(), num_pos.data_ptr<float>(), alpha);
  });
  return {loss, partial};
}

std::vector<at::Tensor> focal_forward(const at::Tensor &logits, const at::Tensor &targets,
                                      const at::Tensor &num_pos, const float alpha) {
  return focal_forward_cuda(logits, targets, num_pos, alpha);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &focal_forward, "focal forward");
}
"""


def test_a_kernel_for_low_precision_logits_next_to_a_required_fp32_tensor_is_silent(tmp_path):
    # NVIDIA's fused focal loss: the logits dispatched with half among the types, the positives'
    # count asserted float32: built for the fp16 activations autocast makes next to an fp32 tensor
    assert _project(tmp_path, FOCAL, FOCAL_CPP) == []
    assert kernel_dtypes("forward", str(tmp_path / "pkg" / "ops.py"), str(tmp_path)) == "mixed"


def test_a_kernel_requiring_its_dispatched_tensor_to_be_fp32_is_not_mixed(tmp_path):
    # the logits themselves asserted float32: an fp16 input raises, whatever the dispatch says
    cpp = FOCAL_CPP.replace("num_pos.scalar_type() == at::kFloat", "logits.scalar_type() == at::kFloat")
    assert [row for row, _ in _project(tmp_path, FOCAL, cpp)] == [7]
    assert kernel_dtypes("forward", str(tmp_path / "pkg" / "ops.py"), str(tmp_path)) is None


def test_and_half_names_half(tmp_path):
    # `AT_DISPATCH_FLOATING_TYPES_AND_HALF` names half (no other spelling of it in the source): two
    # tensors dispatched separately so are the mixed kernel
    cpp = FOCAL_CPP.replace(
        'AT_ASSERTM(num_pos.numel() == 1 && num_pos.scalar_type() == at::kFloat, "Expect a float32 tensor.");',
        'AT_DISPATCH_FLOATING_TYPES(num_pos.scalar_type(), "focal_count", [&] { count<scalar_t>(num_pos); });',
    )
    assert "Half" not in cpp.replace("_AND_HALF", "") and "== at::kFloat" not in cpp
    assert _project(tmp_path, FOCAL, cpp) == []
    assert kernel_dtypes("forward", str(tmp_path / "pkg" / "ops.py"), str(tmp_path)) == "mixed"
