#!/usr/bin/env bash
# The suite's GPU benchmark on any machine with a GPU (docs/gpu.md): Table 2 and full-size ListOps,
# each part under its own time budget, results and a summary in OUT_DIR; a rerun skips the parts
# that finished and resumes the others.
#
#   benchmarks/gpu_benchmark.sh OUT_DIR [flags]        # from any folder; the repository's own
#
#   --wheels DIR           first install requirements.txt offline from a folder of wheels
#                          (pip install --no-index --find-links DIR -r requirements.txt), then
#                          jax[cuda13] at the installed JAX's version where DIR holds its wheels
#   --table2-models LIST   Table 2's models, comma-separated (default: the Transformer, its
#                          baseline, first, then Luna-16, the fused Transformer, S4D, S5, Mega-chunk)
#   --lengths LIST         Table 2's lengths (default 1K,2K,4K), batch 32, bfloat16 and float32
#   --table2-budget S      seconds for each dtype's Table 2 (default 1800)
#   --listops-models LIST  full-size ListOps (LRA protocol, 5000 steps) for these models
#                          (default luna16,transformer), one seed each
#   --seed N               the ListOps seed (default 0)
#   --listops-budget S     seconds for each model's ListOps run (default 3600); 0 skips the part
#   --cpu-dry-run          every part at tiny sizes on the CPU, in minutes (what the tests run)
#
# OUT_DIR gets: benchmark.log (every run's output), env.txt (versions, devices), summary.md,
# table2/<dtype>/ (table2.md, profile.json; per model in table2/<dtype>/<model>/) and
# listops/<model>/seed<N>/ (run folders: results.json, metrics.jsonl, checkpoints), and
# status/<part>.txt, one line a part: a part whose line starts with "done" is skipped by a rerun,
# a part stopped by its budget goes on from its checkpoint. ListOps data: $LRA_DATA_DIR (else
# the suite's data root); a set not there is generated in the background while Table 2 runs.
set -u -o pipefail

usage() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }
fail() { echo "error: $*" >&2; exit 2; }

OUT='' WHEELS='' DRY_RUN=0 SEED=0 BUDGET_A=1800 BUDGET_B=3600 LENGTHS=1K,2K,4K
TABLE2_MODELS=transformer,luna16,transformer_fused,s4d,s5,mega_chunk
LISTOPS_MODELS=luna16,transformer
while (( $# )); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --cpu-dry-run) DRY_RUN=1; shift; continue ;;
    --wheels|--table2-models|--lengths|--table2-budget|--listops-models|--seed|--listops-budget)
      (( $# >= 2 )) || fail "$1 needs a value (benchmarks/gpu_benchmark.sh --help)."
      case "$1" in
        --wheels) WHEELS=$2 ;; --table2-models) TABLE2_MODELS=$2 ;; --lengths) LENGTHS=$2 ;;
        --table2-budget) BUDGET_A=$2 ;; --listops-models) LISTOPS_MODELS=$2 ;;
        --seed) SEED=$2 ;; --listops-budget) BUDGET_B=$2 ;;
      esac
      shift 2; continue ;;
    -*) fail "unknown flag '$1' (benchmarks/gpu_benchmark.sh --help lists the flags)." ;;
    *) [[ -z "$OUT" ]] || fail "one OUT_DIR only: '$OUT' and '$1'."; OUT=$1; shift ;;
  esac
done
[[ -n "$OUT" ]] || fail "give the output folder: benchmarks/gpu_benchmark.sh OUT_DIR [flags]."
for pair in "--table2-budget:$BUDGET_A" "--listops-budget:$BUDGET_B" "--seed:$SEED"; do
  [[ "${pair#*:}" =~ ^[0-9]+$ ]] \
    || fail "${pair%%:*} '${pair#*:}' is no whole number; e.g. ${pair%%:*} 600."
done
[[ -z "$WHEELS" || -d "$WHEELS" ]] || fail "--wheels $WHEELS is no folder of wheels."

REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT/status" || fail "cannot create $OUT."
OUT=$(cd "$OUT" && pwd)
cd "$REPO" || exit 2
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/benchmark.log") 2>&1
echo "gpu_benchmark: $(date -u +%FT%TZ) in $OUT$( (( DRY_RUN )) && echo ', CPU dry run')"

# ---------------------------------------------------------------------------------------------
# Setup: the wheels (offline), then what the parts import, and a GPU.
# ---------------------------------------------------------------------------------------------
if [[ -n "$WHEELS" ]]; then
  PIP=("$PY" -m pip install --no-index --find-links "$WHEELS")
  (( DRY_RUN )) && PIP+=(--dry-run)  # resolved against the folder, nothing installed
  echo "setup: ${PIP[*]} -r requirements.txt"
  "${PIP[@]}" -r requirements.txt || fail "the wheels in $WHEELS do not install (above)."
  JAX_VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("jax"))')
  if compgen -G "$WHEELS/jax_cuda13_plugin-*.whl" >/dev/null; then
    "${PIP[@]}" "jax[cuda13]==$JAX_VERSION" || fail "jax[cuda13]==$JAX_VERSION does not install."
  else
    echo "setup: no jax_cuda13_plugin wheel in $WHEELS: JAX's GPU support is left as it is."
  fi
fi
(( DRY_RUN )) && export JAX_PLATFORMS=cpu
"$PY" - "$DRY_RUN" > "$OUT/env.txt" 2>&1 <<'EOF'
import importlib, platform, subprocess, sys
print('python', sys.version.split()[0], platform.machine())
for name in ('jax', 'jaxlib', 'flax', 'optax', 'orbax.checkpoint', 'ml_collections', 'grain'):
  try:
    print(name, getattr(importlib.import_module(name), '__version__', '?'))
  except ImportError as e:
    print(name, 'MISSING:', e)
commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True)
print('commit', commit.stdout.strip() or 'unknown (no git)')
import jax
import lra_luna.profile, lra_luna.training.train  # what the parts run
print('devices', jax.devices())
if sys.argv[1] == '0' and jax.default_backend() != 'gpu':
  print(f'NO GPU: JAX sees {jax.default_backend()} devices only; install jax[cuda13] '
        '(docs/gpu.md), or give --cpu-dry-run')
EOF
status=$?
cat "$OUT/env.txt"
if (( status )) || grep -q 'MISSING\|NO GPU' "$OUT/env.txt"; then
  echo "error: the environment is not ready (env.txt above); nothing was run." >&2
  exit 1
fi

# ---------------------------------------------------------------------------------------------
# Each part: its status line in status/<part>.txt; `done` ones are skipped by a rerun.
# ---------------------------------------------------------------------------------------------
finished() { grep -qs '^done' "$OUT/status/$1.txt"; }

# bounded PART SECONDS COMMAND...: COMMAND under `timeout`, its budget said first, its end in
# status/PART.txt (a part stopped by its budget is kept, and resumed by a rerun).
bounded() {
  local part=$1 seconds=$2; shift 2
  if (( seconds < 10 )); then
    echo "skipped: a budget of ${seconds} s" | tee "$OUT/status/$part.txt"
    return 0
  fi
  echo "== $part: budget ${seconds} s: $*"
  local t0 rc took; t0=$(date +%s)
  timeout --signal=TERM --kill-after=60 "$seconds" "$@"
  rc=$?
  took=$(( $(date +%s) - t0 ))
  case $rc in
    0) echo "done in ${took} s" ;;
    124|137|143) echo "stopped by its budget after ${took} s (exit $rc); a rerun goes on" ;;
    *) echo "FAILED (exit $rc) after ${took} s; see benchmark.log" ;;
  esac | tee "$OUT/status/$part.txt"
}

# ListOps data: generated on the CPU in the background while Table 2 keeps the GPU busy.
if (( DRY_RUN )); then  # the quick set, as configs/listops.py:quick generates it
  export LRA_DATA_DIR=${LRA_DATA_DIR:-$OUT/data}
  DATA=(--out_dir "$LRA_DATA_DIR/listops-quick" --num_train 10000 --num_val 500 --num_test 500
        --min_length 4 --max_length 60 --max_depth 3 --max_args 5)
  SET=listops-quick WORDS=,quick TRAIN=(--config.num_train_steps=6 --config.eval_every=6
                                         --config.checkpoint_every=6 --config.log_every=2)
else
  DATA=() SET=listops-generated WORDS='' TRAIN=(--config.log_every=100)
fi
ROOT=$("$PY" -c 'from lra_luna.datasets import base; print(base.data_root())')
GEN_PID=''
if (( BUDGET_B >= 10 )) && [[ ! -f "$ROOT/$SET/generated.json" ]]; then
  nice -n 10 timeout "$BUDGET_B" "$PY" data/generate_listops.py --no_progress "${DATA[@]}" \
      > "$OUT/generate_listops.log" 2>&1 &
  GEN_PID=$!
  echo "ListOps data: generating $ROOT/$SET in the background (log $OUT/generate_listops.log)"
fi

# ---------------------------------------------------------------------------------------------
# a. Table 2: one profile per model and dtype (a model that finished is not measured again),
#    merged into table2/<dtype>/ after each.
# ---------------------------------------------------------------------------------------------
if (( DRY_RUN )); then  # every model lowered at a tiny size: names and dtypes checked, no timing
  PROFILE=(--lengths 64 --batch_size 2 --flops_only)
else
  PROFILE=(--lengths "$LENGTHS" --batch_size 32 --repeats 5 --warmup 1)
fi
IFS=, read -r -a table2_models <<< "$TABLE2_MODELS"
for dtype in bfloat16 float32; do
  start=$(date +%s)
  for model in "${table2_models[@]}"; do
    part=a_${dtype}_$model
    finished "$part" && { echo "$part: done in an earlier run"; continue; }
    left=$(( BUDGET_A - ($(date +%s) - start) ))
    (( left < 0 )) && left=0  # the budget spent (or a clock second passed with a budget of 0)
    bounded "$part" "$left" "$PY" -m lra_luna.profile --models "$model" "${PROFILE[@]}" \
        --dtype "$dtype" --out_dir "$OUT/table2/$dtype/$model"
    [[ -f "$OUT/table2/$dtype/$model/profile.json" ]] || continue
    "$PY" - "$OUT/table2/$dtype" "$TABLE2_MODELS" <<'EOF'
import json, pathlib, sys
from lra_luna.profile import sweep
out, results = pathlib.Path(sys.argv[1]), None
for model in sys.argv[2].split(','):
  path = out / model / 'profile.json'
  if path.is_file():
    part = json.loads(path.read_text())
    results = results or {**part, 'models': [], 'points': []}
    results['models'] += part['models']
    results['points'] += part['points']
if results:
  sweep.write_outputs(results, out)
EOF
  done
done

# ---------------------------------------------------------------------------------------------
# b. Full-size ListOps under the LRA protocol, one seed a model; a rerun resumes each run.
# ---------------------------------------------------------------------------------------------
if [[ -n "$GEN_PID" ]]; then
  echo "b. waiting for the ListOps data"
  wait "$GEN_PID" || echo "b. the generator stopped (exit $?; $(tail -1 "$OUT/generate_listops.log")):" \
                          "run_lra.py reads or generates the data itself"
fi
IFS=, read -r -a listops_models <<< "$LISTOPS_MODELS"
for model in "${listops_models[@]}"; do
  part=b_${model}_seed$SEED
  finished "$part" && { echo "$part: done in an earlier run"; continue; }
  bounded "$part" "$BUDGET_B" "$PY" run_lra.py --config "configs/listops.py:$model$WORDS" \
      --workdir "$OUT/listops/$model/seed$SEED" --config.seed="$SEED" "${TRAIN[@]}"
done

# ---------------------------------------------------------------------------------------------
# The summary of every part so far (this run's and earlier ones').
# ---------------------------------------------------------------------------------------------
"$PY" - "$OUT" "$TABLE2_MODELS" "$LISTOPS_MODELS" "$SEED" > "$OUT/summary.md" <<'EOF'
import json, pathlib, statistics, sys
out, table2_models, listops_models, seed = pathlib.Path(sys.argv[1]), *sys.argv[2:]
status = lambda part: ((out / 'status' / f'{part}.txt').read_text().strip()
                       if (out / 'status' / f'{part}.txt').is_file() else 'not run')
env = (out / 'env.txt').read_text().strip().splitlines()
print('# GPU benchmark\n\n' + '\n'.join(f'    {line}' for line in env) + '\n')
for dtype in ('bfloat16', 'float32'):
  print(f'## Table 2, {dtype}\n')
  print('\n'.join(f'- {m}: {status(f"a_{dtype}_{m}")}' for m in table2_models.split(',')) + '\n')
  table = out / 'table2' / dtype / 'table2.md'
  print(table.read_text().strip() + '\n' if table.is_file() else '')
print(f'## Full-size ListOps, LRA protocol, seed {seed}\n')
for model in listops_models.split(','):
  workdir = out / 'listops' / model / f'seed{seed}'
  lines = [json.loads(l) for l in (workdir / 'metrics.jsonl').read_text().splitlines()
           if l.strip()] if (workdir / 'metrics.jsonl').is_file() else []
  speeds = [l['steps_per_s'] for l in lines if 'steps_per_s' in l]
  speed = (f', median {statistics.median(speeds[1:] or speeds):.2f} steps/s over '
           f'{max(l["step"] for l in lines)} steps logged' if speeds else '')
  results = workdir / 'results.json'
  test = (f', test accuracy {json.loads(results.read_text()).get("test_accuracy")}'
          if results.is_file() else '')
  print(f'- {model}: {status(f"b_{model}_seed{seed}")}{speed}{test}')
EOF
echo "gpu_benchmark: finished $(date -u +%FT%TZ); $OUT/summary.md:"
cat "$OUT/summary.md"
