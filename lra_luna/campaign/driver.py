"""The driver: a campaign folder's groups and jobs; it submits them, watches them, resubmits a
failed one once, then makes the report."""

import json
import time

from lra_luna import sweep
from lra_luna.campaign import estimate as estimate_lib
from lra_luna.campaign import jobs as jobs_lib
from lra_luna.campaign import launch
from lra_luna.campaign import plan as plan_lib
from lra_luna.training import run_folder

PROFILE_JOB = 'profile'
ESTIMATE_JOB = 'estimate '  # + task: the job that profiles a task's config for --estimate
ATTEMPTS = 2                # a failed job is resubmitted once per driver run


def profile_finished(spec, campaign_dir) -> bool:
  """Whether report/profile.json holds every (model, length) point of the spec's profile."""
  path = run_folder.report_profile(campaign_dir)
  if not path.exists():
    return False
  points = json.loads(path.read_text()).get('points', [])
  return len(points) == len(spec.profile.models or spec.models) * len(spec.profile.lengths)


class Campaign:
  """A campaign folder: its groups, their jobs (jobs.json) and the launcher that runs them
  (None for --status). device_memory_gib: passed to the group jobs (memory.device_memory_bytes);
  assume_tflops: --estimate without a device to time on (estimate.estimate_hours)."""

  def __init__(self, spec, campaign_dir, launcher, poll_s: float, device_memory_gib=None,
               assume_tflops=None):
    self.spec, self.dir, self.launcher, self.poll_s = spec, campaign_dir, launcher, poll_s
    self.device_memory_gib, self.assume_tflops = device_memory_gib, assume_tflops
    self.groups = plan_lib.plan(spec, campaign_dir)
    self.jobs_path = run_folder.jobs_file(campaign_dir)
    self.jobs = json.loads(self.jobs_path.read_text()) if self.jobs_path.exists() else {}

  @property
  def group_names(self) -> list[str]:
    return [plan_lib.group_name(key) for key in self.groups]

  def group_finished(self, name: str) -> bool:
    if name == PROFILE_JOB:
      return profile_finished(self.spec, self.dir)
    if name.startswith(ESTIMATE_JOB):
      return estimate_lib.estimate_finished(self.spec, self.dir, self.estimated_group(name))
    return all(sweep.finished(run) for run in self.groups[plan_lib.group_key(name)])

  def make_job(self, name: str):
    if name == PROFILE_JOB:
      return jobs_lib.ProfileJob(jobs_lib.profile_argv(self.spec, self.dir))
    if name.startswith(ESTIMATE_JOB):
      key = self.estimated_group(name)
      return jobs_lib.ProfileJob(estimate_lib.estimate_argv(
          self.spec, self.dir, key, self.groups[key][0].config, self.assume_tflops))
    key = plan_lib.group_key(name)
    runs, cell = self.groups[key], plan_lib.key_parts(key)[0]
    return jobs_lib.GroupJob(runs[0].spec, runs[0].head, [run.seed for run in runs],
                             plan_lib.run_overrides(self.spec, cell),
                             str(run_folder.cell_dir(self.dir, cell)), self.device_memory_gib)

  def estimated_group(self, name: str) -> tuple:
    """The first group key of an estimate job's config (estimate.profile_name)."""
    return next(key for key in self.groups
                if ESTIMATE_JOB + estimate_lib.profile_name(key) == name)

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
      state = launch.JOB_STATE[entry['launcher']](entry['job_id'])
    return 'failed' if state == 'ended' else state

  def unfinished(self) -> list[str]:
    """The groups (then the profile, if the spec wants it) that have not finished."""
    names = self.group_names + ([PROFILE_JOB] if self.spec.profile.enabled else [])
    return [name for name in names if not self.group_finished(name)]

  def adopt_live_jobs(self, waiting: list, live: dict, attempts: dict) -> None:
    """Moves the jobs of an earlier driver that still run from `waiting` to `live`."""
    for name in list(waiting):
      if self.job_state(name) in ('queued', 'running'):
        print(f'{name}: job {self.jobs[name]["job_id"]} of an earlier run is still there; '
              'waiting for it.', flush=True)
        live[name] = self.jobs[name]
        attempts[name] = 1
        waiting.remove(name)

  def collect_ended(self, waiting: list, live: dict, attempts: dict, failures: list) -> None:
    """Takes the ended jobs out of `live`: done, resubmitted once, or failed for good."""
    for name in list(live):
      if self.job_state(name) not in ('done', 'failed'):
        continue
      entry = live.pop(name)
      if self.group_finished(name):
        print(f'{name}: done (job {entry["job_id"]}).', flush=True)
        continue
      log = launch.log_path(run_folder.jobs_dir(self.dir), entry['job_id'])
      line = launch.last_error_line(log)
      if attempts[name] < ATTEMPTS:
        print(f'{name}: job {entry["job_id"]} failed ({line}); resubmitting once, to resume '
              'from its checkpoints.', flush=True)
        waiting.insert(0, name)
      else:
        failures.append((name, log, line))

  def submit_waiting(self, waiting: list, live: dict, attempts: dict) -> None:
    """Submits waiting jobs while the launcher has a free slot."""
    while waiting:
      slot = self.launcher.free_slot(live)
      if slot is False:
        return
      name = waiting.pop(0)
      job_id = self.launcher.submit(self.make_job(name), slot)
      attempts[name] += 1
      live[name] = self.jobs[name] = {'launcher': self.launcher.name, 'job_id': job_id,
                                      'gpu': slot}
      run_folder.write_json_atomically(self.jobs_path, self.jobs)
      print(f'{name}: submitted job {job_id}{"" if slot is None else f" on GPU {slot}"} '
            f'(log {launch.log_path(run_folder.jobs_dir(self.dir), job_id)}).', flush=True)

  def run_jobs(self, names: list) -> list:
    """Runs the named jobs to the end; returns (name, log, last error line) of those that failed
    twice."""
    waiting = [n for n in names if not self.group_finished(n)]
    live, attempts, failures = {}, {n: 0 for n in waiting}, []
    self.adopt_live_jobs(waiting, live, attempts)
    while waiting or live:
      self.collect_ended(waiting, live, attempts, failures)
      self.submit_waiting(waiting, live, attempts)
      if live:
        time.sleep(self.poll_s)
    return failures

  def report_files(self) -> list[str]:
    """The names of the files in <campaign>/report (tables, figure, Table 2's profile)."""
    folder = run_folder.report_dir(self.dir)
    return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []

  def report_is_current(self) -> bool:
    """Whether the report was made after the last run finished (and the profile was written)."""
    sources = [*run_folder.result_files(self.dir), run_folder.report_profile(self.dir)]
    newest = max((p.stat().st_mtime for p in sources if p.exists()), default=0)
    tables = [run_folder.report_dir(self.dir) / name for name in ('table1.md', 'mqar.md')]
    return any(t.exists() and t.stat().st_mtime >= newest for t in tables)  # LRA's or MQAR's

  def make_report(self) -> list:
    from lra_luna import report  # pylint: disable=g-import-not-at-top  (matplotlib when due)
    profile = run_folder.report_profile(self.dir)
    return report.make_report(self.dir, profile=profile if profile.exists() else None,
                              out_dir=run_folder.report_dir(self.dir))

  def status_lines(self) -> list[str]:
    """Each run's state, its latest logged step and its best validation accuracy so far."""
    width = 44 + max((len(cell) + 1 for cell in plan_lib.cells(self.spec) if cell), default=0)
    lines = [f'{"run":{width}} {"state":12} {"step":>12} {"best val acc":>12}  job']
    for key, runs in self.groups.items():
      name, cell = plan_lib.group_name(key), plan_lib.key_parts(key)[0]
      state = self.job_state(name)
      job = self.jobs.get(name, {}).get('job_id', '-')
      for run in runs:
        rows = run_folder.read_jsonl(run.workdir / run_folder.METRICS_FILE)
        step = max((row['step'] for row in rows), default=0)
        accuracies = [row['val_accuracy'] for row in rows if 'val_accuracy' in row]
        best = f'{max(accuracies):.4f}' if accuracies else '-'
        run_state = 'done' if sweep.finished(run) else state
        label = f'{cell}/{run.name}' if cell else run.name
        lines.append(f'{label:{width}} {run_state:12} {f"{step}/{run.config.num_train_steps}":>12} '
                     f'{best:>12}  {job}')
    if self.spec.profile.enabled:
      lines.append(f'{"profile (Table 2)":{width}} {self.job_state(PROFILE_JOB):12}')
    return lines
