#!/bin/bash
# The mid groups one at a time in the order of docs/mid.md (the models that learn in the
# budget first, the Transformer's hours-long groups last), as `sweep --mode vmap` into the
# folder layout of `python -m lra_luna.campaign campaigns/mid.py --dir runs/mid` (which then
# skips what is done). Rerun to resume: finished seeds are skipped, unfinished ones resume.
#   nohup campaigns/mid_order.sh >> runs/mid/order.log 2>&1 &
cd "$(dirname "$0")/.."
D=${MID_DIR:-$PWD/runs/mid}
for spec in listops.py:s4d,mid listops.py:s5,mid listops.py:luna16,mid listops.py:s4d,mid,spt \
            listops.py:lru,mid listops.py:mega_chunk,mid listops.py:luna16,mid,spt listops.py:transformer,mid \
            listops.py:transformer,mid,spt listops.py:transformer,rotary,mid \
            pathfinder.py:s4d,mid pathfinder.py:s5,mid pathfinder.py:luna16,mid pathfinder.py:lru,mid \
            pathfinder.py:mega_chunk,mid pathfinder.py:s4d,mid,spt pathfinder.py:luna16,mid,spt \
            pathfinder.py:transformer,mid pathfinder.py:transformer,mid,spt pathfinder.py:transformer,rotary,mid; do
  echo "$(date -u +%FT%TZ) start $spec load $(cut -d' ' -f1-3 /proc/loadavg)"
  python -m lra_luna.sweep --config configs/$spec --seeds 0,1,2,3,4 --mode vmap --sweep_dir $D --override progress_bar=False
  echo "$(date -u +%FT%TZ) end $spec rc $? load $(cut -d' ' -f1-3 /proc/loadavg)"
done
# The Luna paper's Table 3 (mean-pooled P above [CLS]): Luna-16 with the P head, its own group
# (SWEEP_DIR/listops/luna16/mean_p; report names it luna16/mean_p).
echo "$(date -u +%FT%TZ) start listops.py:luna16,mid --heads mean_p"
python -m lra_luna.sweep --config configs/listops.py:luna16,mid --heads mean_p --seeds 0,1,2,3,4 --mode vmap --sweep_dir $D --override progress_bar=False
echo "$(date -u +%FT%TZ) end listops.py:luna16,mid --heads mean_p rc $?"
# The campaign's other registry models on ListOps-mid (the linear-cost ones first).
for model in linear_transformer local performer linformer synthesizer sinkhorn bigbird longformer \
             reformer sparse_transformer luna128 luna256 transformer_fused mega; do
  echo "$(date -u +%FT%TZ) start listops.py:$model,mid"
  python -m lra_luna.sweep --config configs/listops.py:$model,mid --seeds 0,1,2,3,4 --mode vmap --sweep_dir $D --override progress_bar=False
  echo "$(date -u +%FT%TZ) end listops.py:$model,mid rc $?"
done
