"""What the tools write for the user: one writer that keeps progress bars whole, plain progress
lines when stderr is no terminal (the data generators too), learning curves per run and per
sweep, one-line argument errors naming the flag, TensorFlow's start-up lines silenced."""

import argparse
import json
import os
import pathlib
import runpy
import signal
import subprocess
import sys
import tomllib
import types

import pytest
import tqdm

from lra_luna import cli
from lra_luna import config_lib
from lra_luna import console
from lra_luna import learning_curves
from lra_luna.datasets import listops
from lra_luna.training import run_folder

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_a_line_written_during_a_bar_leaves_the_bar_whole(capsys):
  """tqdm.write clears the bar, writes the line, and draws the bar again below it (print would
  append the line to the bar's own line)."""
  from lra_luna.training import train  # pylint: disable=g-import-not-at-top
  bar = tqdm.tqdm(total=10, desc='demo bar', file=sys.stderr)
  capsys.readouterr()
  train.say(True, 'seed 0 step 5: val accuracy 0.5000, loss 1.0000')
  out, err = capsys.readouterr()
  bar.close()
  assert out == 'seed 0 step 5: val accuracy 0.5000, loss 1.0000\n'
  assert err.startswith('\r') and 'demo bar' in err  # cleared, then drawn again


@pytest.mark.parametrize('ci, interval, lines', [('', 0.0, 3), ('', 3600.0, 0), ('1', 0.0, 0)])
def test_progress_is_plain_lines_off_a_terminal(capsys, monkeypatch, ci, interval, lines):
  monkeypatch.setenv('CI', ci)
  with console.Progress(3, 'validation at step 10', 'batch', interval=interval) as progress:
    assert progress.mode == ('off' if ci else 'lines')
    for _ in range(3):
      progress.update(1)
  err = capsys.readouterr().err
  assert '\r' not in err and len(err.splitlines()) == lines
  if lines:
    assert err.splitlines()[-1] == 'validation at step 10: 3/3 batch, 0:00:00 left'


def test_the_listops_generator_writes_no_bar_into_a_file(tmp_path, capsys, monkeypatch):
  monkeypatch.delenv('CI', raising=False)
  listops.generate_listops(tmp_path, num_train=40, num_val=5, num_test=5, min_length=4,
                           max_length=30, max_depth=3, max_args=4, progress=True)
  assert '\r' not in capsys.readouterr().err


def write_metrics(workdir: pathlib.Path, offset: float) -> None:
  workdir.mkdir(parents=True)
  rows = [{'step': s, 'train_loss': offset + 1 / s, 'train_accuracy': 0.5} for s in (1, 2, 3, 4)]
  rows += [{'step': 4, 'val_loss': offset + 0.3, 'val_accuracy': 0.6}]
  (workdir / run_folder.METRICS_FILE).write_text(''.join(json.dumps(r) + '\n' for r in rows))


def test_learning_curves_of_a_run_and_of_a_sweep(tmp_path):
  assert learning_curves.series([{'step': 2, 'a': 1.0}, {'step': 1, 'a': 3.0}, {'step': 3}],
                                'a') == ([1, 2], [3.0, 1.0])
  from lra_luna import sweep  # pylint: disable=g-import-not-at-top
  group = tmp_path / 'listops' / 'luna16' / 'cls'
  runs = []
  for seed in (0, 1):
    write_metrics(group / f'seed{seed}', seed)
    runs.append(types.SimpleNamespace(workdir=group / f'seed{seed}', seed=seed,
                                      name=f'listops/luna16/cls/seed{seed}'))
  runs.append(types.SimpleNamespace(workdir=tmp_path / 'other' / 'seed0', seed=0, name='o/seed0'))
  sweep.write_learning_curves(runs)  # a group without metrics is left out
  assert (group / run_folder.LEARNING_CURVES_FILE).read_bytes().startswith(b'\x89PNG')
  assert not (tmp_path / 'other' / run_folder.LEARNING_CURVES_FILE).exists()
  with pytest.raises(ValueError, match='no metrics.jsonl'):
    learning_curves.plot([tmp_path / 'other'], tmp_path / 'x.png')


def one_line_error(capsys, call) -> str:
  with pytest.raises(SystemExit) as exit_info:
    call()
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert err.startswith('error: ') and err.count('\n') == 1, err
  return err


def test_argument_errors_are_one_line_naming_the_flag(capsys, monkeypatch, tmp_path):
  from lra_luna import evaluate, predict, sweep  # pylint: disable=g-import-not-at-top
  err = one_line_error(capsys, lambda: sweep.main(
      ['--config', 'configs/listops.py:luna16,quick', '--seeds', '0,x', '--sweep_dir', 'x']))
  assert "--seeds: 'x' is not an integer" in err and 'python -m lra_luna.sweep --help' in err
  assert '--checkpoint' in one_line_error(
      capsys, lambda: evaluate.main([str(tmp_path), '--checkpoint', 'worst']))
  assert '--checkpoint' in one_line_error(
      capsys, lambda: predict.main([str(tmp_path), 'x', '--checkpoint', 'worst']))
  for script, args in (('generate_listops.py', []), ('generate_pathfinder.py', []),
                       ('import_lra_release.py', ['release'])):
    monkeypatch.setattr(sys, 'argv', [script, *args, '--no_such_flag'])
    err = one_line_error(capsys, lambda: runpy.run_path(str(REPO / 'data' / script),
                                                         run_name='__main__'))
    assert '--no_such_flag' in err and f'python data/{script} --help' in err


def test_a_mistyped_config_path_names_each_tried_path_once(monkeypatch):
  monkeypatch.chdir(REPO)
  with pytest.raises(ValueError) as error:
    config_lib.config_spec_path('configs/listop.py:luna16')
  message = str(error.value)
  assert message.count(str(REPO / 'configs' / 'listop.py')) == 1, message
  assert 'configs/listops.py' in message


def test_tensorboard_is_an_optional_extra():
  project = tomllib.loads((REPO / 'pyproject.toml').read_text())['project']
  assert project['optional-dependencies']['tensorboard'] == ['tensorboard']


def test_tensorflow_start_up_lines_are_silenced():
  """The Text and Image readers import TensorFlow: none of its C++ start-up lines (the oneDNN
  note, absl's pre-initialisation warning) reach the user."""
  code = ('from lra_luna.datasets import tfds_source; tfds_source.import_tensorflow_datasets(); '
          "print('ok')")
  env = {k: v for k, v in os.environ.items()
         if k not in ('TF_CPP_MIN_LOG_LEVEL', 'TF_ENABLE_ONEDNN_OPTS')}
  proc = subprocess.run([sys.executable, '-c', code], env=env, cwd=REPO, capture_output=True,
                        text=True, timeout=300)
  assert proc.stdout == 'ok\n'
  assert 'oneDNN' not in proc.stderr and 'absl::InitializeLog' not in proc.stderr, proc.stderr


def test_a_signal_stops_the_listops_generator_with_one_line(tmp_path):
  proc = subprocess.Popen([sys.executable, str(REPO / 'data' / 'generate_listops.py'),
                           '--out_dir', str(tmp_path / 'lo')], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  assert proc.stdout.readline().startswith('Generating ListOps into')
  proc.send_signal(signal.SIGTERM)
  _, stderr = proc.communicate(timeout=60)
  assert proc.returncode == 128 + signal.SIGTERM
  assert stderr == ('SIGTERM: stopped; no split file was written (each is written whole at the '
                    'end); rerun the same command to generate the set.\n')
  assert not list((tmp_path / 'lo').glob('*.tsv'))


def test_a_sweep_says_nothing_to_do_for_each_finished_run(tmp_path, capsys):
  from lra_luna import sweep  # pylint: disable=g-import-not-at-top
  args = ['--config', 'configs/listops.py:luna16,quick', '--seeds', '0,1', '--sweep_dir',
          str(tmp_path)]
  for run in sweep.plan(['configs/listops.py:luna16,quick'], [0, 1], [], [], tmp_path):
    run.workdir.mkdir(parents=True)
    run_folder.write_json_atomically(run.workdir / run_folder.CONFIG_FILE,
                                     json.loads(run.config.to_json()))
    run_folder.write_json_atomically(run.workdir / run_folder.RESULTS_FILE, {'steps': 1500})
  assert sweep.main(args) == 0
  out = capsys.readouterr().out.splitlines()
  for seed in (0, 1):
    workdir = tmp_path / 'listops' / 'luna16' / 'cls' / f'seed{seed}'
    assert out[seed] == (f'listops/luna16/cls/seed{seed}: nothing to do: {workdir} finished 1500 '
                         f'steps; results in {workdir / "results.json"}')
  assert out[2] == '2 runs: 2 finished before, 0 to run.'


def help_text(capsys, call) -> str:
  with pytest.raises(SystemExit) as exit_info:
    call()
  assert exit_info.value.code == 0
  return capsys.readouterr().out


def test_help_shows_the_defaults(capsys):
  from lra_luna import sweep  # pylint: disable=g-import-not-at-top
  from lra_luna.profile import sweep as profile  # pylint: disable=g-import-not-at-top
  text = help_text(capsys, lambda: profile.make_parser().parse_args(['--help']))
  assert '(default: 32)' in text and '(default: runs/profile)' in text
  assert '(default: 1024,2048,3072,4096)' in text and '(default: None)' not in text
  assert '(default: 0,1,2,3,4)' in help_text(capsys, lambda: sweep.main(['--help']))


@pytest.mark.parametrize('tool', ['report', 'campaign'])
def test_help_ends_in_users_words_not_module_lists(capsys, tool):
  from lra_luna import report  # pylint: disable=g-import-not-at-top
  from lra_luna.campaign import __main__ as campaign  # pylint: disable=g-import-not-at-top
  main = {'report': report.main, 'campaign': campaign.main}[tool]
  text = help_text(capsys, lambda: main(['--help']))
  assert 'Modules:' not in text and 'README' in ' '.join(text.rstrip().splitlines()[-2:])


def test_a_choice_list_names_the_valid_choices():
  parse = cli.choice_list(('cls', 'mean', 'mean_p'))
  assert parse('cls, mean_p') == ['cls', 'mean_p']
  for bad, said in (('cls,meanp', "'meanp' is unknown \\(did you mean 'mean_p'\\?\\)"),
                    ('cls,xyz', "'xyz' is unknown"), (',', 'names none')):
    with pytest.raises(argparse.ArgumentTypeError, match=said + '; valid choices: cls, mean, '
                       'mean_p'):
      parse(bad)


@pytest.mark.parametrize('parse, text, repeat', [
    (cli.int_list, '0,1,0', '0'),
    (cli.choice_list(('cls', 'mean', 'mean_p')), 'cls, cls', 'cls'),
    (cli.number_list('1,2,4', integers=True), '4,4', '4'),
    (cli.number_list('0.25,0.5,1'), '0.5,0.50', '0.50'),
])
def test_every_list_type_refuses_a_repeated_entry_in_one_line(parse, text, repeat):
  with pytest.raises(argparse.ArgumentTypeError) as error:
    parse(text)
  assert str(error.value) == f'{repeat} is given twice; give each entry once'


def test_a_number_list_refuses_what_it_does_not_suggest():
  parse = cli.number_list('4,8,16', integers=True)
  assert parse('4, 8') == [4, 8]
  for bad in ('0', 'abc', '2.5', '-1'):
    with pytest.raises(argparse.ArgumentTypeError, match='such as 4,8,16') as error:
      parse(bad)
    assert str(error.value).startswith(f"'{bad}' is no integer above 0; expected")
  assert cli.number_list('0.5,1')('0.25,1') == [0.25, 1.0]
