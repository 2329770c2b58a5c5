"""The `amplint` command: parse flags -> Config -> API -> exit code.

Exit codes: 0 no findings, 1 findings, 2 usage/config/internal error (with a
one-line message on stderr).
"""
from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import click

from .__version__ import __version__
from .core.config import Config, ConfigError, find_config, load_config, parse_seconds, parse_torch_version, with_overrides
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


#: `amplint NAME ...`: the words the console script hands to another module instead of linting
#: (`amplint/_start.py` SUBCOMMANDS, which must name the same ones: tests/test_cli.py), one line each
#: for `--help`
SUBCOMMANDS = {
    "run": "Watch a training run: amplint run --report DIR -- python train.py",
    "replay": "Re-run a recorded overflowing step in fp16 and fp32, name the module",
    "server": "Language server for editors (LSP over stdio): docs/editors.md",
}
#: other linters' subcommands for linting, which amplint does by default (`ruff check x` -> `amplint x`)
LINT_WORDS = ("check", "lint")


class _Command(click.Command):
    """Usage errors exit 2 with one line (click already uses 2); `--help` lists the subcommands."""

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_usage(ctx, formatter)
        formatter.write_usage(ctx.command_path, "COMMAND [ARGS]...", prefix="       ")

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, text) for name, text in SUBCOMMANDS.items()])
            formatter.write_paragraph()
            formatter.write_text("'amplint COMMAND --help' shows a command's options.")
        super().format_options(ctx, formatter)

    def main(self, *args, **kwargs):  # type: ignore[override]
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
            # click >= 8.2 returns an Exit's code instead of raising it when standalone_mode=False
            sys.exit(rv if isinstance(rv, int) else EXIT_CLEAN)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            hint = " (see 'amplint --help')"
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
@click.option("-o", "--output-file", type=click.Path(dir_okay=False), default=None, help="Write the report to this file instead of stdout.")
@click.option("-q", "--quiet", is_flag=True, help="Print the findings and nothing else (no summary).")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--exit-non-zero-on-fix", is_flag=True, help="With --fix: exit 1 when a fix was applied, even if nothing remains.")
@click.option("--show-settings", is_flag=True, help="Print the settings that apply (and where they came from), then exit.")
@click.option("--add-noqa", is_flag=True, help="Add `# noqa: CODE` to every line with a finding, then exit.")
@click.option("--explain", "explain", default=None, metavar="CODE", is_flag=False, flag_value="", help="Show a rule's documentation, by code or name (no CODE: list all rules).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Read settings from this TOML file.")
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option("--stdin-filename", default=None, help="The file name to report for '-' (stdin).")
@click.option("--torch-version", default=None, help="The oldest torch the project supports (for fixes).")
@click.option("--precision", type=click.Choice(["auto", "fp16", "bf16"]), default=None, help="Override the project's precision guess.")
@click.option("--fix/--no-fix", default=False, help="Apply safe fixes in place.")
@click.option("--unsafe-fixes/--no-unsafe-fixes", default=False, help="Also apply (and mark [*]) fixes that need review.")
@click.option("--diff", is_flag=True, help="Print the fixes as a unified diff and write nothing (exit 1 when there is a diff).")
@click.option("--show-fixes", is_flag=True, help="With --fix: list what was fixed, per file and code.")
@click.option("--statistics", is_flag=True, help="Print how many findings each code has instead of the findings.")
@click.option("--show-files", is_flag=True, help="Print the files that would be linted, then exit.")
@click.option("--respect-gitignore/--no-respect-gitignore", default=None, help="Skip files .gitignore ignores (default: on).")
@click.option("--force-exclude/--no-force-exclude", default=None, help="Apply exclude globs to files named on the command line too (for pre-commit).")
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=None, help="Processes to lint with (default: the number of cores; 0 or 1: this process only).")
@click.option("--watch", is_flag=True, help="Lint again whenever a file under PATHS changes (needs the 'server' extra).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the cache.")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, envvar="AMPLINT_CACHE_DIR", help="Where to keep the cache (default: .amplint_cache beside pyproject.toml, or in the current folder; env AMPLINT_CACHE_DIR).")
@click.option("--file-timeout", type=float, default=None, metavar="S", help="Seconds one file's analysis may take before it is skipped with AMP000 (default 120; 0: no limit).")
@click.option("--verify", is_flag=True, help="Run each finding's experiment in a torch subprocess and report a verdict.")
@click.option("--device", default=None, metavar="DEVICE", help="Device for --verify: auto (prefers CUDA), cpu, cuda or cuda:N.")
@click.option("--verify-timeout", type=float, default=None, metavar="S", help="Seconds each --verify experiment may run (default 60, at most 600).")
@click.option("--verify-budget", type=float, default=None, metavar="S", help="Seconds all of --verify may take (default 900, at most 3600); later findings are 'inconclusive: budget spent'.")
@click.option("--verify-unsandboxed", is_flag=True, help="Let --verify run the flagged code without its OS sandbox where the machine cannot start one (only on code you trust).")
@click.version_option(__version__, "-V", "--version", prog_name="amplint", message="%(prog)s %(version)s")
def main(
    paths: Tuple[str, ...],
    select: Tuple[str, ...],
    ignore: Tuple[str, ...],
    extend_select: Tuple[str, ...],
    output_format: str,
    output_file: Optional[str],
    quiet: bool,
    exit_zero: bool,
    exit_non_zero_on_fix: bool,
    show_settings: bool,
    add_noqa: bool,
    explain: Optional[str],
    config_file: Optional[str],
    isolated: bool,
    stdin_filename: Optional[str],
    torch_version: Optional[str],
    precision: Optional[str],
    fix: bool = False,
    unsafe_fixes: bool = False,
    diff: bool = False,
    show_fixes: bool = False,
    statistics: bool = False,
    show_files: bool = False,
    respect_gitignore: Optional[bool] = None,
    force_exclude: Optional[bool] = None,
    jobs: Optional[int] = None,
    watch: bool = False,
    no_cache: bool = False,
    cache_dir: Optional[str] = None,
    verify: bool = False,
    device: Optional[str] = None,
    verify_timeout: Optional[float] = None,
    verify_budget: Optional[float] = None,
    verify_unsandboxed: bool = False,
    file_timeout: Optional[float] = None,
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
    out = _Output(output_file, output_format)
    try:
        _refuse_link_loops(targets)
        _refuse_missing(targets)
        config, origin = _load(targets, config_file, isolated)
        config = with_overrides(
            config,
            select=_codes(select),
            ignore=_codes(ignore),
            extend_select=_codes(extend_select),
            torch_version=parse_torch_version(torch_version, "--torch-version") if torch_version else None,
            precision=precision,
            respect_gitignore=respect_gitignore,
            force_exclude=force_exclude,
            file_timeout=parse_seconds(file_timeout, "--file-timeout") if file_timeout is not None else None,
        )
        from .engine.pipeline import known_codes

        # validate selectors given on the command line
        config.selected_codes(known_codes(), known_codes())
        if torch_version is None and config.torch_version is None and not isolated:
            config, origin["torch-version"] = _inferred_floor(targets, config)
        verify_settings = _verify_settings(config, device, verify_timeout, verify_budget, verify_unsandboxed) if verify else None
        if show_settings:
            from .settings import settings_text

            click.echo(settings_text(config, origin), nl=False)
            raise click.exceptions.Exit(EXIT_CLEAN)
        if add_noqa:
            from .fix.add_noqa import add_noqa_paths

            if "-" in targets:
                raise ConfigError("--add-noqa cannot read stdin; name the files")
            added, errors, notes = add_noqa_paths(targets, config, jobs=default_jobs_or(jobs))
            for error in errors:
                click.echo(f"amplint: error: {error}", err=True)
            for note in notes:
                click.echo(f"amplint: warning: {note}", err=True)
            if not quiet:
                click.echo(f"Added {added} noqa directive{'s' if added != 1 else ''}.", err=True)
            raise click.exceptions.Exit(EXIT_ERROR if errors else EXIT_CLEAN)
        if show_files:
            from .engine.discovery import discover

            for path in discover(targets, config):
                click.echo(path)
            raise click.exceptions.Exit(EXIT_CLEAN)
        if watch:
            raise click.exceptions.Exit(_watch(targets, config, output_format, unsafe_fixes, quiet, out, jobs, None if no_cache else (cache_dir or ""), fix or diff))
        if fix or diff:
            from .fix.fixer import fix_paths, fix_stdin

            if "-" in targets:
                if len(targets) > 1:
                    raise ConfigError("'-' (stdin) cannot be combined with other paths")
                outcome = fix_stdin(sys.stdin.read(), stdin_filename or "-", config, unsafe_fixes)
            else:
                from .engine.parallel import default_jobs

                outcome = fix_paths(
                    targets,
                    config,
                    unsafe_fixes,
                    write=not diff,
                    jobs=default_jobs() if jobs is None else max(jobs, 1),
                    cache_dir=None if no_cache else (cache_dir or ""),
                )
            code = _report_fixes(outcome, output_format, unsafe_fixes, diff, show_fixes, statistics, exit_zero, "-" in targets, out, quiet)
            if code == EXIT_CLEAN and exit_non_zero_on_fix and outcome.fixed_count and not diff:
                code = EXIT_FINDINGS
            raise click.exceptions.Exit(code)
        sources: dict = {}
        read: dict = {}
        diagnostics = _run(
            targets, config, stdin_filename, jobs=jobs, cache_dir=None if no_cache else (cache_dir or ""), sources=sources, read=read,
            unsafe_fixes=unsafe_fixes or output_format in ("json", "json-lines", "sarif"),  # these print every fix
        )
    except ConfigError as exc:
        raise fail(str(exc))
    if verify_settings is not None:
        # stdin's text is not the file's: its verdicts are not kept
        _verify(diagnostics, verify_settings, config, None if no_cache or "-" in targets else (cache_dir or ""))
    elif diagnostics and output_format in ("json", "json-lines") and not no_cache and "-" not in targets:
        _cached_verdicts(diagnostics, config, cache_dir)

    from .report import renderer

    if statistics:
        from .report.statistics import render as render_statistics

        out.write(render_statistics(diagnostics, unsafe_fixes=unsafe_fixes, output_format=output_format))
    else:
        out.write(renderer(output_format)(diagnostics, unsafe_fixes=unsafe_fixes, **out.context(quiet, sources, read if "-" not in targets else None)))
    if _internal_errors(diagnostics):
        raise click.exceptions.Exit(EXIT_ERROR)
    if diagnostics and not exit_zero:
        raise click.exceptions.Exit(EXIT_FINDINGS)
    raise click.exceptions.Exit(EXIT_CLEAN)


def _watch(targets: Sequence[str], config: Config, output_format: str, unsafe_fixes: bool, quiet: bool, out: "_Output", jobs: Optional[int], cache_dir: Optional[str], fixing: bool) -> int:
    """`--watch`: report, then report again on every change (amplint/server/watch.py)."""
    if "-" in targets:
        raise ConfigError("--watch cannot read stdin ('-')")
    if fixing:
        raise ConfigError("--watch reports findings; it cannot be combined with --fix or --diff")
    from .report import renderer
    from .server.watch import watch_paths

    def lint_once() -> str:
        sources: dict = {}
        read: dict = {}
        found = _run(targets, config, None, jobs=jobs, cache_dir=cache_dir, sources=sources, unsafe_fixes=unsafe_fixes, read=read)
        return renderer(output_format)(found, unsafe_fixes=unsafe_fixes, **out.context(quiet, sources, read))

    return watch_paths(targets, lint_once, lambda text: out.write(text + "\n"))


def _report_fixes(outcome, output_format: str, unsafe: bool, diff: bool, show_fixes: bool, statistics: bool, exit_zero: bool, stdin: bool, out: "_Output", quiet: bool) -> int:
    """Print what `--fix` / `--diff` did; returns the exit code."""
    from .report import renderer
    from .report.text import fixes_summary

    for error in outcome.errors:
        click.echo(f"amplint: error: {error}", err=True)
    from .report.source import clean

    for line in outcome.rejected:
        click.echo(f"amplint: warning: {clean(line)}", err=True)
    fixed = outcome.fixed_count
    if diff:
        click.echo("".join(c.diff for c in outcome.changes), nl=False)
        click.echo(f"Would fix {fixed} error{'s' if fixed != 1 else ''}." if fixed else "No errors would be fixed.", err=True)
        return EXIT_FINDINGS if outcome.changes and not exit_zero else (EXIT_ERROR if outcome.errors else EXIT_CLEAN)
    if stdin:  # the fixed text goes to stdout, the report to stderr
        click.echo(outcome.output or "", nl=False)
    if statistics:
        from .report.statistics import render as render_statistics

        report = render_statistics(outcome.diagnostics, unsafe_fixes=unsafe, output_format=output_format)
    else:
        context = out.context(quiet, {}, outcome.read) if not stdin else {"quiet": quiet}
        report = renderer(output_format)(outcome.diagnostics, fixed=fixed, unsafe_fixes=unsafe, **context)
    out.write(report, err=stdin)
    if show_fixes and output_format == "text":
        out.write(fixes_summary(outcome.changes), err=stdin)
    if outcome.errors or _internal_errors(outcome.diagnostics):
        return EXIT_ERROR
    return EXIT_FINDINGS if outcome.diagnostics and not exit_zero else EXIT_CLEAN
def _verify_settings(
    config: Config, device: Optional[str], timeout: Optional[float], budget: Optional[float], unsandboxed: bool
) -> Dict[str, Any]:
    """Checked before linting, so a missing torch or a bad flag fails fast (exit 2).

    The timeout cap holds for the command line and for a repository's config alike;
    running without the sandbox is a command-line choice only, never a config one."""
    from .verify import INSTALL_HINT, VerifyError, torch_available, validate_device
    from .verify.runner import MAX_BUDGET, MAX_TIMEOUT, check_seconds

    if not torch_available():
        raise ConfigError(INSTALL_HINT)
    try:
        return {
            "device": validate_device(device or config.verify_device),
            "timeout": check_seconds(config.verify_timeout if timeout is None else timeout,
                                     "--verify-timeout" if timeout is not None else "verify.timeout", MAX_TIMEOUT),
            "budget": check_seconds(config.verify_budget if budget is None else budget,
                                    "--verify-budget" if budget is not None else "verify.budget", MAX_BUDGET),
            "unsandboxed": unsandboxed,
        }
    except VerifyError as exc:
        raise ConfigError(str(exc)) from None


def _verify(diagnostics, settings: Dict[str, Any], config: Config, cache_dir: Optional[str]) -> None:
    """Verdicts are kept beside the lint cache (none with --no-cache) for `amplint server`."""
    from .verify import VerifyError, verify_diagnostics
    from .verify.store import VerdictStore

    store = VerdictStore.for_config(config, cache_dir or None) if cache_dir is not None else None
    try:
        verify_diagnostics(diagnostics, **settings, on_start=_say_sandbox, store=store)
    except VerifyError as exc:
        raise fail(str(exc))
    finally:
        _say_notes(store.notes if store is not None else ())


def _say_notes(notes) -> None:
    """One warning line per note (links planted where the cache keeps its files), each once."""
    from .report.source import clean

    for line in dict.fromkeys(notes):
        click.echo(f"amplint: warning: {clean(line)}", err=True)


def _cached_verdicts(diagnostics, config: Config, given: Optional[str]) -> None:
    """JSON output shows a verdict an earlier --verify kept for the unchanged file (`cached`)."""
    from .engine.cache import cache_dir

    folder = cache_dir(given, config.root)
    try:
        if not any(name.startswith("verdicts-") for name in os.listdir(folder)):
            return  # no verify run kept anything here: the verifier's package is not even imported
    except OSError:
        return
    from .verify.store import attach_cached

    attach_cached(diagnostics, folder)


def _say_sandbox(layers) -> None:
    """On stderr, before any user code runs: what confines it (or that nothing does)."""
    click.echo("amplint: verify sandbox: " + "; ".join(layers), err=True)


def _internal_errors(diagnostics) -> bool:
    """An internal error (a rule crashed on a file) exits 2, like ruff: the run finished and
    every finding is printed, but some file was not fully checked."""
    from .engine.pipeline import is_internal_error

    n = sum(1 for d in diagnostics if is_internal_error(d))
    if n:
        click.echo(f"amplint: error: {n} internal error{'s' if n != 1 else ''} (see AMP000 internal-error above); please report {'them' if n != 1 else 'it'}", err=True)
    return n > 0


def _refuse_link_loops(targets: Sequence[str]) -> None:
    """A path given on the command line that is a symbolic link loop is a usage error (exit 2);
    loops met while walking a folder are AMP000 lines like any unreadable file."""
    for target in targets:
        if target == "-":
            continue
        try:
            os.stat(target)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ConfigError(f"{target}: symbolic link loop (too many levels of symbolic links)") from None
        except ValueError:  # a NUL byte: reported per file, as before
            pass


def _refuse_missing(targets: Sequence[str]) -> None:
    """A path on the command line that does not exist is a usage error (exit 2), with a "did
    you mean": for a first word that looks like a subcommand, the subcommand close to it
    (`amplint lint x`, `ruff check`'s habit: linting takes no word, so `amplint x`), else a
    name in the same folder close to it. A broken symbolic link exists (as a link) and is
    reported as a finding, like any file that cannot be read."""
    for i, target in enumerate(targets):
        if target == "-" or _lexists(target):
            continue
        import difflib  # (only for the error: a warm run imports nothing it does not need)

        if i == 0 and target.isidentifier():  # where a subcommand would be, and spelled like one
            close = difflib.get_close_matches(target.lower(), [*SUBCOMMANDS, *LINT_WORDS], n=1, cutoff=0.6)
            if close and close[0] in LINT_WORDS:
                rest = " ".join(["amplint", *(_quoted(t) for t in targets[1:])])
                raise click.UsageError(f"`{target}` is neither a command nor a file; amplint lints without a command: did you mean `{rest}`?")
            if close:
                raise click.UsageError(f"`{target}` is neither a command nor a file; did you mean `amplint {close[0]}`?")
        hint = _close_name(target)
        raise click.UsageError(f"{target}: no such file or directory{f'; did you mean `{hint}`?' if hint else ''}")


def _quoted(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _lexists(path: str) -> bool:
    try:
        os.lstat(path)
    except ValueError:  # a NUL byte: reported per file, as before
        return True
    except OSError as exc:
        return exc.errno not in (errno.ENOENT, errno.ENOTDIR)
    return True


def _close_name(target: str) -> Optional[str]:
    """An existing name in `target`'s folder close to its last part (`trian.py` -> `train.py`)."""
    import difflib

    folder, name = os.path.split(target.rstrip(os.sep) or target)
    try:
        names = sorted(os.listdir(folder or "."))
    except (OSError, ValueError):
        return None
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return os.path.join(folder, close[0]) if close else None


def _load(targets: Sequence[str], config_file: Optional[str], isolated: bool) -> Tuple[Config, dict]:
    """(config, {"file": where it came from}); --isolated reads no file."""
    from .engine.pipeline import known_codes

    if isolated:
        return Config(), {"file": None}
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file not found: {config_file}")
        return load_config(path, known_codes()), {"file": str(path)}
    real = [t for t in targets if t != "-"] or ["."]
    found = find_config(real)
    return load_config(found, known_codes()), {"file": str(found) if found else None}


def _inferred_floor(targets: Sequence[str], config: Config) -> Tuple[Config, Optional[str]]:
    """`torch-version` from the project's requirements when no setting gives it (like ruff's
    `target-version` from `requires-python`); returns the config and where the floor came from."""
    from .core import torchfloor

    folder = Path(config.root) if config.root else torchfloor.project_folder(targets)
    found = torchfloor.infer(folder) if folder is not None else None
    if found is None:
        return config, None
    floor, source = found
    return with_overrides(config, torch_version=floor), str(folder / source) if source != "requirements*.txt" else source


def default_jobs_or(jobs: Optional[int]) -> int:
    from .engine.parallel import default_jobs

    return default_jobs() if jobs is None else max(jobs, 1)


class _Output:
    """Where the report goes (stdout or `--output-file`) and whether it is colored.

    Color only on a terminal, for the text formats; `NO_COLOR` (any value) turns it
    off and `FORCE_COLOR` (non-empty) on, as https://no-color.org and
    https://force-color.org ask. A report file is never colored.
    """

    def __init__(self, path: Optional[str], output_format: str) -> None:
        import os

        self.path = path
        self.color = False
        if path is None and output_format in ("text", "concise"):
            if os.environ.get("FORCE_COLOR"):
                self.color = True
            elif "NO_COLOR" not in os.environ:
                self.color = sys.stdout.isatty()
        self._opened = False

    def context(self, quiet: bool, sources: dict, read: Optional[dict] = None) -> dict:
        """`read`: what the run read (`LintResult.read`), for the text summary."""
        return {"color": self.color, "quiet": quiet, "sources": sources, "read": read}

    def write(self, text: str, err: bool = False) -> None:
        if self.path is None or err:
            click.echo(text, nl=False, err=err, color=True if self.color else None)
            return
        try:
            with open(self.path, "a" if self._opened else "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            raise fail(f"cannot write {self.path}: {exc.strerror}") from None
        self._opened = True


def _run(
    targets: Sequence[str], config: Config, stdin_filename: Optional[str], jobs: Optional[int] = 1, cache_dir: Optional[str] = None,
    sources: Optional[dict] = None, unsafe_fixes: bool = True, read: Optional[dict] = None,
):
    """cache_dir: None disables the cache; "" means the default place. Text read from
    stdin is put in `sources` (name -> text) for the report's source frames. The fixes
    offered (safe ones, and unsafe ones with `unsafe_fixes`) are checked before they are shown.
    `read` gets how many files each outcome had (`LintResult.read`; nothing for stdin)."""
    sources = {} if sources is None else sources
    from .engine.run import lint_paths, lint_source

    if "-" in targets:
        if len(targets) > 1:
            raise ConfigError("'-' (stdin) cannot be combined with other paths")
        source = sys.stdin.read()
        sources[stdin_filename or "-"] = source
        if stdin_filename and stdin_filename.lower().endswith(".ipynb"):
            from .engine.notebook import lint_notebook

            return lint_notebook(source, stdin_filename, config)
        found = lint_source(source, stdin_filename or "-", config)
        if any(d.fix is not None for d in found):  # checked as --fix would apply them, like a file's
            from .fix.fixer import stdin_linter, withdraw_in_text

            withdraw_in_text(source, stdin_linter(source, stdin_filename or "-", config), found, unsafe_fixes)
        return found
    from .engine.parallel import default_jobs, open_cache

    cache = open_cache(config, cache_dir or None) if cache_dir is not None else None
    result = lint_paths(targets, config, jobs=default_jobs() if jobs is None else max(jobs, 1), cache=cache)
    if read is not None:
        read.update(result.read)
    if any(d.fix is not None for d in result.diagnostics):
        from .fix.fixer import withdraw_failing_fixes
        from .report.source import clean

        for line in withdraw_failing_fixes(result.diagnostics, result.facts, config, unsafe_fixes, cache, result.noqa_used, result.linted):
            click.echo(f"amplint: warning: {clean(line)}", err=True)
    _say_notes(result.notes)
    if cache is not None:
        cache.save()  # with the fix checks, kept with their files' entries
        _say_notes(cache.notes)
    return result.diagnostics


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())  # non-standalone click returns the exit code
