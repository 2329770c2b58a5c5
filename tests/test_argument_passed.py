"""model/facts.argument_may_be_passed: whether some construction of a class in the project may pass
an `__init__` parameter (AMP101's clip under a guard the parameter's default turns off)."""
from __future__ import annotations

import pytest

from amplint.model.facts import argument_may_be_passed

WRAPPER = """
class Wrapper:
    def __init__(self, model, clip=0.0):
        self.clip = clip

    def check(self, other):
        return isinstance(other, Wrapper)


class Other:
    def __init__(self):
        super(Other, self).__init__()
"""


def project(tmp_path, builder: str, extra: dict = None):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    (tmp_path / "wrapper.py").write_text(WRAPPER)
    (tmp_path / "build.py").write_text("from wrapper import Wrapper\n\n\ndef build(model, cfg):\n" + builder + "\n")
    for name, text in (extra or {}).items():
        (tmp_path / name).write_text(text)
    return str(tmp_path / "wrapper.py")


@pytest.mark.parametrize(
    "builder, passed",
    [
        ("    return Wrapper(model)", False),
        ("    return Wrapper(model=model)", False),
        ("    return Wrapper(model, clip=cfg.clip)", True),
        ("    return Wrapper(model, cfg.clip)", True),
        ("    return Wrapper(model, **cfg)", True),
        ("    return Wrapper(*cfg)", True),
        ("    return functools.partial(Wrapper, clip=1.0)", True),
        ("    return Wrapper.load_from_checkpoint(cfg.path, model=model, strict=False)", True),  # and builds nowhere
        ("    REGISTRY['w'] = Wrapper", True),
        ("    pass", True),  # built nowhere in the project: its users build it
    ],
)
def test_constructions(tmp_path, builder, passed):
    assert argument_may_be_passed(project(tmp_path, builder), "Wrapper.clip.1") is passed


def test_load_from_checkpoint_reads_its_keywords(tmp_path):
    export = "from wrapper import Wrapper\nw = Wrapper.load_from_checkpoint('x.ckpt', model=None, strict=False)\n"
    path = project(tmp_path, "    return Wrapper(model)", {"export.py": export})
    assert argument_may_be_passed(path, "Wrapper.clip.1") is False
    export = "from wrapper import Wrapper\nw = Wrapper.load_from_checkpoint('x.ckpt', model=None, clip=1.0)\n"
    path = project(tmp_path, "    return Wrapper(model)", {"export.py": export})
    assert argument_may_be_passed(path, "Wrapper.clip.1") is True


def test_subclass_alias_and_config_count(tmp_path):
    sub = "from wrapper import Wrapper\n\n\nclass Clipped(Wrapper):\n    pass\n"
    assert argument_may_be_passed(project(tmp_path, "    return Wrapper(model)", {"sub.py": sub}), "Wrapper.clip.1")
    alias = "from wrapper import Wrapper as W\nw = W(None, 1.0)\n"
    assert argument_may_be_passed(project(tmp_path, "    return Wrapper(model)", {"alias.py": alias}), "Wrapper.clip.1")
    config = "model:\n  _target_: wrapper.Wrapper\n  clip: 1.0\n"
    assert argument_may_be_passed(project(tmp_path, "    return Wrapper(model)", {"train.yaml": config}), "Wrapper.clip.1")
