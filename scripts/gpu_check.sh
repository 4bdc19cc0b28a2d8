#!/usr/bin/env bash
# Every GPU check and benchmark of the project in one command, in under 10 minutes on one CUDA GPU:
#   bash scripts/gpu_check.sh [RESULTS_DIR]        (default: gpu_check_results/<UTC time>)
#
#  1. gpu_tests        pytest -m gpu (CUDA loader, profile with CUDA events, interleaved options; the
#                      out-of-memory retry runs as check 2)
#  2. oom_retry        a CUDA out-of-memory error provoked on purpose in a smoke sweep: retried with half the batch
#  3. lite0_finetune   lite0_finetune (ImageNet EfficientNet-Lite0) fine-tuned end to end on the ELPV cells at
#                      224 px on CUDA (elpv_paper protocol, up to 30 epochs, one seed): its test accuracy and times
#  4. profile_resnet50 resomap profile resnet50 @ 224 on CUDA
#  5. bench_resnet50   resomap bench resnet50 @ 224: every --compare-opts option, --batch-sizes 1 8 32 64
#  6. devices_small    resomap bench tiny_cnn @ 64, --devices cpu,cuda at batch 1..256: where the GPU pays off
#  7. devices_large    resomap bench resnet50 @ 224, --devices cpu,cuda at batch 1, 4, 16
#  8. presets          gpu_optimized preset against the default, short resnet18 fits at 64 px through the real
#                      data path (each fit compiles: 128 px did not fit the time on an H200)
#  9. trainer_vs_bare  the Trainer against a bare loop on CUDA (target >= 0.97)
# 10. data_path        one epoch from the uint8 cache with augmentation / in-memory tensors on CUDA (<= 1.05)
#
# GPU_CHECKS="name ..." runs only the named checks and adds their rows to RESULTS_DIR's table (a run split over
# several calls on one machine); GPU_CHECK_SECONDS (default 580) is the time the whole run may take.
#
# Writes RESULTS_DIR/gpu_check.json and RESULTS_DIR/gpu_check.md (one row per check: status, seconds, the target
# and result lines it printed, the batch size where the GPU starts to pay off) and each check's log; exits 1
# when a check fails (a non-zero exit, or it ran out of its time), 0 otherwise. A missed benchmark target is
# shown as MISS in the table but is not a failure. Without a CUDA GPU it says so in one line and exits 0.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    echo "gpu_check: no CUDA GPU visible (torch.cuda.is_available() is False); nothing to check"
    exit 0
fi

OUT=${1:-gpu_check_results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
TSV="$OUT/checks.tsv"
[ -n "${GPU_CHECKS:-}" ] || : >"$TSV"
DEADLINE=$((SECONDS + ${GPU_CHECK_SECONDS:-580})) # the whole run stays under 10 minutes
# the tracking store the product defaults to (sqlite); MLflow 3 refuses a file store unless told to allow it, which
# a machine without sqlalchemy needs
if "$PY" -c 'import sqlalchemy, alembic' >/dev/null 2>&1; then
    export MLFLOW_TRACKING_URI="sqlite:///$(cd "$OUT" && pwd)/mlflow.db"
else
    export MLFLOW_TRACKING_URI="file://$(cd "$OUT" && pwd)/mlruns" MLFLOW_ALLOW_FILE_STORE=true
fi

wanted() { [ -z "${GPU_CHECKS:-}" ] || [[ " $GPU_CHECKS " == *" $1 "* ]]; }

check() { # check NAME BUDGET_SECONDS COMMAND...
    local name=$1 budget=$2
    shift 2
    wanted "$name" || return 0
    local left=$((DEADLINE - SECONDS))
    [ "$budget" -gt "$left" ] && budget=$left
    if [ "$budget" -lt 15 ]; then
        printf '%s\t%s\t%s\t%s\n' "$name" "time" 0 "$OUT/$name.log" >>"$TSV"
        echo "gpu_check: $name skipped (out of time)" | tee "$OUT/$name.log"
        return
    fi
    echo "gpu_check: $name (up to ${budget}s)"
    local start=$SECONDS rc
    timeout --kill-after=10 "$budget" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" $((SECONDS - start)) "$OUT/$name.log" >>"$TSV"
    tail -n 3 "$OUT/$name.log" | sed "s/^/  /"
}

RESOMAP=("$PY" -m resomap.cli)
check gpu_tests 150 "$PY" -m pytest -q -x -m gpu tests -k "not out_of_memory" -p no:cacheprovider
check oom_retry 90 "$PY" -m pytest -q -x -m gpu tests/test_gpu_perf.py -k out_of_memory -p no:cacheprovider
check lite0_finetune 200 "${RESOMAP[@]}" sweep --preset elpv_paper 'sweep.models=[lite0_finetune]' \
    'sweep.resolutions=[224]' 'sweep.seeds=[42]' 'sweep.include=[]' training.epochs=30 \
    experiment.name=gpu-lite0-finetune system.device=cuda "experiment.output_dir=$OUT/lite0_finetune"
wanted lite0_finetune && "$PY" - "$OUT/lite0_finetune" "$TSV" <<'EOF' | tee -a "$OUT/lite0_finetune.log"
"""The fine-tuning check's test accuracy and times (its trial's result.json, checks.tsv), one line in its log."""
import json
import sys
from pathlib import Path

nan = float("nan")
found = sorted(Path(sys.argv[1]).glob("model_summaries/*/lite0_finetune/224/seed42/result.json"))
rows = [line.split("\t") for line in Path(sys.argv[2]).read_text().splitlines()]
wall = next((row[2] for row in rows if row[0] == "lite0_finetune"), "?")
if not found:
    print(f"lite0_finetune@224 on cuda: no result.json after {wall} s (see its log above)")
    sys.exit(0)
r = json.loads(found[0].read_text())
test, prof = r.get("test") or {}, r.get("profile") or {}
print(
    f"lite0_finetune@224 on cuda: test accuracy {test.get('test/accuracy', nan):.3f}, macro-F1 "
    f"{test.get('test/macro_f1', nan):.3f} ({r.get('status')}); {r.get('epochs_run')} epochs trained in "
    f"{r.get('train_time_s') or nan:.1f} s, the sweep {wall} s; profile: training "
    f"{prof.get('throughput_train_ips') or nan:.0f} img/s, inference "
    f"{prof.get('throughput_inference_ips') or nan:.0f} img/s"
)
EOF
check profile_resnet50 45 "${RESOMAP[@]}" profile --model resnet50 --resolution 224 --device cuda \
    --output-dir "$OUT/profile_resnet50"
check bench_resnet50 150 "${RESOMAP[@]}" bench --model resnet50 --resolution 224 --compare-opts \
    --batch-sizes 1 8 32 64 --devices cuda --iters 20 --warmup 3 --output-dir "$OUT/bench_resnet50"
check devices_small 45 "${RESOMAP[@]}" bench --model tiny_cnn --resolution 64 --num-classes 10 \
    --batch-sizes 1 4 16 64 256 --devices cpu,cuda --iters 10 --warmup 2 --output-dir "$OUT/devices_small"
check devices_large 75 "${RESOMAP[@]}" bench --model resnet50 --resolution 224 --batch-sizes 1 4 16 \
    --devices cpu,cuda --iters 5 --warmup 1 --output-dir "$OUT/devices_large"
check presets 150 "$PY" scripts/benchmark_presets.py --preset gpu_optimized --device cuda --models resnet18 \
    --resolutions 64 --rounds 2 --epochs 1 --json "$OUT/presets.json"
check trainer_vs_bare 90 "$PY" scripts/benchmark_trainer.py --device cuda --models tiny_cnn resnet18 \
    --images 2048 --batch-size 64 --rounds 5 --json "$OUT/trainer_vs_bare.json"
check data_path 60 "$PY" scripts/benchmark_data.py --device cuda --model resnet18 --resolution 128 \
    --json "$OUT/data_path.json"

"$PY" - "$OUT" <<'EOF'
"""gpu_check.json and gpu_check.md from checks.tsv, the logs and the benchmark JSON files."""
import json
import re
import sys
from pathlib import Path

out = Path(sys.argv[1])
rows = []
for line in (out / "checks.tsv").read_text().splitlines():
    name, rc, seconds, log = line.split("\t")
    text = Path(log).read_text(errors="replace") if Path(log).exists() else ""
    found = r"\b(PASS|MISS|FAILED)\b|passed|failed|ratio|test accuracy"
    keep = [ln.strip() for ln in text.splitlines() if re.search(found, ln)]
    keep = list(dict.fromkeys(keep))  # the scripts repeat their result lines in a closing block
    row = {"check": name, "status": "ok" if rc == "0" else ("out of time" if rc in ("time", "124", "137") else
           f"failed (exit {rc})"), "seconds": int(seconds), "log": log, "lines": keep[-6:]}
    bench = out / name / "benchmark.json"
    if bench.exists():
        data = json.loads(bench.read_text())
        ratios = [e for e in data["entries"] if e["section"] == "devices" and e["status"] == "ok"]
        pays = [e["batch_size"] for e in ratios if e["ratios"].get("infer_x", 0) > 1]
        if ratios:
            row["gpu_pays_off_from_batch"] = min(pays) if pays else None
            row["lines"].append("cuda/cpu inference x by batch: " + ", ".join(
                f"{e['batch_size']}: {e['ratios'].get('infer_x', float('nan')):.2f}" for e in ratios))
        noisy = [f"{e['option']}@{e['batch_size']}" for e in data["entries"] if e.get("noisy")]
        if noisy:
            row["lines"].append("noisy: " + ", ".join(noisy))
        broken = [f"{e['device']} {e['option']}@{e['batch_size']}: {e['reason']}" for e in data["entries"]
                  if e["status"] == "failed"]
        if broken and row["status"] == "ok":  # an option that raised (not skipped, not out of memory) fails it
            row["status"] = "failed (options)"
            row["lines"] += broken
    rows.append(row)
failed = [r["check"] for r in rows if r["status"] != "ok"]
(out / "gpu_check.json").write_text(json.dumps({"checks": rows, "failed": failed}, indent=2) + "\n")
md = ["| check | status | seconds | GPU pays off from batch | results |", "|---|---|---|---|---|"]
for r in rows:
    cell = "<br>".join(x.replace("|", "/") for x in r["lines"]) or "-"
    pays = r.get("gpu_pays_off_from_batch", "-")
    md.append(f"| {r['check']} | {r['status']} | {r['seconds']} | {'-' if pays is None else pays} | {cell} |")
(out / "gpu_check.md").write_text("\n".join(md) + "\n")
print("\n".join(md))
print(f"gpu_check: {len(rows) - len(failed)} of {len(rows)} checks ok; wrote {out}/gpu_check.json and gpu_check.md")
sys.exit(1 if failed else 0)
EOF
