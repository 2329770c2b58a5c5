"""The `amplint` command: parse flags -> Config -> API -> exit code.

Exit codes: 0 no findings, 1 findings, 2 usage/config/internal error (with a
one-line message on stderr).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import click

from .__version__ import __version__
from .config import Config, ConfigError, find_pyproject, load_config, parse_torch_version, with_overrides
from .report import FORMATS

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _codes(values: Tuple[str, ...]) -> Optional[Tuple[str, ...]]:
    """`--select AMP1,AMP2 --select AMP3` -> ("AMP1", "AMP2", "AMP3")."""
    if not values:
        return None
    out: List[str] = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return tuple(out)


def fail(message: str) -> "click.exceptions.Exit":
    click.echo(f"amplint: error: {message}", err=True)
    return click.exceptions.Exit(EXIT_ERROR)


class _Command(click.Command):
    """Usage errors exit 2 with one line (click already uses 2)."""

    def main(self, *args, **kwargs):  # type: ignore[override]
        try:
            return super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            hint = f" (see 'amplint --help')"
            click.echo(f"amplint: error: {exc.format_message()}{hint}", err=True)
            sys.exit(EXIT_ERROR)
        except click.Abort:
            click.echo("amplint: aborted", err=True)
            sys.exit(EXIT_ERROR)


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path())
@click.option("--select", multiple=True, help="Rule codes or prefixes to enable (AMP101, AMP1, ALL).")
@click.option("--ignore", multiple=True, help="Rule codes or prefixes to disable.")
@click.option("--extend-select", multiple=True, help="Codes or prefixes to enable on top of the selection.")
@click.option(
    "--output-format",
    type=click.Choice(sorted(FORMATS)),
    default="text",
    show_default=True,
    help="How to print diagnostics.",
)
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--explain", "explain", default=None, metavar="CODE", is_flag=False, flag_value="", help="Show a rule's documentation (no CODE: list all rules).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Read settings from this TOML file.")
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--stdin-filename", default=None, help="The file name to report for '-' (stdin).")
@click.option("--torch-version", default=None, help="The oldest torch the project supports (for fixes).")
@click.option("--precision", type=click.Choice(["auto", "fp16", "bf16"]), default=None, help="Override the project's precision guess.")
@click.option("--verify", is_flag=True, help="Run each finding's experiment in a torch subprocess and report a verdict.")
@click.option("--device", default=None, metavar="DEVICE", help="Device for --verify: auto (prefers CUDA), cpu, cuda or cuda:N.")
@click.option("--verify-timeout", type=float, default=None, metavar="S", help="Seconds each --verify experiment may run (default 60).")
@click.version_option(__version__, "--version", prog_name="amplint", message="%(prog)s %(version)s")
def main(
    paths: Tuple[str, ...],
    select: Tuple[str, ...],
    ignore: Tuple[str, ...],
    extend_select: Tuple[str, ...],
    output_format: str,
    exit_zero: bool,
    explain: Optional[str],
    config_file: Optional[str],
    isolated: bool,
    stdin_filename: Optional[str],
    torch_version: Optional[str],
    precision: Optional[str],
    verify: bool,
    device: Optional[str],
    verify_timeout: Optional[float],
) -> None:
    """Lint PyTorch mixed-precision (AMP) code. PATHS default to the current folder; '-' reads stdin."""
    if explain is not None:
        from .explain import explain_text

        try:
            click.echo(explain_text(explain or None))
        except KeyError as exc:
            raise fail(str(exc.args[0]))
        raise click.exceptions.Exit(EXIT_CLEAN)

    targets = list(paths) or ["."]
    try:
        config = _load(targets, config_file, isolated)
        config = with_overrides(
            config,
            select=_codes(select),
            ignore=_codes(ignore),
            extend_select=_codes(extend_select),
            torch_version=parse_torch_version(torch_version, "--torch-version") if torch_version else None,
            precision=precision,
        )
        from .engine import known_codes

        # validate selectors given on the command line
        config.selected_codes(known_codes(), known_codes())
        verify_settings = _verify_settings(config, device, verify_timeout) if verify else None
        diagnostics = _run(targets, config, stdin_filename)
    except ConfigError as exc:
        raise fail(str(exc))
    if verify_settings is not None:
        _verify(diagnostics, *verify_settings)

    from .report import renderer

    click.echo(renderer(output_format)(diagnostics), nl=False)
    if diagnostics and not exit_zero:
        raise click.exceptions.Exit(EXIT_FINDINGS)
    raise click.exceptions.Exit(EXIT_CLEAN)


def _verify_settings(config: Config, device: Optional[str], timeout: Optional[float]) -> Tuple[str, float]:
    """Checked before linting, so a missing torch or a bad flag fails fast (exit 2)."""
    from .verify import INSTALL_HINT, VerifyError, torch_available, validate_device

    if not torch_available():
        raise ConfigError(INSTALL_HINT)
    timeout = config.verify_timeout if timeout is None else timeout
    if timeout <= 0:
        raise ConfigError("--verify-timeout must be a positive number of seconds")
    try:
        return validate_device(device or config.verify_device), float(timeout)
    except VerifyError as exc:
        raise ConfigError(str(exc)) from None


def _verify(diagnostics, device: str, timeout: float) -> None:
    from .verify import VerifyError, verify_diagnostics

    try:
        verify_diagnostics(diagnostics, device=device, timeout=timeout)
    except VerifyError as exc:
        raise fail(str(exc))


def _load(targets: Sequence[str], config_file: Optional[str], isolated: bool) -> Config:
    from .engine import known_codes

    if isolated:
        return Config()
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file not found: {config_file}")
        return load_config(path, known_codes())
    real = [t for t in targets if t != "-"] or ["."]
    return load_config(find_pyproject(real), known_codes())


def _run(targets: Sequence[str], config: Config, stdin_filename: Optional[str]):
    from .engine import lint_paths, lint_source

    if "-" in targets:
        if len(targets) > 1:
            raise ConfigError("'-' (stdin) cannot be combined with other paths")
        source = sys.stdin.read()
        return lint_source(source, stdin_filename or "-", config)
    result = lint_paths(targets, config)
    return result.diagnostics


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())  # non-standalone click returns the exit code
