"""The layout of a run folder (`--workdir`), in one place: what each file is called, where the
checkpoints go, how a folder is checked and started, and the error a run stops with.

  <workdir>/config.json                 the run's config (a rerun's is compared to it)
  <workdir>/metrics.jsonl, tb/          training and validation scalars (training/metrics.py)
  <workdir>/checkpoints/latest/<step>/  the latest checkpoint, for resuming (checkpoints.py)
  <workdir>/checkpoints/best/<step>/    the best checkpoint on validation
  <workdir>/results.json                the final validation and test metrics
  <workdir>/pretraining/                the pretraining phase of a self-pretrained run (spt.py):
                                        a run folder of its own (config, checkpoints, metrics,
                                        results.json of the pretraining)

No JAX here, and nothing of lra_luna: `report` reads run folders with this module alone, and
config_lib and spt build on it.
"""

import json
import os
import pathlib
import shutil
import tempfile

CONFIG_FILE = 'config.json'
RESULTS_FILE = 'results.json'
METRICS_FILE = 'metrics.jsonl'
TENSORBOARD_DIR = 'tb'
CHECKPOINTS_DIR = 'checkpoints'
PROFILE_FILE = 'profile.json'      # the profiler's measurements (profile, campaign, report)
LEARNING_CURVES_FILE = 'learning_curves.png'  # loss and accuracy over steps (per run, per sweep)
# results.json section ('best', 'last') -> its checkpoint folder under checkpoints/.
CHECKPOINT_FOLDERS = {'best': 'best', 'last': 'latest'}


class TrainingError(RuntimeError):
  """The run cannot go on (non-finite loss or gradient, a workdir of another run)."""


PRETRAINING_DIR = 'pretraining'


def pretraining_dir(workdir) -> pathlib.Path:
  """<workdir>/pretraining: the run folder of a run's pretraining phase."""
  return pathlib.Path(workdir) / PRETRAINING_DIR


def checkpoint_dir(workdir, which: str) -> pathlib.Path:
  """<workdir>/checkpoints/<which>: which is a folder ('latest', 'best')."""
  return pathlib.Path(workdir) / CHECKPOINTS_DIR / which


def saved_step(workdir, which: str) -> int | None:
  """The step of workdir's 'latest' or 'best' checkpoint, None if it has none. Reads the folder
  names only: nothing is opened or created."""
  folder = checkpoint_dir(workdir, which)
  steps = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
  return max(steps, default=None)


def write_json_atomically(path, data) -> None:
  """Writes JSON through a temporary file and a rename, so a reader never sees half a file. The
  file gets the mode any new file gets (0644 under the usual umask), not the temporary's 0600."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.NamedTemporaryFile('w', dir=path.parent, suffix='.tmp', delete=False) as f:
    json.dump(data, f, indent=2, sort_keys=True)
    f.write('\n')
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(f.name, 0o666 & ~umask)
  os.replace(f.name, path)


def read_jsonl(path) -> list[dict]:
  """The rows of a JSON-lines file (metrics.jsonl); [] if it does not exist."""
  path = pathlib.Path(path)
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def start_workdir(config, workdir: pathlib.Path, overwrite: bool) -> None:
  """Clears the workdir with `overwrite`, then records the config. Called (by the writing
  process) once the data and the model are ready, so that a start that fails (missing data, a
  bad option) leaves no config behind to refuse the corrected rerun."""
  try:
    if overwrite and workdir.exists():
      shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    write_json_atomically(workdir / CONFIG_FILE, json.loads(config.to_json()))
  except OSError as e:
    raise TrainingError(f'Cannot write the run folder {workdir} ({e.strerror}: {e.filename}); '
                        'choose a writable --workdir.') from None


# ----------------------------------------------------------------------------------------------
# Sweep and campaign folders: one run folder per (task, model, head, seed), and what the tools
# write beside them. Every path of them is built (and parsed) here.
#   <sweep>/<task>/<model>/<head>/seed<k>/   a run folder (sweep, campaign)
#   <campaign>/<cell>/<task>/.../seed<k>/    a run folder of a campaign cell (spec.cells)
#   <sweep>/<task>/.../seed<k>/sweep.log     the sweep's output of that run
#   <sweep>/report/                          report's tables and figure (campaign: Table 2 too)
#   <campaign>/campaign.json                 the spec and the facts report's captions state
#   <campaign>/jobs.json                     each job's latest submission
#   <campaign>/jobs/                         submitit's pickles and logs
#   <campaign>/estimate/<task>/profile.json  --estimate's profile of a task's config
#   <campaign>/estimate/<cell>/<task>/...    the same, of a cell's
#   <campaign>/estimate/memory.json          --estimate's compiled memory per seed of each group
# ----------------------------------------------------------------------------------------------
SWEEP_LOG_FILE = 'sweep.log'
REPORT_DIR = 'report'
CAMPAIGN_FILE = 'campaign.json'
JOBS_FILE = 'jobs.json'
JOBS_DIR = 'jobs'
ESTIMATE_DIR = 'estimate'
MEMORY_FILE = 'memory.json'
SEED_PREFIX = 'seed'
# What a campaign folder holds besides its runs: no cell may be named so.
CAMPAIGN_NAMES = (CAMPAIGN_FILE, JOBS_FILE, JOBS_DIR, ESTIMATE_DIR, REPORT_DIR)


def group_dir(sweep_dir, task: str, model: str, head: str) -> pathlib.Path:
  """<sweep>/<task>/<model>/<head>: the folder of one group's seeds."""
  return pathlib.Path(sweep_dir) / task / model / head


def sweep_run_dir(sweep_dir, task: str, model: str, head: str, seed: int) -> pathlib.Path:
  """<sweep>/<task>/<model>/<head>/seed<k>: the run folder of one seed of a sweep."""
  return group_dir(sweep_dir, task, model, head) / f'{SEED_PREFIX}{seed}'


def sibling_seed_dir(workdir, seed: int, other_seed: int) -> pathlib.Path | None:
  """<group>/seed<other_seed>, the folder of another seed of the same sweep group, when `workdir`
  is the sweep folder of `seed` (<group>/seed<seed>); None for a folder outside that layout."""
  workdir = pathlib.Path(workdir)
  if workdir.name != f'{SEED_PREFIX}{seed}':
    return None
  return workdir.parent / f'{SEED_PREFIX}{other_seed}'


def parse_sweep_run_dir(sweep_dir, workdir) -> tuple[str, str, str, int] | None:
  """(task, model, head, seed) of a run folder that sweep_run_dir built; None for another path."""
  try:
    parts = pathlib.Path(workdir).relative_to(sweep_dir).parts
  except ValueError:
    return None
  if len(parts) != 4 or not parts[3].startswith(SEED_PREFIX):
    return None
  seed = parts[3][len(SEED_PREFIX):]
  return (*parts[:3], int(seed)) if seed.isdigit() else None


def result_files(sweep_dir) -> list[pathlib.Path]:
  """Every results.json under a folder (a sweep, a campaign or any folder of run folders); a
  self-pretrained run's pretraining/results.json is part of its run, not a run."""
  return sorted(path for path in pathlib.Path(sweep_dir).rglob(RESULTS_FILE)
                if path.parent.name != PRETRAINING_DIR)


def report_dir(sweep_dir) -> pathlib.Path:
  return pathlib.Path(sweep_dir) / REPORT_DIR


def report_profile(sweep_dir) -> pathlib.Path:
  """<sweep>/report/profile.json: a campaign's Table 2 measurements."""
  return report_dir(sweep_dir) / PROFILE_FILE


def campaign_file(campaign_dir) -> pathlib.Path:
  return pathlib.Path(campaign_dir) / CAMPAIGN_FILE


def jobs_file(campaign_dir) -> pathlib.Path:
  return pathlib.Path(campaign_dir) / JOBS_FILE


def jobs_dir(campaign_dir) -> pathlib.Path:
  return pathlib.Path(campaign_dir) / JOBS_DIR


def cell_dir(campaign_dir, cell: str) -> pathlib.Path:
  """<campaign>/<cell>: the sweep folder of a campaign cell's runs; the campaign's own for ''
  (a spec without cells)."""
  return pathlib.Path(campaign_dir) / cell


def estimate_dir(campaign_dir, task: str, cell: str = '') -> pathlib.Path:
  """<campaign>/estimate/[<cell>/]<task>: the --estimate profile of a task's config (profile
  --out_dir), with a cell's overrides where it names one."""
  return pathlib.Path(campaign_dir) / ESTIMATE_DIR / cell / task


def estimate_profile(campaign_dir, task: str, cell: str = '') -> pathlib.Path:
  return estimate_dir(campaign_dir, task, cell) / PROFILE_FILE


def memory_file(campaign_dir) -> pathlib.Path:
  return pathlib.Path(campaign_dir) / ESTIMATE_DIR / MEMORY_FILE


CACHE_DIR_ENV = 'LRA_CACHE_DIR'


def step_memory_cache() -> pathlib.Path:
  """The per-user cache of compiled steps' memory estimates that every campaign shares:
  $LRA_CACHE_DIR, else $XDG_CACHE_HOME/lra_luna, else ~/.cache/lra_luna; step_memory.json."""
  root = os.environ.get(CACHE_DIR_ENV) or pathlib.Path(
      os.environ.get('XDG_CACHE_HOME') or pathlib.Path.home() / '.cache') / 'lra_luna'
  return pathlib.Path(root) / 'step_memory.json'
