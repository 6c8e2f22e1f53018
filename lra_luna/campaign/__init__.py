"""The whole benchmark in one command: a campaign of sweeps run as submitit jobs, then its tables.

  python -m lra_luna.campaign campaigns/quick.py --dir runs/campaign_quick [--override KEY=VALUE]
  python -m lra_luna.campaign campaigns/paper_table1.py --dir runs/table1 --launcher slurm \\
      --partition gpu --gpus_per_job 1 --time_min 1440 [--account A] [--sbatch qos=high ...]
  python -m lra_luna.campaign campaigns/quick.py --dir runs/campaign_quick --status
  python -m lra_luna.campaign campaigns/quick.py --dir runs/campaign_quick --report
  python -m lra_luna.campaign campaigns/paper_table1.py --dir runs/table1 --estimate \\
      --device_memory_gib 80

A spec (campaigns/*.py, `get_config()` returning `base_spec()` filled in) lists tasks, models,
heads, seeds, the protocol and overrides; `--override KEY=VALUE` adds overrides for every run
(recorded in campaign.json with the spec). Its cells (named override groups) each run the grid
once more, in DIR/<cell>/. Each (task, model, head) group is one submitit job that
trains its unfinished seeds vmapped, as `sweep --mode vmap` does, as many seeds per program as fit
the device: XLA's compiled memory estimate of one seed's step against the device's memory (its
`bytes_limit`, or --device_memory_gib); a program that still runs out of device memory is retried
with half its seeds. When every group has finished, one more job runs the profiler (Table 2, on
the jobs' kind of device), then `report` writes Table 1, Table 3 and Figure 1; `--report` makes
them now from the runs finished so far. `--estimate` trains nothing: it prints each group's memory
per seed, seeds per program and programs for the device size (compiled here, before anything is
submitted), then profiles each task's config at its own length and batch as jobs and prints the
campaign's device-hours.

Launchers (submitit's LocalExecutor or SlurmExecutor):
- local (default): jobs are local processes, at most --max_jobs at a time (default: one per GPU,
  each job given its own through CUDA_VISIBLE_DEVICES, named as the user's CUDA_VISIBLE_DEVICES
  names it, index or UUID; one job on a machine without GPUs).
- slurm: sbatch with --partition, --gpus_per_job, --time_min, --account and --sbatch key=value.
  A job that reaches its time limit or is preempted is requeued by submitit and resumes from its
  runs' orbax checkpoints.

Resumable: rerunning the same command skips finished runs, waits for jobs of an earlier driver that
still run, resumes unfinished runs from their checkpoints, and resubmits a failed job once; a job
that fails again is reported with its log and its last error line (exit status 1). A finished
campaign whose report is current says "Nothing to do" and lists its report's files.

DIR holds (lra_luna/training/run_folder.py): campaign.json (the spec and the facts report's
captions state), [<cell>/]<task>/<model>/<head>/seed<k>/ (the runs, as sweep lays them out),
jobs.json (each group's latest job), jobs/ (submitit's pickles and logs <job id>_0_log.{out,err}),
estimate/ (--estimate's profiles and memory.json) and report/ (table1, table3, table2, figure1,
profile.json).

Modules: spec (the spec and its checks), plan (groups, seeds per program, facts), memory (compiled
memory estimates), estimate (--estimate), jobs (what a job runs), launch (launchers), driver (the
Campaign: submit, watch, resubmit, report), __main__ (the command line).
"""

from lra_luna.campaign.spec import CampaignError
from lra_luna.campaign.spec import base_spec
from lra_luna.campaign.spec import load_spec
