"""A finding in the test suite of a separate library the checkout carries (a vendored copy with
its own packaging and license, `third_party/apex/{setup.py,LICENSE,tests/}`) is kept at `info`:
the library's unit tests are not the project's training code. The project's own tests, and a
subproject's without a license of its own, keep the rule's severity (`embedded.library_test`)."""
from __future__ import annotations

import textwrap

from amplint import Config
from amplint.core.diagnostics import Severity
from amplint.engine.run import lint_paths
from amplint.model.embedded import library_test

#: AMP201's shape: an fp16 module an SGD then steps, with no fp32 master copy
HALF_STEP = textwrap.dedent(
    """\
    import torch
    import torch.optim as optim

    bn = torch.nn.BatchNorm2d(10).cuda()
    bn.half()
    opt = optim.SGD(bn.parameters(), lr=1.0)
    bn(torch.randn(4, 10, 8, 8, device="cuda").half()).sum().backward()
    opt.step()
    """
)
CONFIG = Config(select=("AMP201",))


def _checkout(root, files):
    (root / ".git").mkdir()
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _found(root):
    return [(d.filename.replace(str(root), "").lstrip("/"), d.severity) for d in lint_paths([str(root)], CONFIG).diagnostics]


def test_a_vendored_librarys_own_test_is_info(tmp_path):
    _checkout(tmp_path, {
        "setup.py": "", "apex/setup.py": "", "apex/LICENSE": "BSD",
        "apex/tests/distributed/two_gpu_unit_test.py": HALF_STEP,
    })
    assert _found(tmp_path) == [("apex/tests/distributed/two_gpu_unit_test.py", Severity.INFO)]
    assert library_test(str(tmp_path / "apex/tests/distributed/two_gpu_unit_test.py"))


def test_the_projects_own_tests_and_the_librarys_code_keep_their_severity(tmp_path):
    """The VALID twin: the root's `tests/` (the root's license and packaging are the project's),
    a nested folder with packaging but no license of its own (a subproject of the project), and
    the vendored library's own code outside its `tests/`."""
    _checkout(tmp_path, {
        "setup.py": "", "LICENSE": "MIT", "tests/test_train.py": HALF_STEP,
        "tools/setup.py": "", "tools/tests/test_step.py": HALF_STEP,
        "apex/setup.py": "", "apex/LICENSE": "BSD", "apex/examples/train.py": HALF_STEP,
    })
    assert sorted(_found(tmp_path)) == [
        ("apex/examples/train.py", Severity.WARNING),
        ("tests/test_train.py", Severity.WARNING),
        ("tools/tests/test_step.py", Severity.WARNING),
    ]
