"""benchmarks/gpu_session.sh (docs/gpu.md): its arguments and budgets refused in one line, the
size of what travels to the device machine, and its CPU dry run through every part."""

import os
import pathlib
import subprocess
import tarfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / 'benchmarks' / 'gpu_session.sh'


def run(*args, env=None, timeout=60):
  return subprocess.run(['bash', str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True,
                        timeout=timeout, env={**os.environ, **(env or {})}, check=False)


@pytest.mark.parametrize('args, env, said', [
    (['--cpu-dryrun'], {}, "error: unknown argument '--cpu-dryrun'; give --cpu-dry-run"),
    (['--cpu-dry-run'], {'BUDGET_A': '4m'}, "error: BUDGET_A='4m' is no whole number of seconds"),
    ([], {'BUDGET_S': '-1'}, "error: BUDGET_S='-1' is no whole number of seconds"),
])
def test_a_bad_argument_or_budget_stops_in_one_line_before_anything_runs(tmp_path, args, env,
                                                                         said):
  result = run(*args, env={**env, 'OUT': str(tmp_path / 'out')})
  assert result.returncode == 2 and result.stderr.startswith(said)
  assert result.stderr.count('\n') == 1 and not (tmp_path / 'out').exists()


def test_the_size_check_counts_the_tree_and_the_wheels_against_64_mib():
  result = run('--check-size')
  line = result.stdout.strip()
  assert line.startswith('travel size: working tree ') and line.endswith(
      "MiB of the device tool's 64 MiB")
  assert result.returncode == (0 if int(line.split('= ')[1].split()[0]) <= 64 else 1)


def test_a_part_without_budget_is_skipped_in_one_line(tmp_path):
  out, work = tmp_path / 'out', tmp_path / 'work'
  result = run('--cpu-dry-run', env={'OUT': str(out), 'WORK': str(work), 'BUDGET_A': '0',
                                     'BUDGET_B': '0', 'BUDGET_C': '0'}, timeout=300)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  summary = (out / 'summary.md').read_text()
  for line in ('a. profile bfloat16: skipped: 0 s of budget left.', 'b. skipped: BUDGET_B is 0 s.',
               'c. mid groups: skipped: 0 s of budget left.'):
    assert line in summary
  assert not (work / 'generate_listops.log').exists()  # part b's data not generated for nothing


def test_the_cpu_dry_run_runs_every_part_and_archives_it(tmp_path):
  out, work = tmp_path / 'out', tmp_path / 'work'
  result = run('--cpu-dry-run', env={'OUT': str(out), 'WORK': str(work)}, timeout=900)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  log = (out / 'session.log').read_text()
  for part in ('a. profile bfloat16', 'a. profile float32', 'b. listops luna16',
               'b. listops transformer', 'c. mid groups'):
    assert f'== {part}: budget ' in log, part  # each part says its budget first
    # Part a may meet its budget on a loaded CPU (six models lowered per dtype): kept, not failed.
    ended = ('done in ',) if part[0] in 'bc' else ('done in ', 'stopped by its budget')
    assert any(f'{part}: {end}' in log for end in ended), part
  assert 'FAILED' not in log
  summary = (out / 'summary.md').read_text()
  speeds = [line for line in summary.splitlines() if line.startswith('- ')]
  b_speeds = [line for line in speeds if not line.startswith('- listops/')]
  assert [line.split(':')[0] for line in b_speeds] == ['- luna16', '- transformer']
  assert all('steps/s' in line and 'the full 6 steps take about' in line for line in b_speeds)
  # each dtype's table2.md: a row per model
  assert summary.count('| Luna-16 |') == summary.count('| Mega-chunk |') >= 2
  # Part c: the five vmapped seeds of its group finished, each with its test accuracy, and their
  # checkpoints in an archive of their own, to carry back to a later session.
  groups = [line for line in speeds if line.startswith('- listops/transformer/cls/seed')]
  assert len(groups) == 5 and all('at the last step 6' in line for line in groups)
  with tarfile.open(out / 'c_mid_checkpoints.tgz') as archive:
    seeds = {pathlib.PurePath(name).parts[4] for name in archive.getnames()
             if '/checkpoints/latest/' in name}
  assert seeds == {f'seed{k}' for k in range(5)}
  names = {p.name for p in out.iterdir()}
  assert {'session.log', 'env.txt', 'summary.md', 'a_table2.tgz', 'b_listops.tgz', 'c_mid.tgz',
          'c_mid_checkpoints.tgz'} <= names
  assert len(names) <= 8  # what the device tool returns
  env = (out / 'env.txt').read_text()
  assert 'lra_luna imports: ok' in env and 'MISSING' not in env
