"""sweep: resume, failure reporting, vmap grouping, and vmapped seeds = seeds run alone."""

import json
import pathlib

import pytest

from lra_luna import sweep
from lra_luna.training import run_folder, train
import tiny  # the shared tiny run (tests/tiny.py)

# ml_collections' config_flags loads config files with the deprecated load_module().
pytestmark = pytest.mark.filterwarnings('ignore:the load_module:DeprecationWarning')

CONFIG = str(pathlib.Path(__file__).resolve().parent.parent / 'configs' / 'listops.py')
SPEC = f'{CONFIG}:luna16,quick'
# The shared tiny ListOps run (tests/tiny.py), 20 steps, one checkpoint.
TINY = tiny.overrides(num_train_steps=20, eval_every=10, checkpoint_every=20, log_every=10)


def sweep_args(sweep_dir, seeds='0,1,2', mode='sequential', extra=()):
  return ['--config', SPEC, '--seeds', seeds, '--mode', mode, '--sweep_dir', str(sweep_dir),
          '--override', *TINY, *extra]


def planned(sweep_dir, seeds=(0, 1, 2), extra=()):
  return {run.seed: run for run in sweep.plan([SPEC], list(seeds), [], [*TINY, *extra], sweep_dir)}


def fabricate_finished(run):
  run.workdir.mkdir(parents=True)
  (run.workdir / run_folder.CONFIG_FILE).write_text(run.config.to_json())
  (run.workdir / run_folder.RESULTS_FILE).write_text(json.dumps({'seed': run.seed}))


def fabricate_unfinished(run, step):
  (run.workdir / 'checkpoints' / 'latest' / str(step)).mkdir(parents=True)
  (run.workdir / run_folder.CONFIG_FILE).write_text(run.config.to_json())


@pytest.fixture
def recorded(monkeypatch):
  """Replaces the subprocess runner: (commands run, seeds to fail with exit status 1)."""
  calls, failing = [], set()

  def fake_run(command, log_path):
    calls.append(command)
    seed = int(next(c for c in command if c.startswith('--config.seed=')).split('=')[1])
    return 1 if seed in failing else 0

  monkeypatch.setattr(sweep, 'run_command', fake_run)
  return calls, failing


def test_layout_and_command(tmp_path):
  run = planned(tmp_path, seeds=(3,))[3]
  assert run.workdir == tmp_path / 'listops' / 'luna16' / 'cls' / 'seed3'
  assert run.config.seed == 3 and run.config.num_train_steps == 20
  assert run.flags[-2:] == ('--config.model.head=cls', '--config.seed=3')


def test_resume_runs_only_what_is_missing(tmp_path, recorded):
  calls, _ = recorded
  runs = planned(tmp_path)
  fabricate_finished(runs[0])
  fabricate_unfinished(runs[1], step=10)
  assert sweep.main(sweep_args(tmp_path)) == 0
  assert [c for c in calls[0] if c.startswith('--workdir=')] == [f'--workdir={runs[1].workdir}']
  assert [c for c in calls[1] if c.startswith('--workdir=')] == [f'--workdir={runs[2].workdir}']
  assert len(calls) == 2
  assert f'--config={SPEC}' in calls[0] and '--config.num_train_steps=20' in calls[0]


def test_failing_seed_is_reported_and_others_run(tmp_path, recorded, capsys):
  calls, fail = recorded
  fail.add(1)
  assert sweep.main(sweep_args(tmp_path)) == 1
  assert len(calls) == 3
  err = capsys.readouterr().err
  assert 'listops/luna16/cls/seed1: exit status 1' in err
  assert str(tmp_path / 'listops' / 'luna16' / 'cls' / 'seed1' / 'sweep.log') in err
  assert 'seed0' not in err and 'seed2' not in err


def test_finished_run_of_another_config_is_an_error(tmp_path, recorded):
  calls, _ = recorded
  fabricate_finished(planned(tmp_path)[0])
  assert sweep.main(sweep_args(tmp_path, extra=['learning_rate=0.5'])) == 2
  assert not calls


def test_override_of_seed_is_refused(tmp_path, recorded):
  assert sweep.main(sweep_args(tmp_path, extra=['seed=4'])) == 2


def test_the_sweep_loads_without_jax():
  """A sequential sweep's runs are run_lra.py processes: its own process, which only plans and
  waits, does not load JAX (seconds); --mode vmap loads the trainer when it trains."""
  proc, loaded = tiny.libraries_loaded('import lra_luna.sweep', cwd=pathlib.Path(CONFIG).parents[1])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert loaded == [], loaded


def test_vmap_groups_unfinished_seeds_by_resume_step(tmp_path, monkeypatch):
  groups = []
  monkeypatch.setattr(train, 'train_seeds', lambda config, seeds, workdirs: groups.append(
      (list(seeds), [pathlib.Path(w).name for w in workdirs])), raising=False)
  runs = planned(tmp_path, seeds=(0, 1, 2, 3))
  fabricate_finished(runs[0])
  fabricate_unfinished(runs[2], step=10)
  assert sweep.main(sweep_args(tmp_path, seeds='0,1,2,3', mode='vmap')) == 0
  assert sorted(groups) == [([1, 3], ['seed1', 'seed3']), ([2], ['seed2'])]


def test_vmap_group_failure_is_reported_and_others_run(tmp_path, monkeypatch, capsys):
  groups = []

  def fake_train_seeds(config, seeds, workdirs):
    groups.append(list(seeds))
    if 2 in seeds:
      raise run_folder.TrainingError('boom')

  monkeypatch.setattr(train, 'train_seeds', fake_train_seeds, raising=False)
  runs = planned(tmp_path, seeds=(1, 2))
  fabricate_unfinished(runs[2], step=10)
  assert sweep.main(sweep_args(tmp_path, seeds='1,2', mode='vmap')) == 1
  assert sorted(groups) == [[1], [2]]
  err = capsys.readouterr().err
  assert 'seed2: TrainingError: boom' in err and str(runs[2].log) in err
  assert 'boom' in runs[2].log.read_text()


def test_mean_p_is_planned_only_for_luna(tmp_path):
  transformer = f'{CONFIG}:transformer,quick'
  runs = sweep.plan([SPEC, transformer], [0], ['cls', 'mean_p'], TINY, tmp_path)
  assert sorted((r.config.model_name, r.head) for r in runs) == [
      ('luna16', 'cls'), ('luna16', 'mean_p'), ('transformer', 'cls')]


def test_vmapped_seeds_match_seeds_run_alone(tmp_path):
  data = ['data_dir=' + str(tmp_path / 'data')]
  assert sweep.main(sweep_args(tmp_path / 'vmap', seeds='0,1', mode='vmap', extra=data)) == 0
  runs = planned(tmp_path / 'vmap', seeds=(0, 1), extra=data)
  vmapped = {seed: json.loads((run.workdir / run_folder.RESULTS_FILE).read_text())
             for seed, run in runs.items()}
  # Seed 1, the second member of the stack, run alone (seed 0 is the stack's first slot, the
  # easy one to get right by accident).
  alone = train.train_and_evaluate(runs[1].config, tmp_path / 'alone' / 'seed1')
  for section in ('last', 'best'):
    for key in ('val_accuracy', 'val_loss', 'test_accuracy', 'test_loss', 'step'):
      assert vmapped[1][section][key] == pytest.approx(alone[section][key], abs=1e-4), (
          section, key)
  assert vmapped[0]['last']['val_loss'] != pytest.approx(vmapped[1]['last']['val_loss'],
                                                         abs=1e-6)  # seeds differ


@pytest.mark.parametrize('heads', ['cls,meanp', 'meanp', ','])
def test_an_unknown_head_stops_before_anything_runs(tmp_path, recorded, capsys, heads):
  with pytest.raises(SystemExit) as stop:
    sweep.main(sweep_args(tmp_path, extra=('--heads', heads)))
  err = capsys.readouterr().err
  assert stop.value.code == 2 and recorded[0] == []
  assert err.count('\n') == 1 and '--heads' in err and 'valid choices: cls, mean, mean_p' in err
  assert not any(tmp_path.iterdir())


@pytest.mark.parametrize('extra, said', [
    (('--seeds', '0,0'), 'argument --seeds: 0 is given twice; give each entry once'),
    (('--heads', 'cls,cls'), 'argument --heads: cls is given twice; give each entry once'),
    (('--heads', 'cls,meanp'), "'meanp' is unknown (did you mean 'mean_p'?)"),
])
def test_a_repeated_or_misspelt_list_entry_stops_before_anything_runs(tmp_path, recorded,
                                                                      capsys, extra, said):
  with pytest.raises(SystemExit) as stop:
    sweep.main([*sweep_args(tmp_path), *extra])
  err = capsys.readouterr().err
  assert stop.value.code == 2 and recorded[0] == [] and not any(tmp_path.iterdir())
  assert err.count('\n') == 1 and said in err


def test_a_config_given_twice_stops_before_anything_runs(tmp_path, recorded, capsys):
  assert sweep.main([*sweep_args(tmp_path, seeds='0'), '--config', SPEC]) == 2
  err = capsys.readouterr().err
  assert recorded[0] == [] and err.count('\n') == 1
  assert 'make the same runs' in err and 'give each config once' in err


def test_a_head_no_config_can_pool_stops_before_anything_runs(tmp_path, recorded, capsys):
  spec = f'{CONFIG}:transformer,quick'
  args = ['--config', spec, '--seeds', '0', '--sweep_dir', str(tmp_path), '--heads', 'mean_p',
          '--override', *TINY]
  assert sweep.main(args) == 2 and recorded[0] == []
  err = capsys.readouterr().err
  assert err.count('\n') == 1
  assert 'no --config can pool it' in err and 'model transformer pools cls, mean only' in err


def test_a_head_one_of_two_configs_can_pool_is_skipped_for_the_other(tmp_path, capsys):
  runs = sweep.plan([SPEC, f'{CONFIG}:transformer,quick'], [0], ['cls', 'mean_p'], TINY,
                    tmp_path)
  assert sorted((r.config.model.attention, r.head) for r in runs) == [
      ('luna', 'cls'), ('luna', 'mean_p'), ('softmax', 'cls')]
  out = capsys.readouterr().out
  assert 'skipping head mean_p: model transformer pools cls, mean only' in out
  assert 'no P' not in out and 'luna16' not in out
