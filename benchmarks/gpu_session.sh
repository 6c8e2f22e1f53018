#!/usr/bin/env bash
# One GPU session in one call (docs/gpu.md, "One session on a lent GPU"): installs the wheels
# carried in .whl/, then, each part under its own `timeout` and writing its results under $OUT as
# it goes:
#   a. Table 2: the profiler for the Transformer (its baseline), Luna-16, the fused Transformer,
#      S4D, S5 and Mega-chunk at 1K, 2K and 4K, batch 32, bfloat16 then float32 (a point
#      compiles in 15-27 s on an H200, so about 6 points fit 170 s: the rows come in that order);
#   b. full-size ListOps (LRA protocol, 5000 steps) for B_MODELS (default "luna16 transformer"),
#      seed SEED (default 0), the budget shared equally, as many steps as it allows, with their
#      time per step (Luna-16 alone needs about 290 s for all 5000 steps and its test);
#   c. the mid groups a CPU cannot afford, with the time left: C_GROUPS (default
#      "listops.py:transformer", docs/mid.md), five seeds vmapped, C_STEPS (25600) steps, into
#      C_DIR (runs/mid_gpu); a C_DIR carried from an earlier session (carry: ["runs/mid_gpu"])
#      resumes, and c_mid_checkpoints.tgz brings its checkpoints back.
#
#   benchmarks/gpu_session.sh                  # on the GPU machine, from the repository root
#   benchmarks/gpu_session.sh --cpu-dry-run    # here: tiny sizes, 3 to 4 minutes
#   benchmarks/gpu_session.sh --check-size     # what would travel, against the 64 MiB limit
#
# Budgets in seconds (environment): BUDGET_S (540, the whole), BUDGET_A (340), BUDGET_B (0: part
# b's speeds and Luna-16's seed 0 were measured on an H200; docs/gpu.md);
# part c gets what is left of BUDGET_S, at most BUDGET_C where set (dry run: 420, 200, 180, and
# c at most 150: the dry run trains the quick Transformer 6 steps). OUT (the device tool's; default
# runs/gpu_session) gets at most 8 files, each part one archive: session.log, env.txt,
# summary.md, a_table2.tgz, b_listops.tgz, c_mid.tgz (and c_mid_checkpoints.tgz). PYTHON (default
# python3) runs the suite.
set -u -o pipefail

DRY_RUN=${DRY_RUN:-0}
CHECK_SIZE=0
for arg in "$@"; do
  case "$arg" in
    --cpu-dry-run) DRY_RUN=1 ;;
    --check-size) CHECK_SIZE=1 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) echo "error: unknown argument '$arg'; give --cpu-dry-run, --check-size or nothing" \
         "(benchmarks/gpu_session.sh --help)." >&2; exit 2 ;;
  esac
done

for name in BUDGET_S BUDGET_A BUDGET_B BUDGET_C; do
  value=${!name:-}
  if [[ -n "$value" && ! "$value" =~ ^[0-9]+$ ]]; then
    echo "error: $name='$value' is no whole number of seconds; e.g. $name=240." >&2
    exit 2
  fi
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 2
PY=${PYTHON:-python3}
LIMIT_MIB=64

# ---------------------------------------------------------------------------------------------
# The size of what travels: the working tree git would send (tracked and untracked files not
# ignored) and the carried .whl/.
# ---------------------------------------------------------------------------------------------
travel_size() {
  local tree_b wheels_b total_mib
  if git rev-parse --git-dir >/dev/null 2>&1; then
    tree_b=$(git ls-files -z --cached --others --exclude-standard \
             | xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  else  # on the device machine the tree arrives without .git
    tree_b=$(du -sb --exclude=.whl --exclude=data/store --exclude=runs . | cut -f1)
  fi
  wheels_b=$( [[ -d .whl ]] && du -sb .whl | cut -f1 || echo 0)
  total_mib=$(( (tree_b + wheels_b + 1048575) / 1048576 ))
  echo "travel size: working tree $(( tree_b / 1024 )) KiB + .whl $(( wheels_b / 1024 )) KiB" \
       "= ${total_mib} MiB of the device tool's ${LIMIT_MIB} MiB"
  if (( total_mib > LIMIT_MIB )); then
    echo "error: ${total_mib} MiB would not travel (limit ${LIMIT_MIB} MiB); carry fewer wheels." >&2
    return 1
  fi
}

if (( CHECK_SIZE )); then
  travel_size
  exit $?
fi

if (( DRY_RUN )); then
  OUT=${OUT:-$REPO/runs/gpu_session_dry}
  BUDGET_S=${BUDGET_S:-420}; BUDGET_A=${BUDGET_A:-200}; BUDGET_B=${BUDGET_B:-180}
  BUDGET_C=${BUDGET_C:-150}
  C_WORD=quick; C_STEPS=6; C_EVERY=3; C_DIR=${C_DIR:-$WORK/mid_gpu}
else
  OUT=${OUT:-$REPO/runs/gpu_session}
  BUDGET_S=${BUDGET_S:-540}; BUDGET_A=${BUDGET_A:-340}; BUDGET_B=${BUDGET_B:-0}
fi
SEED=${SEED:-0}
C_GROUPS=${C_GROUPS:-listops.py:transformer}
C_WORD=${C_WORD:-mid}; C_STEPS=${C_STEPS:-25600}; C_EVERY=${C_EVERY:-1600}
C_DIR=${C_DIR:-$REPO/runs/mid_gpu}
B_MODELS=${B_MODELS:-luna16 transformer}
mkdir -p "$OUT"
WORK=${WORK:-$(mktemp -d /tmp/gpu_session.XXXXXX)}
mkdir -p "$WORK"
exec > >(tee -a "$OUT/session.log") 2>&1
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( BUDGET_S - $(elapsed) )); }
SUMMARY="$OUT/summary.md"
note() { echo "$*"; echo "$*" >> "$SUMMARY"; }

echo "gpu_session: $(date -u +%FT%TZ), dry run $DRY_RUN, budget ${BUDGET_S} s" \
     "(a ${BUDGET_A} s, b ${BUDGET_B} s, c the rest), OUT=$OUT, scratch $WORK"
echo "# GPU session $(date -u +%FT%TZ)$( (( DRY_RUN )) && echo ' (CPU DRY RUN)')" > "$SUMMARY"
travel_size || true

# ---------------------------------------------------------------------------------------------
# Setup: the carried wheels (the image lacks them), then what the suite will import.
# ---------------------------------------------------------------------------------------------
PIP_FLAGS=(-q --no-index --no-deps --no-compile --no-cache-dir --upgrade)
shopt -s nullglob
WHEELS=(.whl/*.whl)
shopt -u nullglob
if (( ${#WHEELS[@]} == 0 )); then
  echo "no wheels in .whl/: installing nothing (docs/gpu.md lists the download commands)."
elif (( DRY_RUN )); then
  # The same install for the device's Python 3.12 into a scratch folder that nothing imports:
  # a wrong wheel or flag fails here, not on the GPU.
  echo "setup (dry run): installing ${#WHEELS[@]} wheels for cp312 into $WORK/site_check"
  "$PY" -m pip install "${PIP_FLAGS[@]}" --target "$WORK/site_check" --only-binary=:all: \
      --python-version 3.12 --implementation cp --ignore-requires-python \
      --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      "${WHEELS[@]}" || { echo "error: the carried wheels do not install; see above." >&2; exit 1; }
else
  echo "setup: installing ${#WHEELS[@]} wheels into /tmp/site"
  "$PY" -m pip install "${PIP_FLAGS[@]}" --target /tmp/site "${WHEELS[@]}" \
      || { echo "error: the carried wheels do not install; see above." >&2; exit 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if (( DRY_RUN )); then
  # The device image has no TensorFlow (too big to carry): nothing these parts run may import it.
  mkdir -p "$WORK/no_tf/tensorflow" "$WORK/no_tf/tensorflow_datasets"
  for pkg in tensorflow tensorflow_datasets; do
    echo "raise ImportError('$pkg is not on the GPU image (gpu_session.sh dry run)')" \
      > "$WORK/no_tf/$pkg/__init__.py"
  done
  export PYTHONPATH=$WORK/no_tf${PYTHONPATH:+:$PYTHONPATH}
  export JAX_PLATFORMS=cpu
fi
export PYTHONUNBUFFERED=1
"$PY" - > "$OUT/env.txt" 2>&1 <<'EOF'
import importlib, os, platform, sys
print('python', sys.version.split()[0], platform.machine(), 'cpus', os.cpu_count())
for name in ('jax', 'jaxlib', 'flax', 'optax', 'orbax.checkpoint', 'ml_collections', 'grain',
             'tensorboardX', 'submitit', 'tqdm', 'matplotlib'):
  try:
    print(name, getattr(importlib.import_module(name), '__version__', '?'))
  except Exception as e:  # pylint: disable=broad-except
    print(name, 'MISSING:', type(e).__name__, e)
import jax
print('devices', jax.devices())
import lra_luna.training.train, lra_luna.profile  # what parts a-c import
print('lra_luna imports: ok')
EOF
status=$?
cat "$OUT/env.txt"
if (( status )) || grep -q MISSING "$OUT/env.txt"; then
  echo "error: the environment is incomplete (env.txt above); nothing was run." >&2
  exit 1
fi
echo "setup done at $(elapsed) s"

# Part b's data, generated on the CPU cores while part a keeps the GPU busy (single-threaded,
# seeded: the same set as `python data/generate_listops.py` anywhere).
export LRA_DATA_DIR=${LRA_DATA_DIR:-$WORK/data}
if (( DRY_RUN )); then  # the quick set, exactly as configs/listops.py:quick generates it
  GENERATE=(--out_dir "$LRA_DATA_DIR/listops-quick" --num_train 10000 --num_val 500
            --num_test 500 --min_length 4 --max_length 60 --max_depth 3 --max_args 5)
else
  GENERATE=()
fi
GEN_START=$(date +%s)
if (( BUDGET_B >= 10 )); then  # under 10 s part b is skipped (bounded)
  nice -n 10 "$PY" data/generate_listops.py --no_progress "${GENERATE[@]}" \
      > "$WORK/generate_listops.log" 2>&1 &
  GEN_PID=$!
  echo "b's data: generating ListOps in the background (pid $GEN_PID, log $WORK/generate_listops.log)"
fi

# bounded SECONDS LABEL COMMAND...: COMMAND under `timeout`, saying its budget first and how it
# ended; a part stopped by its budget is no failure of the session.
bounded() {
  local seconds=$1 label=$2; shift 2
  if (( seconds < 10 )); then
    note "$label: skipped: ${seconds} s of budget left."
    return 0
  fi
  echo "== $label: budget ${seconds} s: $*"
  local t0 rc; t0=$(date +%s)
  timeout --signal=TERM --kill-after=20 "$seconds" "$@"
  rc=$?
  local took=$(( $(date +%s) - t0 ))
  case $rc in
    0) note "$label: done in ${took} s" ;;
    124|137|143) note "$label: stopped by its budget after ${took} s (exit $rc); partial results kept" ;;
    *) note "$label: FAILED (exit $rc) after ${took} s" ;;
  esac
  return 0
}

archive() {  # archive NAME FOLDER: OUT/NAME.tgz of FOLDER without checkpoints (16 MiB a file)
  tar -czf "$OUT/$1.tgz" --exclude=checkpoints -C "$(dirname "$2")" "$(basename "$2")" 2>/dev/null \
    && echo "wrote $OUT/$1.tgz ($(du -h "$OUT/$1.tgz" | cut -f1))"
}

# ---------------------------------------------------------------------------------------------
# a. Table 2 on the GPU.
# ---------------------------------------------------------------------------------------------
# The vanilla Transformer first: Table 2's cells are relative to it; then the paper's row.
MODELS=transformer,luna16,transformer_fused,s4d,s5,mega_chunk
if (( DRY_RUN )); then  # every model lowered (no compile, no timing): names and dtypes checked
  PROFILE=(--lengths 64 --batch_size 2 --flops_only)
else
  PROFILE=(--lengths ${LENGTHS:-1K,2K,4K} --batch_size 32 --repeats 5 --warmup 1 --no-isolate)
fi
note "## a. Table 2: $MODELS, ${PROFILE[*]}"
for dtype in bfloat16 float32; do
  budget=$(( BUDGET_A / 2 ))
  (( budget > $(left) )) && budget=$(left)
  bounded "$budget" "a. profile $dtype" "$PY" -m lra_luna.profile --models "$MODELS" \
      "${PROFILE[@]}" --dtype "$dtype" --out_dir "$WORK/table2/$dtype"
  [[ -f "$WORK/table2/$dtype/table2.md" ]] && cat "$WORK/table2/$dtype/table2.md" >> "$SUMMARY"
  archive a_table2 "$WORK/table2"
done

# ---------------------------------------------------------------------------------------------
# b. Full-size ListOps, LRA protocol, one seed of Luna-16 and of the Transformer.
# ---------------------------------------------------------------------------------------------
if (( DRY_RUN )); then
  LISTOPS_WORDS=quick; TRAIN=(--config.num_train_steps=6 --config.eval_every=6
                              --config.checkpoint_every=6 --config.log_every=2)
else
  LISTOPS_WORDS=''; TRAIN=(--config.log_every=100)
fi
b_start=$(date +%s)
note "## b. ListOps${LISTOPS_WORDS:+ ($LISTOPS_WORDS)}, LRA protocol, seed $SEED"
if (( BUDGET_B >= 10 )) && kill -0 "$GEN_PID" 2>/dev/null; then
  echo "b. waiting for the data (at most $(( BUDGET_B / 2 )) s)"
  deadline=$(( $(date +%s) + BUDGET_B / 2 ))
  while kill -0 "$GEN_PID" 2>/dev/null && (( $(date +%s) < deadline )); do sleep 2; done
fi
if (( BUDGET_B < 10 )); then
  note "b. skipped: BUDGET_B is ${BUDGET_B} s."
  SKIP_B=1
elif kill -0 "$GEN_PID" 2>/dev/null; then
  kill "$GEN_PID"
  note "b. data: not generated within the budget ($(( $(date +%s) - GEN_START )) s); part b skipped."
  SKIP_B=1
elif wait "$GEN_PID"; then
  # its log's last write is its end
  note "b. data: generated in $(( $(stat -c %Y "$WORK/generate_listops.log") - GEN_START )) s" \
       "(in the background)"
  SKIP_B=0
else
  note "b. data: the generator FAILED: $(tail -1 "$WORK/generate_listops.log"); part b skipped."
  SKIP_B=1
fi
read -r -a b_models <<< "$B_MODELS"
for i in "${!b_models[@]}"; do
  (( SKIP_B )) && break
  model=${b_models[$i]}
  spent=$(( $(date +%s) - b_start ))
  budget=$(( (BUDGET_B - spent) / (${#b_models[@]} - i) ))  # an equal share of what is left
  (( budget > $(left) )) && budget=$(left)
  workdir=$WORK/listops/$model
  bounded "$budget" "b. listops $model" "$PY" run_lra.py \
      --config "configs/listops.py:$model${LISTOPS_WORDS:+,$LISTOPS_WORDS}" --workdir "$workdir" \
      --config.seed="$SEED" "${TRAIN[@]}"
  "$PY" - "$workdir" "$model" >> "$SUMMARY" <<'EOF'
import json, pathlib, statistics, sys
workdir, model = pathlib.Path(sys.argv[1]), sys.argv[2]
lines = [json.loads(l) for l in (workdir / 'metrics.jsonl').read_text().splitlines()
         if l.strip()] if (workdir / 'metrics.jsonl').exists() else []
speeds = [l['steps_per_s'] for l in lines if 'steps_per_s' in l][1:] or [
    l['steps_per_s'] for l in lines if 'steps_per_s' in l]
config = json.loads((workdir / 'config.json').read_text()) if (workdir / 'config.json').exists() else {}
total = config.get('num_train_steps', 5000)
step = max((l['step'] for l in lines), default=0)
if speeds:
  rate = statistics.median(speeds)
  seconds = total / rate
  took = f'{seconds / 60:.1f} min' if seconds >= 120 else f'{seconds:.0f} s'
  print(f'- {model}: {step} of {total} steps logged, median {rate:.2f} steps/s '
        f'({1000 / rate:.1f} ms a step): the full {total} steps take about {took} of training '
        '(evaluation and data loading apart)')
else:
  print(f'- {model}: no training speed logged (data or compilation took the budget)')
results = workdir / 'results.json'
if results.exists():
  r = json.loads(results.read_text())
  print(f"  finished: test accuracy {r.get('test_accuracy')}, steps {r.get('steps')}")
EOF
  tail -2 "$SUMMARY"
  archive b_listops "$WORK/listops"
done

# ---------------------------------------------------------------------------------------------
# c. The mid groups this project's CPU cannot afford (docs/mid.md), with what is left: five seeds
# vmapped at the long protocol of docs/mid.md's 25,600-step groups, float32 matmuls in full
# (as the CPU's groups), into C_DIR; a C_DIR carried from an earlier session resumes.
# ---------------------------------------------------------------------------------------------
note "## c. mid groups at ${C_STEPS} steps: ${C_GROUPS} (${C_DIR})"
c_budget=$(( $(left) - 25 ))  # the archives
if [[ -n "${BUDGET_C:-}" ]] && (( BUDGET_C < c_budget )); then c_budget=$BUDGET_C; fi
c_configs=()
for group in $C_GROUPS; do c_configs+=(--config "configs/$group,$C_WORD"); done
bounded "$c_budget" "c. mid groups" "$PY" -m lra_luna.sweep "${c_configs[@]}" \
    --seeds 0,1,2,3,4 --mode vmap --sweep_dir "$C_DIR" --override num_train_steps="$C_STEPS" \
    eval_every="$C_EVERY" checkpoint_every="$C_EVERY" matmul_precision=highest progress_bar=False
"$PY" - "$C_DIR" >> "$SUMMARY" <<'EOF'
import json, pathlib, sys
from lra_luna.training import run_folder
for seed_dir in sorted(p for p in pathlib.Path(sys.argv[1]).glob('*/*/*/seed*') if p.is_dir()):
  name = '/'.join(seed_dir.parts[-4:])
  results = seed_dir / 'results.json'
  if results.exists():
    r = json.loads(results.read_text())
    print(f"- {name}: test {r['best']['test_accuracy']:.4f} at the best step "
          f"{r['best']['step']} (validation {r['best']['val_accuracy']:.4f}), "
          f"{r['last']['test_accuracy']:.4f} at the last step {r['last']['step']}")
  else:
    step = run_folder.saved_step(seed_dir, 'latest')
    print(f'- {name}: not finished; latest checkpoint at step {step} (carry the folder to resume)')
EOF
archive c_mid "$C_DIR"
# The checkpoints apart (the device tool returns files of at most 16 MiB): carried back with
# `carry`, they resume the groups in the next session.
if [[ -d "$C_DIR" ]]; then
  (cd "$(dirname "$C_DIR")" && find "$(basename "$C_DIR")" -type d -name checkpoints -print0 \
     | tar -czf "$OUT/c_mid_checkpoints.tgz" --null -T -)
  size=$(stat -c %s "$OUT/c_mid_checkpoints.tgz" 2>/dev/null || echo 0)
  note "c. checkpoints: $(( size / 1024 )) KiB$( (( size > 16 * 1048576 )) \
        && echo ': over the 16 MiB a returned file may have; they will not come back')"
fi

note "gpu_session: finished in $(elapsed) s of ${BUDGET_S} s; files in $OUT"
ls -la "$OUT"
