"""benchmarks/gpu_benchmark.sh (docs/gpu.md): its arguments refused in one line before anything
runs, a part without budget skipped in one line, and its CPU dry run through every part, which a
rerun skips as finished."""

import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / 'benchmarks' / 'gpu_benchmark.sh'


def run(*args, timeout=120):
  return subprocess.run(['bash', str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True,
                        text=True, timeout=timeout, env=dict(os.environ), check=False)


@pytest.mark.parametrize('args, said', [
    (['--cpu-dryrun'], "error: unknown flag '--cpu-dryrun'"),
    (['--table2-budget', '4m'], "error: --table2-budget '4m' is no whole number"),
    (['--listops-budget', '-1'], "error: --listops-budget '-1' is no whole number"),
    (['--seed'], 'error: --seed needs a value'),
    (['--wheels', '/no/such/folder'], 'error: --wheels /no/such/folder is no folder of wheels'),
])
def test_a_bad_flag_stops_in_one_line_before_anything_runs(tmp_path, args, said):
  result = run(tmp_path / 'out', *args)
  assert result.returncode == 2 and result.stderr.startswith(said), result.stderr
  assert result.stderr.count('\n') == 1 and not (tmp_path / 'out').exists()


def test_without_an_output_folder_it_says_how_to_give_one():
  result = run('--cpu-dry-run')
  assert result.returncode == 2
  assert result.stderr == ('error: give the output folder: benchmarks/gpu_benchmark.sh OUT_DIR '
                           '[flags].\n')


def test_a_part_without_budget_is_skipped_in_one_line(tmp_path):
  out = tmp_path / 'out'
  result = run(out, '--cpu-dry-run', '--table2-budget', 0, '--listops-budget', 0,
               '--table2-models', 'transformer', '--listops-models', 'luna16', timeout=300)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  for part in ('a_bfloat16_transformer', 'a_float32_transformer', 'b_luna16_seed0'):
    assert (out / 'status' / f'{part}.txt').read_text() == 'skipped: a budget of 0 s\n'
  assert not (out / 'generate_listops.log').exists()  # no data generated for nothing
  summary = (out / 'summary.md').read_text()
  assert '- transformer: skipped: a budget of 0 s' in summary
  assert '- luna16: skipped: a budget of 0 s' in summary


def test_the_cpu_dry_run_runs_every_part_and_a_rerun_skips_them(tmp_path):
  out = tmp_path / 'out'
  # Two models in Table 2 and one in ListOps (each part is a process that compiles): the loop over
  # the lists is the script's; every model's profile and run are the profiler's and the trainer's
  # tests.
  result = run(out, '--cpu-dry-run', '--table2-models', 'transformer,mega_chunk',
               '--listops-models', 'luna16', timeout=900)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  models = ['transformer', 'mega_chunk']
  parts = [f'a_{d}_{m}' for d in ('bfloat16', 'float32') for m in models]
  parts += ['b_luna16_seed0']
  for part in parts:
    assert (out / 'status' / f'{part}.txt').read_text().startswith('done in '), part
  for dtype in ('bfloat16', 'float32'):  # one table a dtype, every model a row
    table = (out / 'table2' / dtype / 'table2.md').read_text()
    assert table.count('| Transformer |') >= 1 and table.count('| Mega-chunk |') >= 1
  assert (out / 'listops' / 'luna16' / 'seed0' / 'results.json').is_file()
  summary = (out / 'summary.md').read_text()
  assert 'commit ' in summary and 'devices ' in summary
  assert summary.count('steps/s over 6 steps logged, test accuracy') == 1
  env = (out / 'env.txt').read_text()
  assert 'MISSING' not in env and 'NO GPU' not in env
  again = run(out, '--cpu-dry-run', '--table2-models', 'transformer,mega_chunk',
               '--listops-models', 'luna16', timeout=300)  # resumable: nothing finished runs twice
  assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
  assert again.stdout.count(': done in an earlier run') == len(parts)
  assert '== ' not in again.stdout


def test_a_spent_budget_is_never_said_as_negative(tmp_path):
  """A clock second passing between the part's start and its budget check (here a `date` whose
  seconds advance at each call) still says a budget of 0 s, not -1."""
  shim = tmp_path / 'bin' / 'date'
  shim.parent.mkdir()
  shim.write_text(f'#!/bin/bash\nif [[ "$1" == +%s ]]; then\n'
                  f'  n=$(( $(cat {tmp_path}/clock 2>/dev/null || echo 1000) + 1 ))\n'
                  f'  echo $n > {tmp_path}/clock; echo $n\nelse exec /bin/date "$@"; fi\n')
  shim.chmod(0o755)
  out = tmp_path / 'out'
  result = subprocess.run(
      ['bash', str(SCRIPT), str(out), '--cpu-dry-run', '--table2-budget', '0', '--listops-budget',
       '0', '--table2-models', 'transformer', '--listops-models', 'luna16'], cwd=REPO,
      capture_output=True, text=True, timeout=300, check=False,
      env={**os.environ, 'PATH': f'{shim.parent}:{os.environ["PATH"]}'})
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  for part in ('a_bfloat16_transformer', 'a_float32_transformer'):
    assert (out / 'status' / f'{part}.txt').read_text() == 'skipped: a budget of 0 s\n'
