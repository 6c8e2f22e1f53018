"""The whole benchmark in one command: a campaign of sweeps run as submitit jobs, then its tables.

  python -m lra_luna.campaign campaigns/quick.py --dir runs/campaign_quick
  python -m lra_luna.campaign campaigns/paper_table1.py --dir runs/table1 --launcher slurm \\
      --partition gpu --gpus_per_job 1 --time_min 1440 [--account A] [--sbatch qos=high ...]
  python -m lra_luna.campaign campaigns/quick.py --dir runs/campaign_quick --status
  python -m lra_luna.campaign campaigns/quick.py --dir runs/campaign_quick --report
  python -m lra_luna.campaign campaigns/paper_table1.py --dir runs/table1 --estimate

A spec (campaigns/*.py, `get_config()` returning `base_spec()` filled in) lists tasks, models,
heads, seeds, the protocol and overrides. Each (task, model, head) group is one submitit job that
trains its unfinished seeds in one program, vmapped, exactly as `sweep --mode vmap` does
(`sweep.plan`, `sweep.run_vmapped`). When every group has finished, one more job runs the profiler
(Table 2, on the jobs' kind of device), then `report` writes Table 1, Table 3 and Figure 1;
`--report` makes them now from the runs finished so far. `--estimate` trains nothing: it profiles
each task's config at its own length and batch as jobs, and prints the campaign's device-hours.

Launchers (submitit's LocalExecutor or SlurmExecutor):
- local (default): jobs are local processes, at most --max_jobs at a time (default: one per GPU,
  each job given its own through CUDA_VISIBLE_DEVICES; one job on a machine without GPUs).
- slurm: sbatch with --partition, --gpus_per_job, --time_min, --account and --sbatch key=value.
  A job that reaches its time limit or is preempted is requeued by submitit and resumes from its
  runs' orbax checkpoints.

Resumable: rerunning the same command skips finished runs, waits for jobs of an earlier driver that
still run, resumes unfinished runs from their checkpoints, and resubmits a failed job once; a job
that fails again is reported with its log and its last error line (exit status 1).

DIR holds: campaign.json (the spec and the facts report's captions state), <task>/<model>/<head>/
seed<k>/ (the runs, as sweep lays them out), jobs.json (each group's latest job), jobs/ (submitit's
pickles and logs <job id>_0_log.{out,err}) and report/ (table1, table3, table2, figure1).
"""

import argparse
import contextlib
import difflib
import importlib.util
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import traceback

from absl import logging
import ml_collections
import submitit

from lra_luna import config_lib
from lra_luna import registry
from lra_luna import sweep
from lra_luna.models import model_config
from lra_luna.training import run_folder

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SPEC_FILE = 'campaign.json'     # what report reads for its captions (report.CAMPAIGN_FILE)
JOBS_FILE = 'jobs.json'
JOBS_DIR = 'jobs'
REPORT_DIR = 'report'
PROFILE_JOB = 'profile'
PROTOCOLS = ('lra', 'paper')    # 'paper': the authors' protocol, the config variant word `paper`
VARIANTS = ('', 'quick')
PROTOCOL_SEEDS = 5              # seeds per row in the papers' tables
ATTEMPTS = 2                    # a failed job is resubmitted once per driver run


def base_spec() -> ml_collections.ConfigDict:
  """Every field of a campaign spec, with its default; locked, so a misspelt field is an error."""
  c = ml_collections.ConfigDict()
  c.name = ''                       # a label for captions
  c.tasks = []                      # config_lib.TASKS
  c.models = []                     # config_lib.MODELS
  # 'cls' | 'mean' | 'mean_p' ('mean_p' runs for Luna models only); [] = each config's own head.
  c.heads = ['cls']
  c.seeds = [0, 1, 2, 3, 4]         # training seeds, vmapped within a group
  c.protocol = 'lra'                # 'lra' | 'paper' (the authors' protocol: config word `paper`)
  c.variant = ''                    # '' the full configs | 'quick' the 2-core CPU variants
  c.overrides = []                  # 'key=value' config fields for every run, as sweep --override
  p = c.profile = ml_collections.ConfigDict()  # Table 2: lra_luna/profile.py's flags
  p.enabled = True                  # run the profiler once every group has finished
  p.config = 'configs/text.py'      # task config (and ':arg') of the profiled model, repo-relative
  p.models = []                     # [] = the campaign's models
  p.lengths = [1024, 2048, 3072, 4096]
  p.batch_size = 32
  p.repeats = 10                    # timed steps (median reported)
  p.warmup = 2                      # untimed steps after compiling
  c.lock()
  return c


class CampaignError(ValueError):
  """Bad input: one line for the user."""


# ----------------------------------------------------------------------------------------------
# The spec and its plan.
# ----------------------------------------------------------------------------------------------
def load_spec(path) -> ml_collections.ConfigDict:
  """The ConfigDict of a spec file's get_config(), checked field by field."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise CampaignError(f'campaign spec {path} not found; the ready ones are '
                        f'{", ".join(str(p.relative_to(REPO_ROOT)) for p in sorted((REPO_ROOT / "campaigns").glob("*.py")))}.')
  module_spec = importlib.util.spec_from_file_location(f'campaign_spec_{path.stem}', path)
  module = importlib.util.module_from_spec(module_spec)
  try:
    module_spec.loader.exec_module(module)
    spec = module.get_config()
  except (AttributeError, KeyError, TypeError, ValueError) as e:
    misspelt = re.search(r'Key "([^"]+)" does not exist', str(e))
    if misspelt:  # The locked spec's message lists the whole spec: name the field instead.
      close = difflib.get_close_matches(misspelt.group(1), config_lib.key_paths(base_spec()))
      hint = f' Did you mean {close[0]!r}?' if close else ''
      raise CampaignError(f'{path}: {misspelt.group(1)!r} is no spec field.{hint} The fields '
                          'are those of lra_luna.campaign.base_spec.') from None
    raise CampaignError(f'{path}: {type(e).__name__}: {e}') from None
  for field, values, choices in (('tasks', spec.tasks, config_lib.TASKS),
                                 ('models', spec.models, config_lib.MODELS),
                                 ('heads', spec.heads, model_config.HEADS),
                                 ('protocol', [spec.protocol], PROTOCOLS),
                                 ('variant', [spec.variant], VARIANTS),
                                 ('profile.models', spec.profile.models, config_lib.MODELS)):
    unknown = [v for v in values if v not in choices]
    if unknown:
      raise CampaignError(f'{path}: {field} {unknown[0]!r} is unknown; valid choices: '
                          f'{list(choices)}.')
  if not (spec.tasks and spec.models and spec.seeds):
    raise CampaignError(f'{path}: tasks, models and seeds must each name at least one.')
  return spec


def config_spec(task: str, model: str, protocol: str, variant: str = '') -> str:
  """run_lra's --config of one task and model: the variant and the protocol as config words."""
  words = [model] + ([variant] if variant else []) + (['paper'] if protocol == 'paper' else [])
  return f'{config_lib.CONFIG_DIR / task}.py:{",".join(words)}'


def plan(spec, campaign_dir: pathlib.Path) -> dict:
  """{(task, model, head): [sweep.Run per seed]}, every config built and validated up front."""
  groups = {}
  for task in spec.tasks:
    for model in spec.models:
      # Only Luna has P (the spec says so once, rather than sweep for every other model).
      heads = [h for h in spec.heads if h in registry.get(model).heads]
      if spec.heads and not heads:
        continue  # (no heads at all: each config's own head)
      try:
        runs = sweep.plan([config_spec(task, model, spec.protocol, spec.variant)],
                          list(spec.seeds), heads, list(spec.overrides), campaign_dir)
      except ValueError as e:
        raise CampaignError(str(e)) from None
      for run in runs:
        groups.setdefault((task, model, run.head), []).append(run)
  return groups


def group_name(key) -> str:
  return '/'.join(key)


def cut_short_facts(spec, groups: dict) -> dict:
  """What report's captions state: the protocol, each task's steps against its protocol's, and
  how the campaign falls short of the protocol (fewer steps or seeds, the quick variant)."""
  steps = {}
  for (task, model, _), runs in groups.items():
    full = config_lib.load_config(config_spec(task, model, spec.protocol))
    steps.setdefault(task, set()).add((runs[0].config.num_train_steps, full.num_train_steps))
  short = []
  if spec.variant:
    short.append(f'{spec.variant} configs (smaller data and models)')
  for task, pairs in sorted(steps.items()):
    short += [f'{task} {ours} of {theirs} steps' for ours, theirs in sorted(pairs) if ours < theirs]
  if len(spec.seeds) < PROTOCOL_SEEDS:
    short.append(f'{len(spec.seeds)} of {PROTOCOL_SEEDS} seeds')
  return {'name': spec.name, 'protocol': spec.protocol,
          'steps': {task: sorted(pairs) for task, pairs in steps.items()}, 'cut_short': short}


def check_spec_matches(campaign_dir: pathlib.Path, spec, force: bool) -> None:
  """Refuses a folder whose campaign.json holds another spec, naming the differing fields."""
  path = campaign_dir / SPEC_FILE
  if not path.exists() or force:
    return
  saved = config_lib.flatten(json.loads(path.read_text())['spec'])
  wanted = config_lib.flatten(json.loads(spec.to_json()))
  differing = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
  if differing:
    raise CampaignError(f'{campaign_dir} holds a campaign of another spec (fields {differing} '
                        'differ); use another --dir, or --force to adopt this spec (runs whose '
                        'config changed then start anew).')


def clear_stale_runs(groups: dict) -> None:
  """With --force: deletes run folders that hold another config than the spec now gives."""
  for runs in groups.values():
    for run in runs:
      saved = run.workdir / run_folder.CONFIG_FILE
      if saved.exists() and json.loads(saved.read_text()) != json.loads(run.config.to_json()):
        print(f'{run.name}: its config changed; starting it anew.', flush=True)
        shutil.rmtree(run.workdir)


# ----------------------------------------------------------------------------------------------
# The jobs (what runs on the launcher's machine).
# ----------------------------------------------------------------------------------------------
class GroupJob(submitit.helpers.Checkpointable):
  """One (task, model, head) group: its unfinished seeds trained vmapped, as `sweep --mode vmap`.
  Checkpointable: on a time limit or preemption submitit requeues this same call, which resumes
  from the runs' orbax checkpoints."""

  def __init__(self, config: str, head: str, seeds: list, overrides: list, campaign_dir: str):
    self.config, self.head, self.seeds = config, head, seeds
    self.overrides, self.campaign_dir = overrides, campaign_dir

  def __call__(self) -> list:
    logging.set_verbosity(logging.WARNING)  # As run_lra: orbax logs every save at INFO.
    runs = sweep.plan([self.config], self.seeds, [self.head], self.overrides, self.campaign_dir)
    failures = sweep.run_vmapped([run for run in runs if not sweep.finished(run)])
    if failures:
      raise RuntimeError('; '.join(f'{run.name}: {reason} (log {run.log})'
                                   for run, reason in failures))
    return [run.name for run in runs]


class ProfileJob(submitit.helpers.Checkpointable):
  """Table 2: lra_luna/profile.py with the spec's profile flags, written to DIR/report."""

  def __init__(self, argv: list):
    self.argv = argv

  def __call__(self) -> dict:
    from lra_luna import profile  # Imported here: the driver needs no profiler.
    os.chdir(REPO_ROOT)  # Its fresh-process points (GPU) start from the repository root.
    return profile.main(self.argv)


def profile_argv(spec, campaign_dir: pathlib.Path) -> list:
  p = spec.profile
  path, sep, arg = p.config.partition(':')
  return ['--config', str(REPO_ROOT / path) + sep + arg,
          '--models', ','.join(p.models or spec.models),
          '--lengths', ','.join(str(n) for n in p.lengths), '--batch_size', str(p.batch_size),
          '--repeats', str(p.repeats), '--warmup', str(p.warmup),
          '--out_dir', str(campaign_dir / REPORT_DIR)]


# ----------------------------------------------------------------------------------------------
# What a campaign costs: each task's config profiled at its own length and batch, on the jobs'
# device; GPU-hours = seeds x steps / (steps/s) per group. Without a device to time on,
# --assume_tflops turns XLA's FLOPs of each step into time instead (profile --flops_only).
# ----------------------------------------------------------------------------------------------
ESTIMATE_DIR = 'estimate'


def estimate_argv(spec, campaign_dir: pathlib.Path, task: str, config, assume_tflops) -> list:
  """profile.py's flags for one task: its config (variant, protocol) at its length and batch."""
  words = config_spec(task, 'x', spec.protocol, spec.variant).partition(':')[2].split(',')[1:]
  return ['--config', f'{config_lib.CONFIG_DIR / task}.py' + (f':{",".join(words)}' if words
                                                              else ''),
          '--models', ','.join(spec.models), '--lengths', str(config.max_length),
          '--batch_size', str(config.batch_size), '--repeats', str(spec.profile.repeats),
          '--warmup', str(spec.profile.warmup), '--out_dir', str(campaign_dir / ESTIMATE_DIR / task),
          *(['--flops_only'] if assume_tflops else [])]


def estimate_hours(groups: dict, campaign_dir: pathlib.Path, assume_tflops) -> list:
  """[(task, model, head, seeds x steps, hours or None, how)] per group, from the estimate's
  profiles: the measured steps/s, or the step's FLOPs at assume_tflops."""
  rows = []
  for (task, model, head), runs in groups.items():
    path = campaign_dir / ESTIMATE_DIR / task / 'profile.json'
    profile = json.loads(path.read_text()) if path.exists() else {'points': []}
    point = next((p for p in profile['points'] if p['model'] == model), None)
    seed_steps = len(runs) * runs[0].config.num_train_steps  # vmapped seeds: each its own step
    if point is None or point['status'] != 'ok':
      rows.append((task, model, head, seed_steps, None,
                   'not profiled' if point is None else 'out of memory'))
    elif assume_tflops:
      step_s = point['flops_per_step'] / (assume_tflops * 1e12)
      rows.append((task, model, head, seed_steps, seed_steps * step_s / 3600,
                   f'{point["flops_per_step"] / 1e12:.3f} TFLOP/step at {assume_tflops} TFLOP/s'))
    else:
      rows.append((task, model, head, seed_steps, seed_steps / point['steps_per_s'] / 3600,
                   f'{point["steps_per_s"]:.2f} steps/s on {profile["device"]["device_kind"]}'))
  return rows


def print_estimate(rows: list, assume_tflops) -> None:
  kind = (f"XLA's FLOPs per step at an assumed {assume_tflops} TFLOP/s sustained"
          if assume_tflops
          else "the profiler's steps/s on the jobs' device")
  print(f'ESTIMATE of the training cost in device-hours, from {kind}; evaluation, compilation '
        'and queueing not counted:')
  for task, model, head, seed_steps, hours, how in rows:
    print(f'  {task:11} {model:19} {head:7} {seed_steps:>8} seed-steps  '
          f'{"-" if hours is None else f"{hours:9.2f} h"}  ({how})')
  total = sum(hours for *_, hours, _ in rows if hours is not None)
  missing = sum(hours is None for *_, hours, _ in rows)
  print(f'  total: {total:.2f} device-hours (estimate)'
        + (f', without the {missing} groups above that have no figure' if missing else ''))


def profile_finished(spec, campaign_dir: pathlib.Path) -> bool:
  """Whether report/profile.json holds every (model, length) point of the spec's profile."""
  path = campaign_dir / REPORT_DIR / 'profile.json'
  if not path.exists():
    return False
  points = json.loads(path.read_text()).get('points', [])
  return len(points) == len(spec.profile.models or spec.models) * len(spec.profile.lengths)


# ----------------------------------------------------------------------------------------------
# Launchers: submit a job, and say whether a job (of this driver or an earlier one) still lives.
# ----------------------------------------------------------------------------------------------
def visible_gpus() -> list[int]:
  """The GPU indices local jobs may use (CUDA_VISIBLE_DEVICES, else nvidia-smi's list). Asking
  JAX would make this process claim the GPUs' memory."""
  if os.environ.get('CUDA_VISIBLE_DEVICES') is not None:
    return [i for i, d in enumerate(os.environ['CUDA_VISIBLE_DEVICES'].split(',')) if d.strip()]
  if not shutil.which('nvidia-smi'):
    return []
  listing = subprocess.run(['nvidia-smi', '-L'], capture_output=True, text=True)
  return list(range(sum(line.startswith('GPU ') for line in listing.stdout.splitlines())))


class LocalLauncher:
  """submitit's LocalExecutor: at most max_jobs jobs at a time, one GPU each where there are GPUs."""
  name = 'local'

  def __init__(self, folder: pathlib.Path, max_jobs: int, time_min: int):
    self.folder, self.time_min = folder, time_min
    self.gpus = visible_gpus()
    self.max_jobs = max_jobs or max(len(self.gpus), 1)
    self.children = {}  # job id -> LocalJob submitted by this driver (polled, so reaped)
    self.gpu_of = {}    # job id -> the GPU it holds

  def free_slot(self, live_jobs: dict):
    """A GPU index (or None on CPU) for the next job, or False when max_jobs jobs run."""
    if len(live_jobs) >= self.max_jobs:
      return False
    if not self.gpus:
      return None
    held = {entry.get('gpu') for entry in live_jobs.values()}
    return next((g for g in self.gpus if g not in held), False)

  def submit(self, job, slot) -> str:
    executor = submitit.LocalExecutor(folder=self.folder)
    executor.update_parameters(timeout_min=self.time_min, gpus_per_node=0 if slot is None else 1,
                               visible_gpus=() if slot is None else (slot,))
    submitted = executor.submit(job)
    self.children[submitted.job_id] = submitted
    return submitted.job_id

  def state(self, job_id: str) -> str:
    if job_id in self.children:  # Polled through submitit, which reaps the process.
      return 'running' if self.children[job_id].state == 'RUNNING' else 'ended'
    return local_state(job_id)


class SlurmLauncher:
  """submitit's SlurmExecutor; Slurm queues the jobs, so all are submitted at once."""
  name = 'slurm'

  def __init__(self, folder: pathlib.Path, args):
    if not shutil.which('sbatch'):
      raise CampaignError('--launcher slurm: sbatch is not on PATH; run the campaign on a Slurm '
                          'login node, or use --launcher local.')
    self.folder = folder
    self.parameters = {'timeout_min': args.time_min, 'gpus_per_node': args.gpus_per_job,
                       'cpus_per_task': args.cpus_per_job, 'name': 'lra_luna'}
    extra = dict(item.split('=', 1) for item in args.sbatch)
    if args.partition:
      self.parameters['slurm_partition'] = args.partition
    if args.account:
      extra['account'] = args.account
    self.parameters['slurm_additional_parameters'] = extra

  def free_slot(self, live_jobs: dict):
    return None

  def submit(self, job, slot) -> str:
    executor = submitit.AutoExecutor(folder=self.folder, cluster='slurm',
                                     slurm_max_num_timeout=100)
    executor.update_parameters(**self.parameters)
    try:
      with contextlib.redirect_stderr(io.StringIO()):  # submitit echoes sbatch's stderr: once
        return executor.submit(job).job_id
    except submitit.core.utils.FailedJobError as e:
      lines = [line.strip() for line in str(e).splitlines() if 'error' in line.lower()]
      raise CampaignError(f'Slurm rejected the job: {" ".join(lines) or str(e).strip()}') \
          from None

  def state(self, job_id: str) -> str:
    return slurm_state(job_id)


def local_state(job_id: str) -> str:
  """'running' or 'ended' of a local job, also one of an earlier driver (jobs outlive it)."""
  try:  # A zombie or a reused pid has another (or no) command line.
    cmdline = pathlib.Path(f'/proc/{int(job_id)}/cmdline').read_bytes()
  except (OSError, ValueError):
    return 'ended'
  return 'running' if b'submitit' in cmdline else 'ended'


SLURM_QUEUED = ('PENDING', 'CONFIGURING', 'REQUEUED', 'REQUEUE_FED', 'REQUEUE_HOLD',
                'RESV_DEL_HOLD')


def slurm_state(job_id: str) -> str:
  """'queued', 'running' or 'ended' (Slurm no longer lists it) from squeue (sacct needs Slurm's
  accounting database, which a cluster may not have)."""
  if not shutil.which('squeue'):
    return 'ended'
  listing = subprocess.run(['squeue', '-h', '-j', job_id, '-o', '%T'], capture_output=True,
                           text=True)
  states = listing.stdout.split()
  if listing.returncode or not states:
    return 'ended'
  return 'queued' if states[0] in SLURM_QUEUED else 'running'


JOB_STATE = {'local': local_state, 'slurm': slurm_state}


def log_path(folder: pathlib.Path, job_id: str) -> pathlib.Path:
  """submitit's error log of a job (task 0)."""
  return submitit.core.utils.JobPaths(folder, job_id, 0).stderr


def last_error_line(path: pathlib.Path) -> str:
  """The last line of a log that names an error, else its last line."""
  lines = [line.strip() for line in path.read_text(errors='replace').splitlines()
           if line.strip()] if path.exists() else []
  errors = [line for line in lines if 'Error' in line or 'error:' in line or 'Killed' in line]
  if errors or lines:
    return (errors or lines)[-1]
  return 'no error in the log: the job was killed (out of memory, a signal or a node failure)'


# ----------------------------------------------------------------------------------------------
# The driver: submit, watch, resubmit once, then the tables.
# ----------------------------------------------------------------------------------------------
class Campaign:
  """A campaign folder: its groups, their jobs (jobs.json) and the launcher that runs them
  (None for --status)."""

  def __init__(self, spec, campaign_dir: pathlib.Path, launcher, poll_s: float):
    self.spec, self.dir, self.launcher, self.poll_s = spec, campaign_dir, launcher, poll_s
    self.assume_tflops = None  # --estimate without a device to time on (estimate_hours)
    self.groups = plan(spec, campaign_dir)
    self.jobs_path = campaign_dir / JOBS_FILE
    self.jobs = json.loads(self.jobs_path.read_text()) if self.jobs_path.exists() else {}

  def save_jobs(self) -> None:
    run_folder.write_json_atomically(self.jobs_path, self.jobs)

  def group_finished(self, name: str) -> bool:
    if name == PROFILE_JOB:
      return profile_finished(self.spec, self.dir)
    if name.startswith(f'{ESTIMATE_DIR}/'):
      path = self.dir / name / 'profile.json'
      return path.exists() and len(json.loads(path.read_text())['points']) == len(
          self.spec.models)
    key = tuple(name.split('/'))
    return all(sweep.finished(run) for run in self.groups[key])

  def make_job(self, name: str):
    if name == PROFILE_JOB:
      return ProfileJob(profile_argv(self.spec, self.dir))
    if name.startswith(f'{ESTIMATE_DIR}/'):
      task = name.partition('/')[2]
      config = next(runs[0].config for key, runs in self.groups.items() if key[0] == task)
      return ProfileJob(estimate_argv(self.spec, self.dir, task, config, self.assume_tflops))
    runs = self.groups[tuple(name.split('/'))]
    return GroupJob(runs[0].spec, runs[0].head, [run.seed for run in runs],
                    list(self.spec.overrides), str(self.dir))

  def job_state(self, name: str) -> str:
    """'done', 'queued', 'running', 'failed' (its last job ended unfinished) or 'not started'."""
    if self.group_finished(name):
      return 'done'
    entry = self.jobs.get(name)
    if entry is None:
      return 'not started'
    if self.launcher is not None and entry['launcher'] == self.launcher.name:
      state = self.launcher.state(entry['job_id'])
    else:  # --status, or a job of the other launcher.
      state = JOB_STATE[entry['launcher']](entry['job_id'])
    return 'failed' if state == 'ended' else state

  def run_jobs(self, names: list) -> list:
    """Runs the named groups to the end; returns (name, log, last error line) of those that
    failed twice."""
    waiting = [n for n in names if not self.group_finished(n)]
    live, attempts, failures = {}, {n: 0 for n in waiting}, []
    for name in list(waiting):  # Jobs of an earlier driver that still run: wait for them.
      if self.job_state(name) in ('queued', 'running'):
        print(f'{name}: job {self.jobs[name]["job_id"]} of an earlier run is still there; '
              'waiting for it.', flush=True)
        live[name] = self.jobs[name]
        attempts[name] = 1
        waiting.remove(name)
    while waiting or live:
      for name in list(live):
        if self.job_state(name) not in ('done', 'failed'):
          continue
        entry = live.pop(name)
        if self.group_finished(name):
          print(f'{name}: done (job {entry["job_id"]}).', flush=True)
          continue
        log = log_path(self.dir / JOBS_DIR, entry['job_id'])
        line = last_error_line(log)
        if attempts[name] < ATTEMPTS:
          print(f'{name}: job {entry["job_id"]} failed ({line}); resubmitting once, to resume '
                'from its checkpoints.', flush=True)
          waiting.insert(0, name)
        else:
          failures.append((name, log, line))
      while waiting:
        slot = self.launcher.free_slot(live)
        if slot is False:
          break
        name = waiting.pop(0)
        job_id = self.launcher.submit(self.make_job(name), slot)
        attempts[name] += 1
        live[name] = self.jobs[name] = {'launcher': self.launcher.name, 'job_id': job_id,
                                        'gpu': slot}
        self.save_jobs()
        print(f'{name}: submitted job {job_id}{"" if slot is None else f" on GPU {slot}"} '
              f'(log {log_path(self.dir / JOBS_DIR, job_id)}).', flush=True)
      if live:
        time.sleep(self.poll_s)
    return failures

  def make_report(self) -> list:
    from lra_luna import report  # Imported here: matplotlib only when the tables are due.
    profile = self.dir / REPORT_DIR / 'profile.json'
    return report.make_report(self.dir, profile=profile if profile.exists() else None,
                              out_dir=self.dir / REPORT_DIR)

  def status_lines(self) -> list[str]:
    """Each run's state, its latest logged step and its best validation accuracy so far."""
    lines = [f'{"run":44} {"state":12} {"step":>12} {"best val acc":>12}  job']
    for key, runs in self.groups.items():
      name = group_name(key)
      state = self.job_state(name)
      job = self.jobs.get(name, {}).get('job_id', '-')
      for run in runs:
        rows = run_folder.read_jsonl(run.workdir / run_folder.METRICS_FILE)
        step = max((row['step'] for row in rows), default=0)
        accuracies = [row['val_accuracy'] for row in rows if 'val_accuracy' in row]
        best = f'{max(accuracies):.4f}' if accuracies else '-'
        run_state = 'done' if sweep.finished(run) else state
        lines.append(f'{run.name:44} {run_state:12} {f"{step}/{run.config.num_train_steps}":>12} '
                     f'{best:>12}  {job}')
    if self.spec.profile.enabled:
      lines.append(f'{"profile (Table 2)":44} {self.job_state(PROFILE_JOB):12}')
    return lines


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog='python -m lra_luna.campaign', description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('spec', help='campaign spec, e.g. campaigns/quick.py')
  parser.add_argument('--dir', required=True, help='campaign folder (runs, jobs, report)')
  parser.add_argument('--launcher', choices=('local', 'slurm'), default='local')
  parser.add_argument('--status', action='store_true', help="print each run's state and exit")
  parser.add_argument('--report', action='store_true',
                      help='make the tables now from the finished runs, submit nothing')
  parser.add_argument('--estimate', action='store_true',
                      help="print the campaign's cost in device-hours from each task's profile "
                      '(run as jobs on the launcher), train nothing')
  parser.add_argument('--assume_tflops', type=float, default=None,
                      help="--estimate without timing: XLA's FLOPs of each step (not compiled) "
                      'turned into time at this sustained TFLOP/s')
  parser.add_argument('--force', action='store_true',
                      help='adopt a changed spec in a folder of another (changed runs restart)')
  parser.add_argument('--max_jobs', type=int, default=0,
                      help='local: jobs at a time (default: one per GPU, 1 without GPUs)')
  parser.add_argument('--time_min', type=int, default=60 * 24 * 7,
                      help='time limit of a job in minutes (slurm: its --time)')
  parser.add_argument('--partition', default='', help='slurm: partition')
  parser.add_argument('--gpus_per_job', type=int, default=1, help='slurm: GPUs per job')
  parser.add_argument('--cpus_per_job', type=int, default=1, help='slurm: CPUs per job')
  parser.add_argument('--account', default='', help='slurm: account')
  parser.add_argument('--sbatch', action='extend', nargs='+', default=[], metavar='KEY=VALUE',
                      help='slurm: extra sbatch options, e.g. qos=high constraint=a100')
  parser.add_argument('--poll_s', type=float, default=10.0, help='seconds between job checks')
  parser.add_argument('--verbosity', type=int, default=0, help='1: tracebacks on errors')
  args = parser.parse_args(argv)

  campaign_dir = pathlib.Path(args.dir).absolute()
  # Jobs unpickle lra_luna: make it importable wherever they start.
  os.environ['PYTHONPATH'] = os.pathsep.join(
      filter(None, [str(REPO_ROOT), os.environ.get('PYTHONPATH')]))
  try:
    bad = [item for item in args.sbatch if '=' not in item]
    if bad:
      raise CampaignError(f'--sbatch {bad[0]!r}: expected key=value, e.g. qos=high.')
    spec = load_spec(args.spec)
    check_spec_matches(campaign_dir, spec, args.force)
    if args.status:
      if not (campaign_dir / SPEC_FILE).exists():
        raise CampaignError(f'{campaign_dir} holds no campaign ({SPEC_FILE} missing).')
      campaign = Campaign(spec, campaign_dir, None, args.poll_s)
      print('\n'.join(campaign.status_lines()))
      return 0
    if args.launcher == 'slurm':
      launcher = SlurmLauncher(campaign_dir / JOBS_DIR, args)
    else:
      launcher = LocalLauncher(campaign_dir / JOBS_DIR, args.max_jobs, args.time_min)
    campaign = Campaign(spec, campaign_dir, launcher, args.poll_s)
    if args.force:
      clear_stale_runs(campaign.groups)
    facts = cut_short_facts(spec, campaign.groups)
    run_folder.write_json_atomically(campaign_dir / SPEC_FILE,
                                      {'spec': json.loads(spec.to_json()), 'facts': facts})
    names = [group_name(key) for key in campaign.groups]
    print(f'Campaign {spec.name or args.spec}: {len(names)} jobs '
          f'({sum(map(len, campaign.groups.values()))} runs) with the {launcher.name} launcher'
          f'{f", {launcher.max_jobs} at a time" if args.launcher == "local" else ""}.', flush=True)
    if args.estimate:
      campaign.assume_tflops = args.assume_tflops
      failures = campaign.run_jobs([f'{ESTIMATE_DIR}/{task}' for task in spec.tasks])
    elif not args.report:
      failures = campaign.run_jobs(names)
      if not failures and spec.profile.enabled:
        failures = campaign.run_jobs([PROFILE_JOB])
    else:
      failures = []
    if failures:
      print(f'{len(failures)} jobs failed twice:', file=sys.stderr)
      for name, log, line in failures:
        print(f'  {name}: {line} (log {log})', file=sys.stderr)
      return 1
    if args.estimate:
      print_estimate(estimate_hours(campaign.groups, campaign_dir, args.assume_tflops),
                     args.assume_tflops)
      return 0
    paths = campaign.make_report()
  except (CampaignError, ValueError, FileNotFoundError) as e:
    if args.verbosity:
      traceback.print_exc()
    print(f'error: {e}', file=sys.stderr)
    return 1
  print(f'Campaign finished. Tables and figure in {campaign_dir / REPORT_DIR}: '
        f'{", ".join(sorted(p.name for p in paths))}.')
  return 0


if __name__ == '__main__':
  sys.exit(main())
