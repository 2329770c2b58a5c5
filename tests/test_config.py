"""`[tool.amplint]`: discovery of the file, every key, and the errors with hints."""
from __future__ import annotations

from pathlib import Path

import pytest

from amplint.core.config import (
    Config, ConfigError, config_from_table, expand_codes, find_pyproject, load_config, parse_torch_version,
    with_overrides,
)
from amplint.engine.pipeline import default_codes, known_codes

KNOWN = known_codes()


def test_defaults():
    c = Config()
    assert c.respect_gitignore is True and c.force_exclude is False
    codes = c.selected_codes(KNOWN, default_codes())
    assert "AMP101" in codes and "AMP000" in codes
    assert "AMP900" not in codes, "unused-noqa is opt-in"


def test_every_key(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        """
[tool.amplint]
select = ["AMP1"]
ignore = ["AMP101"]
extend-select = ["AMP900"]
per-file-ignores = { "tests/*" = ["AMP1"], "scripts/**/*.py" = ["AMP101"] }
exclude = ["third_party"]
extend-exclude = ["generated"]
torch-version = "2.1"
precision = "bf16"
respect-gitignore = false
force-exclude = true

[tool.amplint.verify]
device = "cpu"
timeout = 5
"""
    )
    c = load_config(tmp_path / "pyproject.toml", KNOWN)
    assert c.select == ("AMP1",) and c.ignore == ("AMP101",) and c.extend_select == ("AMP900",)
    assert c.per_file_ignores == (("tests/*", ("AMP1",)), ("scripts/**/*.py", ("AMP101",)))
    assert c.exclude == ("third_party",) and c.extend_exclude == ("generated",)
    assert c.torch_version == (2, 1) and c.precision == "bf16"
    assert c.respect_gitignore is False and c.force_exclude is True
    assert c.verify_device == "cpu" and c.verify_timeout == 5.0
    assert c.root == str(tmp_path.resolve())
    codes = c.selected_codes(KNOWN, default_codes())
    assert "AMP101" not in codes and "AMP900" in codes


@pytest.mark.parametrize(
    "table,message",
    [
        ({"selekt": ["AMP1"]}, "unknown key 'selekt' in [tool.amplint]; did you mean 'select'?"),
        ({"per-file-ignore": {}}, "did you mean 'per-file-ignores'?"),
        ({"select": ["AMP1O1"]}, "unknown rule selector 'AMP1O1'"),
        ({"ignore": "AMP1011"}, "did you mean 'AMP101'?"),
        ({"select": [1]}, "'select' must be a list of strings"),
        ({"per-file-ignores": ["x"]}, "'per-file-ignores' must be a table"),
        ({"per-file-ignores": {"a/*": ["AMP9999"]}}, "unknown rule selector"),
        ({"precision": "fp8"}, "precision must be one of auto, fp16, bf16"),
        ({"torch-version": "two"}, "torch-version must look like"),
        ({"torch-version": ["2.1"]}, "torch-version must be a string"),
        ({"respect-gitignore": "yes"}, "'respect-gitignore' must be true or false"),
        ({"verify": {"devise": "cpu"}}, "did you mean 'device'?"),
        ({"verify": {"timeout": 0}}, "verify.timeout must be a positive, finite number"),
        ({"verify": {"timeout": True}}, "verify.timeout must be a positive, finite number"),
        ({"verify": {"timeout": float("nan")}}, "verify.timeout must be a positive, finite number"),
        ({"verify": {"timeout": float("inf")}}, "verify.timeout must be a positive, finite number"),
        ({"verify": {"budget": -1}}, "verify.budget must be a positive, finite number"),
        ({"verify": "cpu"}, "[tool.amplint.verify] must be a table"),
    ],
)
def test_errors(table, message):
    with pytest.raises(ConfigError) as exc:
        config_from_table(table, KNOWN, source="pyproject.toml")
    assert message in str(exc.value)


def test_invalid_toml(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.amplint\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(find_pyproject([str(tmp_path)]), KNOWN)


def test_find_pyproject_walks_up_to_the_one_with_tool_amplint(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nselect = ["AMP1"]\n')
    inner = tmp_path / "pkg" / "sub"
    inner.mkdir(parents=True)
    (tmp_path / "pkg" / "pyproject.toml").write_text('[project]\nname = "x"\n')  # no [tool.amplint]
    (inner / "train.py").write_text("")
    assert find_pyproject([str(inner / "train.py")]) == tmp_path / "pyproject.toml"


def test_bare_config_file(tmp_path):
    (tmp_path / "amplint.toml").write_text('select = ["AMP101"]\n')
    assert load_config(tmp_path / "amplint.toml", KNOWN).select == ("AMP101",)


def test_selectors():
    assert expand_codes(["ALL"], KNOWN) == KNOWN
    assert "AMP101" in expand_codes(["amp1"], KNOWN)
    assert expand_codes(["AMP900"], KNOWN) == ["AMP900"]
    with pytest.raises(ConfigError, match="did you mean 'AMP101'"):
        expand_codes(["AMP1010"], KNOWN)


def test_torch_version_forms():
    assert parse_torch_version("2.3") == (2, 3)
    assert parse_torch_version(">=2.1.0") == (2, 1)
    with pytest.raises(ConfigError, match="quoted string"):
        parse_torch_version(2.1)  # TOML read `torch-version = 2.10` as 2.1
    assert parse_torch_version("2") == (2, 0)


def test_per_file_ignores_globs(tmp_path):
    c = Config(per_file_ignores=(("tests/*", ("AMP1",)), ("*_legacy.py", ("AMP101",)), ("scripts/**/*.py", ("AMP101",))), root=str(tmp_path))
    assert "AMP101" in c.ignored_for(str(tmp_path / "tests" / "test_x.py"), KNOWN)
    assert "AMP101" in c.ignored_for(str(tmp_path / "src" / "model_legacy.py"), KNOWN)  # by file name
    assert "AMP101" in c.ignored_for(str(tmp_path / "scripts" / "a" / "b.py"), KNOWN)
    assert c.ignored_for(str(tmp_path / "src" / "train.py"), KNOWN) == frozenset()


def test_overrides():
    c = with_overrides(Config(), select=("AMP1",), ignore=None, respect_gitignore=False)
    assert c.select == ("AMP1",) and c.ignore == () and c.respect_gitignore is False
