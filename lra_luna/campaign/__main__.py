"""`python -m lra_luna.campaign SPEC --dir DIR [...]`: the command line of the campaign driver
(lra_luna/campaign/__init__.py says what a campaign is)."""

import json
import os
import pathlib
import sys
import traceback

from lra_luna import campaign as campaign_package
from lra_luna import cli
from lra_luna.campaign import driver as driver_lib
from lra_luna.campaign import estimate as estimate_lib
from lra_luna.campaign import launch
from lra_luna.campaign import memory
from lra_luna.campaign import plan as plan_lib
from lra_luna.campaign import spec as spec_lib
from lra_luna.training import host_memory
from lra_luna.training import run_folder
import lra_luna


def parse_args(argv):
  parser = cli.ArgumentParser(
      prog='python -m lra_luna.campaign', description=campaign_package.__doc__,
      epilog='First time: python -m lra_luna.campaign campaigns/quick.py --dir '
      'runs/campaign_quick checks the whole pipeline on a CPU; --estimate --memory_only plans '
      'a full campaign\'s memory without timing anything (README, "The campaign").')
  parser.add_argument('spec', help='campaign spec, e.g. campaigns/quick.py')
  parser.add_argument('--dir', required=True, help='campaign folder (runs, jobs, report)')
  parser.add_argument('--launcher', choices=('local', 'slurm'), default='local',
                      help='where the jobs run: this machine or a Slurm cluster')
  parser.add_argument('--override', action='extend', nargs='+', default=[], metavar='KEY=VALUE',
                      help='config field for every run, e.g. num_train_steps=60 (as sweep)')
  parser.add_argument('--status', action='store_true', help="print each run's state and exit")
  parser.add_argument('--report', action='store_true',
                      help='make the tables now from the finished runs, submit nothing')
  parser.add_argument('--estimate', action='store_true',
                      help="print each group's memory plan, then the campaign's device-hours "
                      "from each task's profile (run as jobs on the launcher); train nothing")
  parser.add_argument('--device_memory_gib', type=float, default=None,
                      help="the jobs' device memory (default: the device's bytes_limit where it "
                      'reports one); seeds per program are planned against it')
  parser.add_argument('--memory_only', action='store_true',
                      help='--estimate: print the memory plan only (no profiling jobs)')
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
  if args.memory_only and not args.estimate:
    parser.error('--memory_only goes with --estimate (it prints only the memory plan)')
  bad = [item for item in args.sbatch if '=' not in item]
  if bad:
    parser.error(f'--sbatch {bad[0]!r}: expected key=value, e.g. qos=high')
  return args


def make_launcher(args, campaign_dir):
  if args.launcher == 'slurm':
    return launch.SlurmLauncher(run_folder.jobs_dir(campaign_dir), args)
  return launch.LocalLauncher(run_folder.jobs_dir(campaign_dir), args.max_jobs, args.time_min)


def print_failures(failures) -> int:
  print(f'{len(failures)} jobs failed twice:', file=sys.stderr)
  for name, log, line in failures:
    print(f'  {name}: {line} (log {log})', file=sys.stderr)
  return 1


def run_estimate(campaign, args) -> int:
  """--estimate: the memory plan (compiled here, before anything is submitted), then the
  device-hours from each task's profile, run as jobs."""
  device_bytes = memory.device_memory_bytes(args.device_memory_gib)
  if device_bytes is None:
    raise spec_lib.CampaignError('--estimate: this machine\'s device reports no memory size; '
                                 'give the jobs\' with --device_memory_gib, e.g. 80.')
  group_memory = memory.group_memory(campaign.groups, campaign.dir, device_bytes)
  estimate_lib.print_memory_plan(estimate_lib.memory_rows(campaign.groups, group_memory,
                                                          device_bytes),
                                 device_bytes, memory.platform())
  if args.memory_only:
    return 0
  print(estimate_lib.timing_plan(campaign.spec, memory.platform(), args.assume_tflops),
        flush=True)
  failures = campaign.run_jobs([driver_lib.ESTIMATE_JOB + name
                                for name in estimate_lib.profile_names(campaign.groups)])
  if failures:
    return print_failures(failures)
  estimate_lib.print_hours(estimate_lib.estimate_hours(campaign.groups, campaign.dir,
                                                       args.assume_tflops), args.assume_tflops)
  return 0


def run_campaign(campaign, args) -> int:
  """Trains what is unfinished, then the profile, then the report; says so when nothing is left."""
  todo = campaign.unfinished()
  if not todo and not args.report and campaign.report_is_current():
    print(f'Nothing to do: every run of this campaign has finished and its report is current. '
          f'{run_folder.report_dir(campaign.dir)} holds: {", ".join(campaign.report_files())}.')
    return 0
  if not args.report:
    groups = [name for name in todo if name != driver_lib.PROFILE_JOB]
    failures = campaign.run_jobs(groups)
    if not failures and driver_lib.PROFILE_JOB in todo:
      failures = campaign.run_jobs([driver_lib.PROFILE_JOB])
    if failures:
      return print_failures(failures)
  campaign.make_report()
  print(f'{"Report made" if args.report else "Campaign finished"}. '
        f'{run_folder.report_dir(campaign.dir)} holds: {", ".join(campaign.report_files())}.')
  return 0


def start(args, campaign_dir: pathlib.Path) -> int:
  """Loads and checks the spec, then runs what the flags ask."""
  spec = spec_lib.load_spec(args.spec)
  spec_lib.add_overrides(spec, args.override)
  spec_lib.check_spec_matches(campaign_dir, spec, args.force)
  if args.status:
    if not run_folder.campaign_file(campaign_dir).exists():
      raise spec_lib.CampaignError(f'{campaign_dir} holds no campaign '
                                   f'({run_folder.CAMPAIGN_FILE} missing).')
    print('\n'.join(driver_lib.Campaign(spec, campaign_dir, None, args.poll_s).status_lines()))
    return 0
  launcher = make_launcher(args, campaign_dir)
  campaign = driver_lib.Campaign(spec, campaign_dir, launcher, args.poll_s,
                                 args.device_memory_gib, args.assume_tflops)
  if args.force:
    plan_lib.clear_stale_runs(campaign.groups)
  run_folder.write_json_atomically(run_folder.campaign_file(campaign_dir), {
      'spec': json.loads(spec.to_json()), 'facts': plan_lib.facts(spec, campaign.groups)})
  print(f'Campaign {spec.name or args.spec}: {len(campaign.groups)} groups '
        f'({sum(map(len, campaign.groups.values()))} runs) with the {launcher.name} launcher'
        f'{f", {launcher.max_jobs} at a time" if args.launcher == "local" else ""}.', flush=True)
  for line in plan_lib.skipped_heads(spec):
    print(line, flush=True)
  return run_estimate(campaign, args) if args.estimate else run_campaign(campaign, args)


def main(argv=None) -> int:
  args = parse_args(argv)
  host_memory.one_heap_for_every_thread()  # For the jobs it starts (their environment).
  if lra_luna.CHECKOUT:  # Jobs unpickle lra_luna: make a checkout's importable where they start.
    os.environ['PYTHONPATH'] = os.pathsep.join(
        filter(None, [str(lra_luna.CHECKOUT), os.environ.get('PYTHONPATH')]))
  try:
    return start(args, pathlib.Path(args.dir).absolute())
  except (spec_lib.CampaignError, ValueError, FileNotFoundError) as e:
    if args.verbosity:
      traceback.print_exc()
    print(f'error: {e}', file=sys.stderr)
    return 1


if __name__ == '__main__':
  sys.exit(main())
