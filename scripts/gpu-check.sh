#!/usr/bin/env bash
# The verifier's CUDA checks in one go, for a GPU box (whole run: under 15 minutes).
#
#   scripts/gpu-check.sh            # from anywhere; uses .venv/bin/python when present
#
# 1. the CUDA-marked verifier tests (every experiment on cuda, the direct AMP303 ban, cuda:N);
# 2. `amplint --verify --device cuda fixtures/` inside the verifier's sandbox (bubblewrap with the
#    /dev/nvidia* devices bound in), then checks that the sandbox was on, that no verdict is `error`
#    and that every verdict ran on a CUDA device;
# 3. the same over the drill's real training code (benchmarks/drill.py's packages), when the corpus
#    is already unpacked under $AMPLINT_CORPUS_DIR (default ~/.cache/amplint-corpus; a GPU box
#    without network cannot fetch it): the verdict table per code, no `error`, all on CUDA.
# 4. a CUDA fp16 training (autocast + GradScaler("cuda"), overflowing from step 10) under `amplint run`:
#    checks the header names the GPU, the scale collapses (AMP701 naming `inp`), the incident replays
#    on CUDA, and `benchmarks/watch_overhead.py --device cuda` prints the guard's overhead.
# 5. the scale rules' CUDA-only claims (issue 23; docs/evidence.md states them from source):
#    scripts/gpu_scale_checks.py runs DeepSpeed fp16 engines (AMP805 ZeRO-2 grads, AMP806 direct backward,
#    AMP807 static loss scale) and TransformerEngine fp8_autocast (AMP811/AMP812), each skipped when the
#    package is missing; then the 2-process gloo measurements of AMP801-803 (the CPU ones) once more.
# Exit status 0 only when every part that ran passes.
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
OUTDIR="${OUT:-$(mktemp -d)}"
mkdir -p "$OUTDIR"
status=0
started=$SECONDS

echo "== environment"
command -v nvidia-smi >/dev/null && nvidia-smi -L
if ! "$PY" - <<'PY'
import torch
assert torch.cuda.is_available(), f"torch {torch.__version__} sees no CUDA device"
i = torch.cuda.current_device()
print("torch", torch.__version__, "|", torch.cuda.get_device_name(i), "| capability", torch.cuda.get_device_capability(i))
PY
then
    echo "gpu-check: FAIL (no usable CUDA device)"
    exit 2
fi

echo "== 1/5 CUDA verifier tests"
if AMPLINT_REQUIRE_CUDA=1 timeout 330 "$PY" -m pytest -q -p no:cacheprovider -m cuda -rs tests/test_verify.py; then
    echo "CUDA tests: ok"
else
    echo "CUDA tests: FAIL"
    status=1
fi

# verify PATH... on CUDA in the sandbox; prints the verdict table; returns non-zero on any failure
verify_on_cuda() {
    local name="$1" limit="$2"; shift 2
    timeout "$limit" "$PY" -m amplint.cli --verify --device "${GPU_CHECK_DEVICE:-cuda}" --verify-timeout 60 --verify-budget $((limit - 40)) \
        --no-cache --output-format json "$@" >"$OUTDIR/verify-$name.json" 2>"$OUTDIR/verify-$name.err"
    local rc=$?
    if [ "$rc" -gt 1 ]; then
        echo "amplint exited $rc:"
        tail -20 "$OUTDIR/verify-$name.err"
        return 1
    fi
    if ! grep -q "verify sandbox: bubblewrap" "$OUTDIR/verify-$name.err"; then
        echo "the sandbox was not on:"
        grep "verify sandbox" "$OUTDIR/verify-$name.err"
        return 1
    fi
    grep "verify sandbox" "$OUTDIR/verify-$name.err"
    "$PY" - "$OUTDIR/verify-$name.json" <<'PY'
import collections, json, sys
findings = json.load(open(sys.argv[1]))
verified = [f for f in findings if f.get("verification")]
table = collections.Counter((f["code"], f["verification"]["verdict"], f["verification"].get("method")) for f in verified)
for (code, verdict, method), n in sorted(table.items()):
    print(f"  {code:7} {verdict:15} {method or '':10} {n}")
bad = [f for f in verified if f["verification"]["verdict"] == "error"]
# AMP803's verdicts run on 2 gloo ranks on the CPU by design (docs/verifier.md) and say so
ranks = lambda f: f["code"] == "AMP803" and (f["verification"].get("evidence") or {}).get("backend") == "gloo"
cpu = [f for f in verified if not str(f["verification"].get("device") or "").startswith("cuda")
       and f["verification"]["verdict"] != "inconclusive" and not ranks(f)]
for f in bad + cpu:
    v = f["verification"]
    print(f"  {f['filename']}:{f['location']['row']} {f['code']} {v['verdict']} {v.get('reason')} on {v.get('device')}")
print(f"{len(findings)} findings, {len(verified)} verified, {len(bad)} errors, {len(cpu)} not on CUDA")
sys.exit(1 if bad or cpu or not verified else 0)
PY
}

echo "== 2/5 amplint --verify --device cuda fixtures/ (sandboxed)"
if [ ! -d fixtures ]; then
    echo "gpu-check: fixtures/ not found"
    status=1
elif ! verify_on_cuda fixtures 240 fixtures/; then
    status=1
fi

echo "== 3/5 the drill's real findings on CUDA (sandboxed)"
CORPUS="${AMPLINT_CORPUS_DIR:-$HOME/.cache/amplint-corpus}"
mapfile -t DRILL < <("$PY" - "$CORPUS" <<'PY'
import sys, pathlib
sys.path.insert(0, "benchmarks")
from corpus import DRILL_PACKAGES
root = pathlib.Path(sys.argv[1])
for name, version in DRILL_PACKAGES.items():
    folder = root / f"{name}-{version}"
    if (folder / ".unpacked").exists():
        print(folder)
PY
)
if [ "${#DRILL[@]}" -eq 0 ]; then
    echo "skipped: no unpacked drill corpus under $CORPUS (fetch it with benchmarks/drill.py where there is network)"
elif ! verify_on_cuda drill 300 "${DRILL[@]}"; then
    status=1
fi

echo "== 4/5 CUDA fp16 training under amplint run"
sed -e 's/"cpu"/"cuda"/g' -e 's/Net()/Net().cuda()/' -e 's/^    x = torch.randn(32, 16, generator=gen)/    x = torch.randn(32, 16, generator=gen).cuda()/' \
    tests/data/watch/train_cpu.py >"$OUTDIR/train_cuda.py"
if timeout 240 "$PY" -m amplint._start run --report "$OUTDIR/run" -- "$OUTDIR/train_cuda.py" forward_overflow 30 \
        >"$OUTDIR/run.out" 2>"$OUTDIR/run.err" \
   && "$PY" - "$OUTDIR/run/events.jsonl" <<'PY'
import json, sys
evs = [json.loads(l) for l in open(sys.argv[1])]
head, steps = evs[0], [e for e in evs if e["type"] == "step"]
codes = [e["code"] for e in evs if e["type"] == "finding"]
print("  ", head["device"], "capability", head["capability"], "| steps", len(steps), "skipped", sum(s["skipped"] for s in steps), "| findings", codes)
assert head["cuda"] and head["capability"] and head["autocast_dtype"] == "float16", head
assert codes == ["AMP701"] and len(steps) == 30 and [s["step"] for s in steps if s["skipped"]] == list(range(11, 31))
assert any(e["type"] == "nonfinite" and e["module"] == "inp" for e in evs)
PY
then
    echo "amplint run on CUDA: ok"
    timeout 120 "$PY" -m amplint._start replay --device cuda "$OUTDIR"/run/incidents/step12.pt; [ $? -eq 1 ] || status=1
    timeout 180 "$PY" benchmarks/watch_overhead.py --device cuda --rounds 3 --steps 200 || status=1
else
    echo "amplint run on CUDA: FAIL"; tail -20 "$OUTDIR/run.err"
    status=1
fi

echo "== 5/5 the scale rules' CUDA-only claims (DeepSpeed, TransformerEngine) and the 2-process measurements"
if timeout 300 "$PY" scripts/gpu_scale_checks.py; then
    echo "scale claims: ok (skips are listed above)"
else
    echo "scale claims: FAIL"
    status=1
fi
if timeout 180 "$PY" -m pytest -q -p no:cacheprovider tests/test_scale_evidence.py tests/test_watch_ranks.py; then
    echo "2-process measurements: ok"
else
    echo "2-process measurements: FAIL"
    status=1
fi

echo "gpu-check: $([ $status -eq 0 ] && echo ok || echo FAIL) in $((SECONDS - started)) s (outputs in $OUTDIR)"
exit $status
