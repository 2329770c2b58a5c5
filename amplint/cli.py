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
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=None, help="Processes to lint with (default: the number of cores; 0 or 1: this process only).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, envvar="AMPLINT_CACHE_DIR", help="Where to keep the cache (default: .amplint_cache beside pyproject.toml, or in the current folder; env AMPLINT_CACHE_DIR).")
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
    jobs: Optional[int],
    no_cache: bool,
    cache_dir: Optional[str],
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
        diagnostics = _run(targets, config, stdin_filename, jobs=jobs, cache_dir=None if no_cache else (cache_dir or ""))
    except ConfigError as exc:
        raise fail(str(exc))

    from .report import renderer

    click.echo(renderer(output_format)(diagnostics), nl=False)
    if diagnostics and not exit_zero:
        raise click.exceptions.Exit(EXIT_FINDINGS)
    raise click.exceptions.Exit(EXIT_CLEAN)


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


def _run(targets: Sequence[str], config: Config, stdin_filename: Optional[str], jobs: Optional[int] = 1, cache_dir: Optional[str] = None):
    """cache_dir: None disables the cache; "" means the default place."""
    from .engine import lint_paths, lint_source

    if "-" in targets:
        if len(targets) > 1:
            raise ConfigError("'-' (stdin) cannot be combined with other paths")
        source = sys.stdin.read()
        return lint_source(source, stdin_filename or "-", config)
    from .parallel import default_jobs, open_cache

    cache = open_cache(config, cache_dir or None) if cache_dir is not None else None
    result = lint_paths(targets, config, jobs=default_jobs() if jobs is None else max(jobs, 1), cache=cache)
    if cache is not None:
        cache.save()
    return result.diagnostics


if __name__ == "__main__":  # pragma: no cover
    main()
