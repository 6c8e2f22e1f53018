"""Launchers (submitit's LocalExecutor or SlurmExecutor): submit a job, and say whether a job of
this driver or of an earlier one still lives; where a job's log is and its last error line."""

import contextlib
import io
import os
import pathlib
import shlex
import shutil
import subprocess

import submitit

from lra_luna.campaign.spec import CampaignError


def visible_gpus() -> list[str]:
  """The GPUs local jobs may use, as CUDA_VISIBLE_DEVICES names them (indices or UUIDs, kept as
  the user wrote them), else nvidia-smi's indices. Asking JAX would make this process claim the
  GPUs' memory."""
  if os.environ.get('CUDA_VISIBLE_DEVICES') is not None:
    return [d.strip() for d in os.environ['CUDA_VISIBLE_DEVICES'].split(',') if d.strip()]
  if not shutil.which('nvidia-smi'):
    return []
  listing = subprocess.run(['nvidia-smi', '-L'], capture_output=True, text=True)
  return [str(i) for i in range(sum(line.startswith('GPU ')
                                    for line in listing.stdout.splitlines()))]


def local_gpu_parameters(gpu: str | None) -> dict:
  """LocalExecutor parameters that give a job one GPU, named as the user named it: submitit's own
  `visible_gpus` takes integers only (and renumbers), so the job's shell sets the variable."""
  if gpu is None:
    return {'gpus_per_node': 0}  # submitit then hides every GPU (CUDA_VISIBLE_DEVICES='')
  return {'gpus_per_node': 0, 'setup': [f'export CUDA_VISIBLE_DEVICES={shlex.quote(gpu)}']}


class LocalLauncher:
  """submitit's LocalExecutor: at most max_jobs jobs at a time, one GPU each where there are GPUs."""
  name = 'local'

  def __init__(self, folder: pathlib.Path, max_jobs: int, time_min: int):
    self.folder, self.time_min = folder, time_min
    self.gpus = visible_gpus()
    self.max_jobs = max_jobs or max(len(self.gpus), 1)
    self.children = {}  # job id -> LocalJob submitted by this driver (polled, so reaped)

  def free_slot(self, live_jobs: dict):
    """A GPU (or None on CPU) for the next job, or False when max_jobs jobs run."""
    if len(live_jobs) >= self.max_jobs:
      return False
    if not self.gpus:
      return None
    held = {entry.get('gpu') for entry in live_jobs.values()}
    return next((g for g in self.gpus if g not in held), False)

  def submit(self, job, slot) -> str:
    executor = submitit.LocalExecutor(folder=self.folder)
    executor.update_parameters(timeout_min=self.time_min, **local_gpu_parameters(slot))
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
