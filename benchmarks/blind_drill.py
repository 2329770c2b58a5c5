"""The blind drill: whole public training repositories, labelled by hand before amplint ran on them.

    python benchmarks/blind_drill.py run --mirrors DIR [--split tuning|read|read2|read3|read4|read5|read6|read7|read8|read9|read10|read11|read12|read13|read14|read15|read16|heldout|all|tuning,read] [--jobs 2]
    python benchmarks/blind_drill.py score [--split tuning|read|read2|read3|read4|read5|read6|read7|read8|read9|read10|read11|read12|read13|read14|read15|read16|heldout|all|tuning,read] [--show]
    python benchmarks/blind_drill.py template --split tuning --out PATH   # unjudged findings to adjudicate
    python benchmarks/blind_drill.py score --check                        # exit 1 if a finding is unjudged
    python benchmarks/blind_drill.py adjudicate FINDINGS.json [REVIEWS.json]  # merge an adjudicator's verdicts

Labellers follow `blind_labelling.md` (tool-neutral categories, mapped to codes by CATEGORY_CODES);
adjudicators follow `blind_adjudicating.md`.

`blind_projects.json` pins each repository (GitHub `owner/name` and commit), its kind and its split,
each held-out split drawn at random once (seeds and draws recorded there): nobody reads a held-out
project's findings while rules change; it is scored only when a change is finished. Once scored and
read, a held-out split becomes `read` (then `read2`, ...): tuning data, still reported on its own.
`blind_labels/<owner>+<name>.json` holds, per repository, what a labeller who had not seen
amplint's rules or output wrote after tracing the training step across files (`pitfalls`,
`negatives`: file, line, why), and then, marked as such, the adjudication of every finding the
blind labels did not decide (`adjudicated`) and of blind labels found wrong on review
(`label_reviews`). Recall is measured on blind pitfalls only.

The repositories' code is never committed: `run` exports each pinned commit from a local git
mirror (`--mirrors DIR` holding `owner+name/repo` or `owner+name.git` bare directories, as the
search tool's `fetch` or `git clone --mirror` leave them) into `<corpus>/blind/`, and lints it
as a user would (`amplint --output-format json --no-cache <repo>`; the default rule selection,
so info rules are not judged).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import corpus_dir  # noqa: E402

HERE = Path(__file__).resolve().parent
PROJECTS_FILE = HERE / "blind_projects.json"
LABELS_DIR = HERE / "blind_labels"

#: the labelling guide's categories (tool-neutral names, so labels do not anchor on rule codes) -> rule
#: codes; a category two rules split between them maps to both (R1, a whole-model cast trained by a plain
#: optimizer: AMP201 in fp16, AMP206 in bf16): a finding of either matches its labels, and a label no
#: finding matched counts as a miss of the first
CATEGORY_CODES: Dict[str, Union[str, Tuple[str, ...]]] = {
    "D1": "AMP001", "D2": "AMP002",
    "S1": "AMP101", "S2": "AMP102", "S3": "AMP103", "S4": "AMP104", "S5": "AMP105", "S6": "AMP106",
    "S7": "AMP107",
    "R1": ("AMP201", "AMP206"), "R2": "AMP202", "R3": "AMP203", "R4": "AMP204", "R5": "AMP205",
    "N1": "AMP301", "N2": "AMP302", "N3": "AMP303", "N4": "AMP304",
    "C1": "AMP401", "C2": "AMP402",
    "K1": "AMP501", "K2": "AMP502", "K3": "AMP503",
    "X1": "AMP801", "X2": "AMP802", "X3": "AMP803", "X4": "AMP804", "X5": "AMP805", "X6": "AMP806",
    "X7": "AMP807", "X8": "AMP808", "X9": "AMP101", "X10": "AMP811", "X11": "AMP812",
}
def category_codes(cat: str) -> Tuple[str, ...]:
    """The rule codes a label category maps to, the one its misses count under first (empty: none)."""
    codes = CATEGORY_CODES.get(cat)
    if codes is None:
        return ()
    return (codes,) if isinstance(codes, str) else tuple(codes)


def _same_category(label_code: str, finding_code: str) -> bool:
    """A finding of `finding_code` may be the bug of a label whose (first) code is `label_code`."""
    if label_code == finding_code:
        return True
    return any(c[0] == label_code and finding_code in c for c in map(category_codes, CATEGORY_CODES))


#: how far (rows before, after) a finding may sit from a label's line and still be that label's bug
SLACK = (1, 1)
#: a Function is labelled at its `class` line and reported at its `forward` a few lines below
CODE_SLACK = {"AMP501": (1, 8)}


class Label(NamedTuple):
    project: str
    code: str
    file: str
    rows: Tuple[int, ...]  # the reported line first, then the bug's other lines
    kind: str  # "pitfall" | "negative"
    confidence: str
    why: str


def load_projects() -> List[dict]:
    return json.loads(PROJECTS_FILE.read_text(encoding="utf-8"))["projects"]


def project_key(project: dict) -> str:
    return project["repo"].replace("/", "+")


#: the splits of blind_projects.json ("read" .. "read16": the first sixteen held-out splits, each
#: scored blind and then read; "heldout": the current one, drawn from repositories nobody had labelled)
SPLITS = ("tuning", "read", "read2", "read3", "read4", "read5", "read6", "read7", "read8", "read9", "read10", "read11", "read12", "read13", "read14", "read15", "read16", "heldout")


def in_split(project: dict, split: str) -> bool:
    """`split` is one split, several joined by commas ("tuning,read"), or "all"."""
    return split == "all" or project["split"] in split.split(",")


def split_arg(value: str) -> str:
    parts = value.split(",")
    if value != "all" and not all(p in SPLITS for p in parts):
        raise argparse.ArgumentTypeError(f"choose from {', '.join(SPLITS)} or all (several joined by commas)")
    return value


def load_labels(key: str) -> Optional[dict]:
    path = LABELS_DIR / f"{key}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _rows(entry: dict) -> Tuple[int, ...]:
    """The label's rows in its own file; an `also` entry "path:line" names a site in another file, which
    a finding there reaches only through an adjudicator's `same_bug_as`."""
    first = entry.get("lines") or [entry["line"]]
    return tuple(int(r) for r in [*first, *entry.get("also", [])] if isinstance(r, int) or str(r).isdigit())


def labels_of(key: str, data: dict) -> List[Label]:
    """The blind pitfalls and negatives, minus the pitfalls a review found wrong (`label_reviews`)."""
    rejected = {
        (r["cat"], r["file"], int(r["line"])) for r in data.get("label_reviews", []) if r["verdict"] == "not-a-pitfall"
    }
    out = []
    for kind, entries in (("pitfall", data.get("pitfalls", [])), ("negative", data.get("negatives", []))):
        for e in entries:
            codes = category_codes(e["cat"])
            if not codes:
                continue
            code = codes[0]
            rows = _rows(e)
            if kind == "pitfall" and (e["cat"], e["file"], rows[0]) in rejected:
                continue
            out.append(Label(key, code, e["file"], rows, kind, e.get("confidence", "certain"), e.get("why", "")))
    return out


def _near(row: int, rows: Iterable[int], code: str = "") -> bool:
    before, after = CODE_SLACK.get(code, SLACK)
    return any(r - before <= row <= r + after for r in rows)


# --- running -------------------------------------------------------------------------------------------------


def mirror_of(mirrors: Path, key: str) -> Path:
    for candidate in (mirrors / key / "repo", mirrors / f"{key}.git", mirrors / key):
        if (candidate / "HEAD").exists() or (candidate / "objects").is_dir():
            return candidate
    raise SystemExit(f"blind_drill: no git mirror of {key} under {mirrors}")


def export(git_dir: Path, commit: str, target: Path) -> Path:
    """The commit's tree as plain files (blobs a shallow snapshot lacks are skipped, as `fetch` leaves them)."""
    done = target / ".exported"
    if done.exists() and done.read_text() == commit:
        _write_index(git_dir, commit, target)
        return target
    listing = subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "-r", "-z", commit], capture_output=True, check=True
    ).stdout.split(b"\0")
    blobs = []
    for item in listing:
        if not item:
            continue
        meta, path = item.split(b"\t", 1)
        mode, kind, sha = meta.split()
        if kind == b"blob" and mode != b"120000":  # links are not followed out of the tree
            blobs.append((sha, os.fsdecode(path)))
    cat = subprocess.Popen(["git", "--git-dir", str(git_dir), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert cat.stdin is not None and cat.stdout is not None
    for sha, path in blobs:
        cat.stdin.write(sha + b"\n")
        cat.stdin.flush()
        header = cat.stdout.readline().split()
        if len(header) < 3 or header[1] == b"missing":
            continue
        data = cat.stdout.read(int(header[2]))
        cat.stdout.read(1)
        dest = target / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    cat.stdin.close()
    cat.wait()
    (target / ".git").mkdir(exist_ok=True)  # a clone's root marker: amplint finds the project where a user's checkout has it
    _write_index(git_dir, commit, target)
    done.write_text(commit)
    return target


def _write_index(git_dir: Path, commit: str, target: Path) -> None:
    """The commit's index in the export's `.git`, as a clone has it: git (and amplint) never
    ignore a tracked file, whatever the project's .gitignore says (`**/sat` above a tracked `sat/`)."""
    index = target / ".git" / "index"
    if index.exists():
        return
    (target / ".git").mkdir(exist_ok=True)
    env = dict(os.environ, GIT_INDEX_FILE=str(index))
    subprocess.run(["git", "--git-dir", str(git_dir), "read-tree", commit], env=env, check=True, capture_output=True)


def lint(folder: Path, jobs: int) -> Tuple[List[dict], float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "amplint", "--output-format", "json", "--no-cache", "--exit-zero", "-j", str(jobs), "."],
        cwd=folder, capture_output=True, text=True,
    )
    took = time.perf_counter() - start
    # --exit-zero: any other status (amplint not importable, a crash) is a failed run, never "no findings"
    if proc.returncode != 0:
        raise SystemExit(f"blind_drill: amplint failed on {folder} (exit {proc.returncode}): {proc.stderr[-2000:]}")
    findings = []
    for d in json.loads(proc.stdout or "[]"):
        findings.append({
            "file": os.path.relpath(d["filename"], folder), "row": d["location"]["row"],
            "column": d["location"]["column"], "code": d["code"], "severity": d["severity"], "message": d["message"],
        })
    return findings, took


def splits_of(split: str) -> List[str]:
    """The single splits a `--split` value names, in SPLITS order."""
    return [s for s in SPLITS if in_split({"split": s}, split)]


def results_file(root: Path, split: str) -> Path:
    """Where `run` keeps one split's findings: one file per split, whatever `--split` a run named,
    so `score --split read2` reads what a `run --split tuning,read2` wrote."""
    return root / f"findings-{split}.json"


def run(args: argparse.Namespace) -> None:
    root = corpus_dir() / "blind"
    root.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.projects.split(",")))
    # a run over some projects updates theirs and keeps the others' last results
    results: Dict[str, Dict[str, dict]] = {
        s: json.loads(results_file(root, s).read_text()) if only and results_file(root, s).exists() else {}
        for s in splits_of(args.split)
    }
    for project in load_projects():
        key = project_key(project)
        if not in_split(project, args.split) or (only and key not in only):
            continue
        folder = export(mirror_of(Path(args.mirrors), key), project["commit"], root / f"{key}-{project['commit'][:12]}")
        findings, took = lint(folder, args.jobs)
        results[project["split"]][key] = {"commit": project["commit"], "findings": findings, "seconds": round(took, 2)}
        print(f"{key:<58}{len(findings):>5} findings {took:>7.1f} s", flush=True)
        results_file(root, project["split"]).write_text(json.dumps(results[project["split"]], indent=1))
    for split in results:
        print(f"written: {results_file(root, split)}")


# --- scoring -------------------------------------------------------------------------------------------------


class Judged(NamedTuple):
    project: str
    finding: dict
    verdict: str  # "correct" | "fp" | "unjudged"
    source: str  # "blind" (a blind pitfall/negative decides it) | "adjudicated" | ""
    label: Optional[Label]


def judge(key: str, findings: Sequence[dict], data: Optional[dict]) -> Tuple[List[Judged], List[Label], List[Label]]:
    """Each finding's verdict, and the blind pitfalls found and missed."""
    labels = labels_of(key, data) if data else []
    adjudicated = {
        (a["code"], a["file"], int(a["row"])): a for a in (data or {}).get("adjudicated", [])
    }
    pitfalls = [lab for lab in labels if lab.kind == "pitfall"]
    found = set()
    found_by: Dict[Label, str] = {}  # the code of the finding that found a label (a shared category's either)
    judged = []
    for f in per_file_units(findings):
        if f["severity"] == "info" or f["code"] == "AMP000":
            continue
        match = next(
            (lab for lab in pitfalls if _same_category(lab.code, f["code"]) and lab.file == f["file"]
             and any(_near(row, lab.rows, lab.code) for row in f["rows"])), None,
        )
        if match is not None:
            found.add(match)
            found_by.setdefault(match, f["code"])
            judged.append(Judged(key, f, "correct", "blind", match))
            continue
        verdict = adjudicated.get((f["code"], f["file"], f["row"]))
        if verdict is not None:
            same = verdict.get("same_bug_as")  # the blind pitfall this finding reports at another of its sites
            label = next(
                (lab for lab in pitfalls if same and lab.file == same["file"] and lab.rows[0] == int(same["line"])
                 and lab.code == (category_codes(same["cat"]) or ("",))[0]), None,
            )
            if label is not None and verdict["verdict"] == "correct":
                found.add(label)
                found_by.setdefault(label, f["code"])
            judged.append(Judged(key, f, verdict["verdict"], "adjudicated", label))
            continue
        negative = next(
            (lab for lab in labels if lab.kind == "negative" and _same_category(lab.code, f["code"]) and lab.file == f["file"]
             and any(_near(row, lab.rows, lab.code) for row in f["rows"])), None,
        )
        if negative is not None:
            judged.append(Judged(key, f, "fp", "blind", negative))
            continue
        judged.append(Judged(key, f, "unjudged", "", None))
    missed = [lab for lab in pitfalls if lab not in found]
    return judged, sorted(lab._replace(code=found_by.get(lab, lab.code)) for lab in found), missed


#: rules whose findings are counted once per file (the labels list every use of a deprecated API per file)
PER_FILE_CODES = frozenset({"AMP001"})


def per_file_units(findings: Sequence[dict]) -> List[dict]:
    """The findings as units of judgement: one per finding, but one per file for PER_FILE_CODES
    (first row reported, every row kept in `rows`)."""
    units: List[dict] = []
    grouped: Dict[Tuple[str, str], dict] = {}
    for f in findings:
        if f["code"] in PER_FILE_CODES:
            unit = grouped.get((f["code"], f["file"]))
            if unit is not None:
                unit["rows"].append(f["row"])
                continue
            unit = grouped[(f["code"], f["file"])] = {**f, "rows": [f["row"]]}
            units.append(unit)
        else:
            units.append({**f, "rows": [f["row"]]})
    return units


def existing_codes() -> set:
    from amplint.engine.registry import all_codes

    return set(all_codes())


def score(args: argparse.Namespace) -> int:
    root = corpus_dir() / "blind"
    results: Dict[str, dict] = {}
    for split in splits_of(args.split):
        if not results_file(root, split).exists():
            raise SystemExit(f"blind_drill: no findings of split {split!r} under {root}: run it first")
        results.update(json.loads(results_file(root, split).read_text()))
    codes = existing_codes()
    rows: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    unjudged: List[Judged] = []
    misses: List[Label] = []
    by_confidence: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    unlabelled = []
    for key, result in sorted(results.items()):
        data = load_labels(key)
        if data is None:
            unlabelled.append(key)
            continue
        judged, found, missed = judge(key, result["findings"], data)
        for j in judged:
            rows[j.finding["code"]]["findings"] += 1
            rows[j.finding["code"]][j.verdict] += 1
            if j.verdict == "unjudged":
                unjudged.append(j)
        for lab in found:
            rows[lab.code]["found"] += 1
            by_confidence[lab.confidence]["found"] += 1
        for lab in missed:
            rows[lab.code]["missed"] += 1
            by_confidence[lab.confidence]["missed"] += 1
            misses.append(lab)
    print(table(rows, codes, len(results) - len(unlabelled)))
    print(confidence_line(by_confidence))
    if unlabelled:
        print(f"\nnot labelled (not scored): {', '.join(unlabelled)}")
    if args.show:
        for j in unjudged:
            print(f"UNJUDGED {j.project} {j.finding['file']}:{j.finding['row']} {j.finding['code']} {j.finding['message']}")
        for lab in misses:
            mark = "" if lab.code in codes else " (no rule yet)"
            print(f"MISSED{mark} {lab.project} {lab.file}:{lab.rows[0]} {lab.code} [{lab.confidence}] {lab.why}")
    if args.template:
        entries = [
            {"project": j.project, "code": j.finding["code"], "file": j.finding["file"], "row": j.finding["row"],
             "message": j.finding["message"], "verdict": "", "reason": "", "by": "adjudicated"}
            for j in unjudged
        ]
        Path(args.template).write_text(json.dumps(entries, indent=1))
        print(f"adjudication template ({len(entries)} entries): {args.template}")
    return 1 if args.check and unjudged else 0


def confidence_line(by_confidence: Dict[str, collections.Counter]) -> str:
    """Recall split by the labeller's confidence: a "likely" pitfall often depends on a run-time
    choice (a flag, a config) where the rules prefer silence, so the two recalls say different things."""
    parts = []
    for confidence in sorted(by_confidence):
        c = by_confidence[confidence]
        total = c["found"] + c["missed"]
        parts.append(f"{confidence} {c['found']}/{total}" + (f" = {c['found'] / total:.2f}" if total else ""))
    return "recall by label confidence: " + ", ".join(parts)


def table(rows: Dict[str, collections.Counter], codes: set, projects: int) -> str:
    """Per rule: findings judged correct / fp / unjudged, blind pitfalls found / missed; totals over rules that exist."""
    lines = [
        f"{projects} projects; warning/error findings only (AMP001 counted once per file); recall on blind pitfalls",
        "| rule | findings | correct | fp | unjudged | precision | blind found | blind missed | recall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    total: collections.Counter = collections.Counter()
    uncovered: collections.Counter = collections.Counter()
    for code in sorted(rows):
        r = rows[code]
        if code not in codes:
            uncovered[code] += r["missed"]
            continue
        total.update(r)
        lines.append(_row(code, r))
    lines.append(_row("**total**", total))
    if uncovered:
        lines.append("blind pitfalls in categories with no rule yet: "
                     + ", ".join(f"{c} {n}" for c, n in sorted(uncovered.items())))
    return "\n".join(lines)


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.2f}" if b else "-"


def _row(name: str, r: collections.Counter) -> str:
    judged = r["correct"] + r["fp"]
    return (f"| {name} | {r['findings']} | {r['correct']} | {r['fp']} | {r['unjudged']} | {_ratio(r['correct'], judged)} "
            f"| {r['found']} | {r['missed']} | {_ratio(r['found'], r['found'] + r['missed'])} |")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="export the pinned commits and lint them")
    p_run.add_argument("--mirrors", required=True, help="folder of bare git mirrors (owner+name/repo or owner+name.git)")
    p_run.add_argument("--split", type=split_arg, default="tuning")
    p_run.add_argument("--projects", default="", help="comma-separated owner+name keys (default: the whole split)")
    p_run.add_argument("--jobs", type=int, default=2)
    p_score = sub.add_parser("score", help="per-rule precision and recall against the labels")
    p_score.add_argument("--split", type=split_arg, default="tuning")
    p_score.add_argument("--show", action="store_true", help="list unjudged findings and missed pitfalls")
    p_score.add_argument("--template", metavar="PATH", help="write the unjudged findings as adjudication entries")
    p_score.add_argument("--check", action="store_true", help="exit 1 when a finding is unjudged")
    p_adj = sub.add_parser("adjudicate", help="merge an adjudicator's verdicts into the label files")
    p_adj.add_argument("findings", help="[{project, code, file, row, verdict: correct|fp, reason, same_bug_as?}]")
    p_adj.add_argument("reviews", nargs="?", help="[{project, cat, file, line, verdict: pitfall|not-a-pitfall, reason}]")
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args)
        return 0
    if args.command == "adjudicate":
        adjudicate(args)
        return 0
    return score(args)


def adjudicate(args: argparse.Namespace) -> None:
    """Keep each judged entry (an empty verdict is skipped) in its project's label file, marked
    `by: adjudicated`; a later verdict on the same finding or label replaces the earlier one."""
    merge_verdicts(json.loads(Path(args.findings).read_text(encoding="utf-8")), "adjudicated",
                   lambda x: (x["code"], x["file"], int(x["row"])), ("code", "file", "row", "verdict", "reason", "same_bug_as"))
    if args.reviews:
        merge_verdicts(json.loads(Path(args.reviews).read_text(encoding="utf-8")), "label_reviews",
                       lambda x: (x["cat"], x["file"], int(x["line"])), ("cat", "file", "line", "verdict", "reason"))


def merge_verdicts(entries: List[dict], key: str, ident, fields: Sequence[str], labels_dir: Path = LABELS_DIR) -> None:
    by_project: Dict[str, List[dict]] = collections.defaultdict(list)
    for e in entries:
        if e.get("verdict"):
            by_project[e["project"]].append(e)
    for project, judged in sorted(by_project.items()):
        path = labels_dir / f"{project}.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        kept = data.setdefault(key, [])
        where = {ident(x): i for i, x in enumerate(kept)}
        for e in judged:
            entry = {f: e[f] for f in fields if f in e}
            entry["by"] = "adjudicated"
            if ident(entry) in where:
                kept[where[ident(entry)]] = entry
            else:
                where[ident(entry)] = len(kept)
                kept.append(entry)
        path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{project}: {len(judged)} {key}")


if __name__ == "__main__":
    sys.exit(main())
