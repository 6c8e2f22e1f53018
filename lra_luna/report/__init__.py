"""Tables and figures of a sweep (or of a record), beside the published numbers (registry.py,
published.py).

  python -m lra_luna.report SWEEP_DIR_OR_RECORD.csv [--size quick|mid|full] [--record RECORD.csv]
                            [--checkpoint best|last] [--profile profile.json] [--out_dir DIR]

Reads every results.json under the sweep folder (by its own task/model/head/seed keys, not its
path), only those of --size if given (their presets' size words: quick, mid, mid,long; full for a
preset without one), and writes to out_dir (default SWEEP_DIR/report), each table through
lra_luna/tables.py:
- table1.{md,tex,csv}: test accuracy per task and (model, head): mean ± sample std (ddof=1) over
  seeds with n; the average over the five tasks and without Retrieval; the papers' rows beside;
  under it, what one cue of the same data gives where that data is on this machine (ListOps'
  majority class and first token, Pathfinder's majority class and circle distance; lra_luna/cues).
- table3.{md,tex,csv}, when a Luna model ran with the mean-pooled P head (`mean_p`): its [CLS]
  (`cls`) vs `mean_p` on ListOps, Text, Retrieval, with their average.
- table_spt.{md,tex,csv} (when the folder holds self-pretrained runs, `<model>+spt`): each model
  and head from scratch beside the same after self-pretraining (docs/spt.md), per task.
- groups.{md,tex,csv}, orderings.{md,tex,csv} and groups.png (report/orderings.py): each group's
  accuracy per seed, and the papers' published orderings put to the test, each with its 95%
  Welch interval and verdict; the caption names the size, steps and checkpoint, the last line
  counts the distinguishable ones; the figure: mean ± std per group beside the published value.
- figure1.{png,pdf}: accuracy (y) vs training steps/s (x), circle area proportional to memory.
- positions.{md,tex,csv}, when runs with rotary positions (`<model>+rotary`) sit beside their
  model's: own vs rotary positions per task and their difference (docs/positions.md).
- probe_<task>.png, when the runs were probed (python -m lra_luna.probe, their probe.json):
  accuracy against the window of tokens the models see, a line per model.
- mqar.{md,tex,csv}, mqar_widths.png, mqar_capacity.png and mqar_models.png, when the folder
  holds MQAR runs (task 'mqar', report/recall.py): a row per (model, causal, L, N, V, D, Luna's P,
  learning rate) with chance, steps and commits, Zoology's Figure 2 (accuracy against width,
  best learning rate per point), Luna's capacity (accuracy against pairs N, a line per P, the
  Transformer beside) and the models side by side at each (L, N, D) (a bar each, seeds as
  dots); mqar_comparisons.{md,tex,csv}: each model minus the Transformer and chance, causal minus
  bidirectional, the best learning rate minus the others, each with its 95% Welch interval and
  verdict (report/recall_comparisons.py). MQAR runs are in none of the LRA tables, groups or
  Figure 1; the same task/model/head/seed in two settings (several sweep folders under one) are
  two runs.
Accuracies are percent of the chosen checkpoint's test set; every table says which checkpoint.
Each published number names its paper and table.

The record (report/record.py): --record FILE merges each finished run's row (size, task, group,
seed, steps, test accuracy at both checkpoints, the commit and machine of its results.json, its
preset and overrides) into a CSV of your own, a rerun replacing its row. Given that CSV instead
of a folder, report writes its groups, orderings and group figure (default out_dir
runs/report_<its name>), and from its MQAR rows (their group: the setting's text, e.g.
'luna16 causal L=64 N=4 D=64 P=16 lr=0.003') the MQAR table and figures; rows without a commit
are marked in them.
A missing cell is '—' (empty in CSV), never 0; an average needs every one of its tasks.

How each run trained is what it recorded at train time (results.json 'run',
config_lib.run_record): its preset, protocol, steps against the full run's, overrides of its
preset, and why it is SHORTENED (config_lib.shortened_reasons: a quick config, a smoke test,
fewer steps than the full run, a capped evaluation). The Training column and every caption say
it, e.g. "1500 steps (lra); SHORTENED: quick config, 1500 of 5000 steps"; differing runs of one
row are joined by '; ', each after its tasks. A caption calls our rows full only when no run is
shortened or unrecorded; a results.json without its record is "not recorded", never guessed.
The CSVs carry the same fields (training, preset, protocol, steps, full_steps, shortened,
overrides).

Figure 1. y: the average without Retrieval (the paper's Figure 1) for the rows that have it;
if none has, the task with the most rows. x and circle area, with --profile: the profile's point
of each model at the longest length measured for all plotted models (else the longest there is).
Fields read per point (the file is a list of points, or {'points': [...]} as lra_luna/profile.py
writes): 'model', 'length', speed 'steps_per_s'; memory, the first of 'memory_bytes',
'device_peak_bytes', 'estimated_bytes' that every measured point has (none: one circle size); a
point with 'oom': true or a 'status' other than 'ok' is not measured. Others are ignored. A
profile of another task than y's is plotted with the mismatch stated in the title (and on
stderr). Without --profile: x = one speed per model, the median logged training steps/s
('steps_per_s' of metrics.jsonl) over all its runs behind y, every head and seed (training-time
speed, under whatever load the machine had; a vmapped run logs the speed of all its seeds
together), all circles one size. Labels are moved apart where they would overlap. Where a
plotted run was shortened, the title says how.

A folder that lra_luna/campaign ran holds campaign.json: its facts (protocol, training steps,
data, and CUT SHORT with what falls short of the protocol) then close every table caption, sit
under the figure and fill a 'campaign' column of the CSVs.

Modules: runs (results.json files, seed statistics, run records), sources (data and campaign
facts), tables (Tables 1 and 3), figures (Figure 1), orderings (groups, published orderings),
record (the record CSV), recall (MQAR's table and figures), command (make_report, main).
"""

from lra_luna.report.command import load_profile, main, make_report
from lra_luna.report.figures import (figure1, measured_points, model_speeds, profile_speeds,
                                     write_figure)
from lra_luna.report.runs import (AVG, AVG_NO_RETRIEVAL, CHECKPOINTS, MISSING, TASK_NAMES,
                                  UNRECORDED, Cell, run_size,
                                  average, describe_run, describe_training, load_results,
                                  run_records, seed_statistics, summarize)
from lra_luna.report.sources import CAMPAIGN_FILE, campaign_note, data_sources, describe_data
from lra_luna.report.tables import AccuracyTable, Row, as_table, table1, table3, table_spt
