"""Training end to end on tiny ListOps: loss goes down, results.json, resume after SIGKILL,
two devices, non-finite stop, workdir refusal, best vs last, clear CLI errors."""

import json
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from lra_luna.training import checkpoints, environment, metrics, run_folder, steps, train
from lra_luna.training import results as results_lib

REPO = pathlib.Path(__file__).resolve().parents[1]
import tiny  # noqa: E402  (the shared tiny run: tests/tiny.py)

TINY = tiny.SETTINGS


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
  return tmp_path_factory.mktemp('data')


tiny_config = tiny.config


def cli_args(data_dir, workdir, **overrides):
  return [sys.executable, str(REPO / 'run_lra.py'), '--config', tiny.QUICK_LISTOPS,
          '--workdir', str(workdir), *tiny.flags(data_dir=str(data_dir), **overrides)]


def run_env(**extra):
  """The environment of a run_lra.py subprocess: CPU, CI, the suite's XLA flags (a caller's
  XLA_FLAGS, e.g. a device count, added to them, any other of the parent's dropped)."""
  env = dict(os.environ, JAX_PLATFORMS='cpu', CI='1', **extra)
  env['XLA_FLAGS'] = tiny.xla_flags(*filter(None, [extra.get('XLA_FLAGS')]))
  return env


def latest_params(workdir):
  """The parameters of the latest checkpoint, as a flat list of numpy arrays."""
  ckpt = checkpoints.Checkpoints(workdir)
  step = ckpt.latest.latest_step()
  restored = ckpt.latest.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
  ckpt.close()
  return step, [np.asarray(x) for x in jax.tree.leaves(restored['state']['params'])]


@pytest.mark.parametrize('model', ['luna16', 'transformer'])
def test_training_lowers_loss_and_writes_results(data_dir, tmp_path, model):
  config = tiny_config(data_dir, model, num_train_steps=60, learning_rate=3e-3)
  results = train.train_and_evaluate(config, tmp_path / 'run')
  written = json.loads((tmp_path / 'run' / 'results.json').read_text())
  assert written == json.loads(json.dumps(results))
  for key in ('task', 'model', 'seed', 'num_params', 'steps', 'val_accuracy', 'val_loss',
              'test_accuracy', 'test_loss'):
    assert key in written
  assert written['model'] == model and written['steps'] == 60 and written['num_params'] > 0
  assert written['best']['test_examples'] == 64  # every test example, none dropped
  rows = [r for r in run_folder.read_jsonl(tmp_path / 'run' / 'metrics.jsonl') if 'train_loss' in r]
  assert rows[-1]['train_loss'] < rows[0]['train_loss']
  assert all('steps_per_s' in r and 'grad_norm' in r for r in rows)
  assert list((tmp_path / 'run' / 'tb').iterdir())  # TensorBoard events
  curves = tmp_path / 'run' / run_folder.LEARNING_CURVES_FILE
  assert curves.read_bytes().startswith(b'\x89PNG')
  assert json.loads((tmp_path / 'run' / 'config.json').read_text())['model_name'] == model


def test_same_seed_same_result(data_dir, tmp_path):
  a = train.train_and_evaluate(tiny_config(data_dir, num_train_steps=10), tmp_path / 'a')
  b = train.train_and_evaluate(tiny_config(data_dir, num_train_steps=10), tmp_path / 'b')
  c = train.train_and_evaluate(tiny_config(data_dir, num_train_steps=10, seed=1), tmp_path / 'c')
  assert a['last'] == b['last']
  assert a['last'] != c['last']


def test_the_recorded_commit_is_the_one_at_the_start_of_the_run(data_dir, tmp_path, monkeypatch):
  """A checkout that moves on while a run trains: results.json names the code the run loaded."""
  checkout = {'commit': 'at start'}
  monkeypatch.setattr(environment, 'git_commit', lambda folder: (checkout['commit'], False))
  environment.environment_record.cache_clear()
  final_results = results_lib.final_results

  def moved_on_then_final_results(*args, **kwargs):
    checkout['commit'] = 'after training'
    return final_results(*args, **kwargs)

  monkeypatch.setattr(results_lib, 'final_results', moved_on_then_final_results)
  try:
    results = train.train_and_evaluate(tiny_config(data_dir, num_train_steps=4), tmp_path / 'a')
  finally:
    environment.environment_record.cache_clear()
  assert checkout['commit'] == 'after training'
  assert results['environment']['commit'] == 'at start'


def test_best_and_last_sections(data_dir, tmp_path):
  """A learning rate that first helps then wrecks the model: validation peaks before the end."""
  config = tiny_config(data_dir, num_train_steps=40, eval_every=5, checkpoint_every=5,
                       learning_rate=0.3, schedule='cosine', warmup_steps=20)
  results = train.train_and_evaluate(config, tmp_path / 'run')
  evals = [r for r in run_folder.read_jsonl(tmp_path / 'run' / 'metrics.jsonl') if 'val_accuracy' in r]
  accuracies = [r['val_accuracy'] for r in evals]
  best_step = evals[int(np.argmax(accuracies))]['step']
  assert results['best']['step'] == best_step
  assert results['best']['step'] < results['last']['step'] == 40
  assert results['best']['val_accuracy'] == pytest.approx(max(accuracies), abs=1e-6)
  assert results['last']['val_accuracy'] == pytest.approx(accuracies[-1], abs=1e-6)
  assert results['best']['val_accuracy'] > results['last']['val_accuracy']


@pytest.fixture(scope='module')
def reference_run(data_dir, tmp_path_factory):
  """The workdir of an uninterrupted 40-step run: what every interrupted run must match."""
  workdir = tmp_path_factory.mktemp('reference') / 'ref'
  subprocess.run(cli_args(data_dir, workdir, num_train_steps=40), env=run_env(), check=True,
                 capture_output=True)
  return workdir


def test_generated_data_is_recorded_as_generated(data_dir, reference_run):
  """The reference run's data (the quick ListOps config's generated set): its source, folder
  and generator settings in results.json (issue 12; tests/test_data_safety.py has the rest)."""
  data = json.loads((reference_run / 'results.json').read_text())['data']
  assert data['source'] == 'generated'
  assert data['path'] == str((data_dir / 'listops-quick').resolve())
  assert data['generator']['settings']['seed'] == 0
  assert data['generator']['settings']['num_train'] == TINY['listops.num_train']
  assert data['truncated'] == {'train': 0, 'validation': 0, 'test': 0}


def test_results_name_the_commit_and_machine_that_computed_them(reference_run):
  """results.json's environment: this checkout's HEAD (dirty when tracked files differ), the
  processor and the device, so that a copied number carries its provenance."""
  from lra_luna.training import environment  # pylint: disable=import-outside-toplevel
  recorded = json.loads((reference_run / 'results.json').read_text())['environment']
  repo = pathlib.Path(__file__).resolve().parent.parent
  git = subprocess.run(['git', '-C', str(repo), 'rev-parse', 'HEAD'], capture_output=True,
                       text=True)
  status = subprocess.run(['git', '-C', str(repo), 'status', '--porcelain',
                           '--untracked-files=no'], capture_output=True, text=True)
  if git.returncode == 0:
    assert recorded['commit'] == git.stdout.strip()
    assert recorded['dirty'] == bool(status.stdout.strip())
  else:
    assert recorded['commit'] is None
  assert recorded['cpu'] == environment.cpu_name() and recorded['cpu']
  assert (recorded['platform'], recorded['device_count']) == ('cpu', 1)
  assert recorded['jax'] == jax.__version__


def test_git_commit_is_none_outside_a_checkout(tmp_path):
  from lra_luna.training import environment  # pylint: disable=import-outside-toplevel
  assert environment.git_commit(tmp_path) == (None, False)


def test_kill_and_resume_matches_uninterrupted_run(data_dir, reference_run, tmp_path):
  steps = {'num_train_steps': 40}
  # Kill a second run with SIGKILL once it has written a checkpoint, then rerun the command.
  proc = subprocess.Popen(cli_args(data_dir, tmp_path / 'killed', **steps), env=run_env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  latest = tmp_path / 'killed' / 'checkpoints' / 'latest'
  deadline = time.time() + 120
  while time.time() < deadline and not (latest.exists() and any(
      p.name.isdigit() for p in latest.iterdir())):
    time.sleep(0.05)
  assert run_folder.saved_step(tmp_path / 'killed', 'latest') is not None  # killed after a save
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  assert not (tmp_path / 'killed' / 'results.json').exists()
  subprocess.run(cli_args(data_dir, tmp_path / 'killed', **steps), env=run_env(), check=True,
                 capture_output=True)
  ref = json.loads((reference_run / 'results.json').read_text())
  resumed = json.loads((tmp_path / 'killed' / 'results.json').read_text())
  assert resumed == ref
  ref_step, ref_params = latest_params(reference_run)
  step, params = latest_params(tmp_path / 'killed')
  assert step == ref_step == 40
  for a, b in zip(ref_params, params):
    np.testing.assert_array_equal(a, b)  # bitwise on CPU
  # The metrics file has each step once, however the run was interrupted.
  rows = run_folder.read_jsonl(tmp_path / 'killed' / 'metrics.jsonl')
  train_steps = [r['step'] for r in rows if 'train_loss' in r]
  assert train_steps == sorted(set(train_steps))


SHORT_RUN = {'num_train_steps': 10, 'eval_every': 5, 'log_every': 1}


@pytest.fixture(scope='module')
def one_device_run(data_dir, tmp_path_factory):
  """The workdir of a short run in one process on one device: the reference of the
  multi-device and multi-process tests."""
  workdir = tmp_path_factory.mktemp('one_device') / 'run'
  subprocess.run(cli_args(data_dir, workdir, **SHORT_RUN), env=run_env(), check=True,
                 capture_output=True)
  return workdir


def train_losses(workdir) -> list:
  return [r['train_loss'] for r in run_folder.read_jsonl(workdir / 'metrics.jsonl')
          if 'train_loss' in r]


def test_two_devices_match_one(data_dir, one_device_run, tmp_path):
  subprocess.run(cli_args(data_dir, tmp_path / 'two', **SHORT_RUN),
                 env=run_env(XLA_FLAGS='--xla_force_host_platform_device_count=2'), check=True,
                 capture_output=True)
  one, two = train_losses(one_device_run), train_losses(tmp_path / 'two')
  assert len(one) == 10
  np.testing.assert_allclose(one, two, rtol=1e-4, atol=1e-5)


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(data_dir, tmp_path, monkeypatch):
  real_step = steps.train_step

  def poisoned_step(state, batch, dropout_key, **kwargs):
    state, step_metrics = real_step(state, batch, dropout_key, **kwargs)
    bad = state['step'] > 12
    state = dict(state, params=jax.tree.map(lambda p: jnp.where(bad, jnp.nan, p), state['params']))
    step_metrics['train_loss'] = jnp.where(bad, jnp.nan, step_metrics['train_loss'])
    return state, step_metrics

  monkeypatch.setattr(steps, 'train_step', poisoned_step)
  # One line naming the first bad step and the few finite steps before it, not every step's loss.
  message = (r'Non-finite loss.*at step 13: train_loss nan.*before it: train_loss \[[0-9.]+, '
             r'[0-9., ]*\], grad_norm.*last good checkpoint')
  with pytest.raises(run_folder.TrainingError, match=message):
    train.train_and_evaluate(tiny_config(data_dir), tmp_path / 'run')
  step, params = latest_params(tmp_path / 'run')
  assert step == 10
  assert all(np.isfinite(p).all() for p in params)


def test_workdir_of_another_config_is_refused(data_dir, tmp_path):
  train.train_and_evaluate(tiny_config(data_dir, num_train_steps=5), tmp_path / 'run')
  with pytest.raises(run_folder.TrainingError, match='different config.*learning_rate.*--overwrite'):
    train.train_and_evaluate(tiny_config(data_dir, num_train_steps=5, learning_rate=0.5),
                             tmp_path / 'run')
  results = train.train_and_evaluate(tiny_config(data_dir, num_train_steps=5, learning_rate=0.5),
                                     tmp_path / 'run', overwrite=True)
  assert results['steps'] == 5


def test_batch_that_does_not_divide_devices_is_refused(data_dir, tmp_path, monkeypatch):
  monkeypatch.setattr(jax, 'device_count', lambda: 3)
  with pytest.raises(ValueError, match='batch_size = 8 does not divide over 3 devices'):
    train.train_and_evaluate(tiny_config(data_dir), tmp_path / 'run')


def test_accumulation_that_does_not_divide_the_per_device_batch_is_refused(data_dir, tmp_path,
                                                                           monkeypatch):
  monkeypatch.setattr(jax, 'device_count', lambda: 2)  # 4 rows per device: 8 micro-batches is
  # too many
  with pytest.raises(ValueError, match=r'config\.grad_accumulation_steps = 8 .* divides the '
                     r'per-device batch \(2 devices\), 4'):
    train.train_and_evaluate(tiny_config(data_dir, grad_accumulation_steps=8), tmp_path / 'run')


def test_cli_reports_bad_input_in_one_line(data_dir, tmp_path):
  bad = tmp_path / 'bad_data' / 'listops-1000'
  bad.mkdir(parents=True)
  for name in ('basic_train.tsv', 'basic_val.tsv', 'basic_test.tsv'):
    (bad / name).write_text('Source\tTarget\n( [MAX 2 9 ] )\t9\n( [MAX 2 9 ] )\n')
  proc = subprocess.run(cli_args(tmp_path / 'bad_data', tmp_path / 'run', data_source='release'),
                        env=run_env(), capture_output=True, text=True)
  assert proc.returncode != 0
  assert 'basic_train.tsv' in proc.stderr and 'line 3' in proc.stderr
  assert 'Traceback' not in proc.stderr
  proc = subprocess.run(cli_args(data_dir, tmp_path / 'run2', **{'model.head': 'maxpool'}),
                        env=run_env(), capture_output=True, text=True)
  assert proc.returncode != 0 and "valid choices: ['cls', 'mean', 'mean_p']" in proc.stderr
  assert 'Traceback' not in proc.stderr


def free_port():
  import socket
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def test_two_processes_match_one(data_dir, one_device_run, tmp_path):
  """Two JAX processes (as on two hosts; gloo collectives on CPU), each reading its own shard."""
  address = f'localhost:{free_port()}'
  procs = [subprocess.Popen(cli_args(data_dir, tmp_path / 'two', **SHORT_RUN), env=run_env(
      JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES='2', JAX_PROCESS_ID=str(i)),
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for i in range(2)]
  for proc in procs:
    assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()[-2000:]
  two_losses = train_losses(tmp_path / 'two')
  assert len(two_losses) == 10
  np.testing.assert_allclose(train_losses(one_device_run), two_losses, rtol=1e-4, atol=1e-5)
  one = json.loads((one_device_run / 'results.json').read_text())
  two = json.loads((tmp_path / 'two' / 'results.json').read_text())
  assert two['last']['test_examples'] == one['last']['test_examples'] == 64
  assert two['last']['test_accuracy'] == pytest.approx(one['last']['test_accuracy'], abs=1e-6)


def test_training_path_never_imports_tensorflow(data_dir, tmp_path):
  """Models, training, the ListOps and Pathfinder paths and the profiler run where only JAX is
  installed: TensorFlow is made unimportable and a short run must still finish."""
  code = f'''
import sys
sys.modules['tensorflow'] = None  # any `import tensorflow` now raises ImportError
sys.path.insert(0, {str(REPO)!r})
import lra_luna.training.train, lra_luna.profile, lra_luna.sweep, lra_luna.report
import lra_luna.datasets.listops, lra_luna.datasets.pathfinder, lra_luna.datasets.retrieval
sys.argv = {cli_args(data_dir, tmp_path / 'run', num_train_steps=2)[1:]!r}
import runpy
runpy.run_path(sys.argv[0], run_name='__main__')
'''
  proc = subprocess.run([sys.executable, '-c', code], env=run_env(), capture_output=True,
                        text=True)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert (tmp_path / 'run' / 'results.json').exists()


def wait_for(predicate, timeout=120):
  deadline = time.time() + timeout
  while time.time() < deadline and not predicate():
    time.sleep(0.05)


@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGTERM])
def test_interrupt_saves_the_current_step_and_resumes_exactly(data_dir, reference_run, tmp_path,
                                                              signum):
  """Ctrl-C or a cluster's SIGTERM mid-run: a checkpoint at the step reached, one line with the
  command to resume, no traceback; the resumed run ends as the uninterrupted one."""
  workdir = tmp_path / 'stopped'
  command = cli_args(data_dir, workdir, num_train_steps=40)
  proc = subprocess.Popen(command, env=run_env(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
  # Past the first log step (5), so that training is under way.
  wait_for(lambda: any(r.get('step', 0) >= 5 for r in run_folder.read_jsonl(
      workdir / 'metrics.jsonl')))
  proc.send_signal(signum)
  stderr = proc.communicate(timeout=120)[1]
  assert proc.returncode == 128 + signum, stderr[-2000:]
  assert 'Traceback' not in stderr
  line = stderr.strip().splitlines()[-1]
  name = signal.Signals(signum).name
  # The signal may land in a step or in a validation pass (stopped after its current batch).
  match = re.fullmatch(rf'{name}: stopped (?:during the validation )?at step (\d+) of 40, '
                       r'checkpoint saved at step (\d+)(?: \(its validation runs again on '
                       r'resume\))?; resume with: python (.*)', line)
  assert match, line
  step, saved = int(match[1]), int(match[2])
  assert 5 <= step == saved < 40 and run_folder.saved_step(workdir, 'latest') == step
  assert shlex.split(match[3]) == command[1:]
  assert not (workdir / 'results.json').exists()
  if signum == signal.SIGTERM:
    return  # The same save and resume as SIGINT's, checked below once.
  subprocess.run(command, env=run_env(), check=True, capture_output=True)
  assert (json.loads((workdir / 'results.json').read_text())
          == json.loads((reference_run / 'results.json').read_text()))
  for a, b in zip(latest_params(reference_run)[1], latest_params(workdir)[1]):
    np.testing.assert_array_equal(a, b)


def test_second_interrupt_stops_at_once():
  code = '''
import os, signal, time
from lra_luna.training.train import StopSignals
with StopSignals() as stop:
  stop.enter('train', immediate=False)  # a phase that stops at its next safe point
  os.kill(os.getpid(), signal.SIGINT)
  time.sleep(0.2)
  print(stop.signal_name, flush=True)
  os.kill(os.getpid(), signal.SIGINT)
  time.sleep(30)
print('not reached')
'''
  proc = subprocess.run([sys.executable, '-c', code], env=run_env(), capture_output=True,
                        text=True, cwd=REPO, timeout=60)
  assert proc.returncode == 128 + signal.SIGINT
  assert proc.stdout == 'SIGINT\n'
  assert proc.stderr == 'error: second SIGINT: stopped at once, without saving.\n'


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='glibc only')
@pytest.mark.parametrize('block_mib', [64, 2304])
def test_freed_step_sized_blocks_are_reused_without_page_faults(block_mib):
  """A block of a step's temporary buffers (64 MiB; 2.25 GiB, over the 2 GiB a C-int threshold
  could name, as Luna-16 at 4K batch 8 needs) freed and allocated again: glibc maps it anew from
  the kernel (a fault per 4 KiB page) until reuse_freed_host_memory keeps it in the heap."""
  code = '''
import resource, sys
from lra_luna.training import steps

def faults_of_a_fresh_block():
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  bytearray(int(sys.argv[1]) << 20)  # malloc'ed, every page zeroed, freed (numpy: huge pages)
  return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

faults_of_a_fresh_block()
without = faults_of_a_fresh_block()
steps.reuse_freed_host_memory()
faults_of_a_fresh_block()
print(without, faults_of_a_fresh_block())
'''
  proc = subprocess.run([sys.executable, '-c', code, str(block_mib)], env=run_env(),
                        capture_output=True, text=True, cwd=REPO, check=True, timeout=120)
  without, reused = map(int, proc.stdout.split())
  if without < 1000:
    pytest.skip(f'this kernel maps the block in {without} faults already (huge pages)')
  assert reused < without / 10, (without, reused)


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='glibc only')
def test_a_step_larger_than_a_thread_heap_reuses_its_buffers():
  """A jitted step with a 128 MiB temporary (over the 64 MiB a glibc thread heap holds): with
  reuse_freed_host_memory called before JAX starts, its second call faults in almost nothing;
  without it, every call maps the temporary afresh."""
  code = '''
import resource, sys
import jax, jax.numpy as jnp
from lra_luna.training import steps
if sys.argv[1] == 'reuse':
  steps.reuse_freed_host_memory()
# tanh(a b) is a [4096, 8192] float32 temporary (128 MiB) that the second matmul reads.
step = jax.jit(lambda a, b: jnp.sum(jnp.tanh(jnp.dot(a, b)) @ b.T))
a, b = jnp.ones((4096, 256)), jnp.ones((256, 8192))
faults = []
for _ in range(3):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  step(a, b).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(faults[-1])
'''
  faults = {}
  for mode in ('plain', 'reuse'):
    proc = subprocess.run([sys.executable, '-c', code, mode], env=run_env(), capture_output=True,
                          text=True, cwd=REPO, check=True, timeout=120)
    faults[mode] = int(proc.stdout.split()[-1])
  if faults['plain'] < 1000:
    pytest.skip(f"this machine maps the temporary in {faults['plain']} faults already")
  assert faults['reuse'] < faults['plain'] / 10, faults


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='glibc only')
def test_a_threads_large_buffer_is_reused_on_one_heap_and_children_inherit_it():
  """A 128 MiB buffer allocated three times on another thread: with one_heap_for_every_thread
  called first, the third allocation faults in almost nothing (the main heap keeps the block);
  without it the thread's own heap maps it afresh each time. The processes it starts get
  MALLOC_ARENA_MAX=1."""
  code = '''
import os, resource, subprocess, sys, threading
from lra_luna.training import host_memory
if sys.argv[1] == 'one_heap':
  assert host_memory.one_heap_for_every_thread()
host_memory.keep_freed_blocks_in_heap()
faults = []
def allocate():
  for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    block = bytearray(128 << 20)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
thread = threading.Thread(target=allocate)
thread.start()
thread.join()
child = subprocess.run([sys.executable, '-c', 'import os; print(os.environ.get("MALLOC_ARENA_MAX"))'],
                       capture_output=True, text=True, check=True).stdout.strip()
print(faults[-1], child)
'''
  out = {}
  for mode in ('plain', 'one_heap'):
    env = {k: v for k, v in run_env().items() if k != 'MALLOC_ARENA_MAX'}
    proc = subprocess.run([sys.executable, '-c', code, mode], env=env, capture_output=True,
                          text=True, cwd=REPO, check=True, timeout=120)
    faults, child = proc.stdout.split()
    out[mode] = (int(faults), child)
  assert out['plain'][1] == 'None' and out['one_heap'][1] == '1'
  if out['plain'][0] < 1000:
    pytest.skip(f"this machine maps the buffer in {out['plain'][0]} faults already")
  assert out['one_heap'][0] < out['plain'][0] / 10, out


@pytest.mark.parametrize('entry_point', ['run_lra.py', 'lra_luna.sweep'])
def test_an_entry_point_sets_one_heap_before_numpy_or_jax_load(entry_point):
  """run_lra.py and `python -m lra_luna.sweep` call one_heap_for_every_thread before numpy or JAX
  is imported (after, OpenBLAS's and XLA's threads already have heaps of their own), and their
  environment then says MALLOC_ARENA_MAX=1 for the processes they start."""
  code = f'''
import os, runpy, sys
from lra_luna.training import host_memory
loaded = []
real = host_memory.one_heap_for_every_thread
def recorded():
  loaded.append(sorted(m for m in ('numpy', 'jax') if m in sys.modules))
  return real()
host_memory.one_heap_for_every_thread = recorded
sys.argv = ['{entry_point}', '--help']
try:
  if '{entry_point}'.endswith('.py'):
    runpy.run_path('{entry_point}', run_name='__main__')
  else:
    runpy.run_module('{entry_point}', run_name='__main__', alter_sys=True)
except SystemExit:
  pass
print('LOADED', loaded, os.environ.get('MALLOC_ARENA_MAX'))
'''
  env = {k: v for k, v in run_env().items() if k != 'MALLOC_ARENA_MAX'}
  proc = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                        cwd=REPO, timeout=120)
  line = [line for line in proc.stdout.splitlines() if line.startswith('LOADED')]
  expected = '1' if sys.platform.startswith('linux') else 'None'
  assert line == [f'LOADED [[]] {expected}'], proc.stdout[-2000:] + proc.stderr[-2000:]


def test_top_level_flag_mistakes_get_one_line(data_dir, tmp_path):
  misspelt = [a if a != '--workdir' else '--work_dir' for a in cli_args(data_dir, tmp_path)]
  without_workdir = cli_args(data_dir, tmp_path)
  at = without_workdir.index('--workdir')
  del without_workdir[at:at + 2]
  for args, fragment in ((misspelt, "Unknown command line flag 'work_dir'. Did you mean: "
                                    'workdir'),
                         (without_workdir, '--workdir is required')):
    proc = subprocess.run(args, env=run_env(), capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith('error: ') and proc.stderr.count('\n') == 1, proc.stderr
    assert fragment in proc.stderr


def test_config_and_results_files_get_the_usual_mode(tmp_path):
  umask = os.umask(0)
  os.umask(umask)
  run_folder.write_json_atomically(tmp_path / 'results.json', {'a': 1})
  assert (tmp_path / 'results.json').stat().st_mode & 0o777 == 0o666 & ~umask
  assert json.loads((tmp_path / 'results.json').read_text()) == {'a': 1}


def test_report_reads_run_folders_without_jax():
  proc, loaded = tiny.libraries_loaded(
      'import lra_luna.report', (*tiny.TRAINING_LIBRARIES, 'numpy', 'tensorflow'), env=run_env(),
      cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert loaded == []


def test_periodic_work_is_due_every_n_steps_and_at_the_end():
  assert [s for s in range(1, 13) if train.itstime(s, 5, 12)] == [5, 10, 12]


def test_progress_lines_show_the_logged_loss_and_leave_out_the_compile(tmp_path, monkeypatch,
                                                                       capsys):
  """stderr is no terminal here: plain lines. Their loss is the metrics.jsonl row's, and the
  speed is counted from the end of the first step (a 1 s "compile" here)."""
  monkeypatch.delenv('CI', raising=False)
  config = tiny_config(tmp_path, num_train_steps=20, progress_bar=True)
  writer = metrics.MetricWriter(tmp_path)
  monitor = metrics.TrainingMonitor(config, [0], [tmp_path], [writer],
                                    schedule=lambda step: 0.1, enabled=True)
  assert monitor.mode == 'lines'
  time.sleep(1.0)  # The first step compiles.
  for step in range(1, 11):
    monitor.step_done(step, {'train_loss': jnp.array([step / 10]), 'grad_norm': jnp.ones(1)})
  monitor.flush(10)
  monitor.close()
  row = run_folder.read_jsonl(tmp_path / 'metrics.jsonl')[-1]
  assert row['step'] == 10 and row['train_loss'] == pytest.approx(0.55)
  line = capsys.readouterr().err.strip().splitlines()[-1]
  match = re.fullmatch(r'train step 10/20: loss (\S+), (\S+) steps/s, (\S+) left', line)
  assert match, line
  assert match[1] == f'{row["train_loss"]:.4f}'
  assert float(match[2]) > 20 and row['steps_per_s'] > 20  # 9 steps in far less than 1 s


def count_evaluations(monkeypatch) -> list:
  """Patches the evaluator so that every evaluation pass appends its split's size."""
  passes = []
  real = steps.make_evaluator

  def counting_evaluator(config, graphdef, mesh, objective=None):
    evaluate = real(config, graphdef, mesh, objective)

    def counted(state, arrays, on_batch=None):
      passes.append(len(arrays['targets']))
      return evaluate(state, arrays, on_batch)
    return counted

  monkeypatch.setattr(steps, 'make_evaluator', counting_evaluator)
  return passes


def test_final_results_evaluate_each_checkpoint_once(data_dir, tmp_path, monkeypatch):
  """Best = last (one validation, at the end): the loop's validation and one test pass, reused
  for both sections, with the numbers a fresh evaluation of the checkpoint gives."""
  passes = count_evaluations(monkeypatch)
  config = tiny_config(data_dir, num_train_steps=10, eval_every=10, checkpoint_every=10)
  results = train.train_and_evaluate(config, tmp_path / 'run')
  assert len(passes) == 2  # validation at step 10, then the test split once
  assert results['best'] == results['last'] and results['last']['step'] == 10
  from lra_luna import evaluate  # pylint: disable=g-import-not-at-top
  fresh = evaluate.evaluate_workdir(tmp_path / 'run')
  assert fresh['last'] == results['last'] and fresh['best'] == results['best']


def test_distinct_best_and_last_are_each_tested_once(data_dir, tmp_path, monkeypatch):
  passes = count_evaluations(monkeypatch)
  config = tiny_config(data_dir, num_train_steps=40, eval_every=5, checkpoint_every=5,
                       learning_rate=0.3, schedule='cosine', warmup_steps=20)
  results = train.train_and_evaluate(config, tmp_path / 'run')
  assert results['best']['step'] < 40
  assert len(passes) == 8 + 2  # 8 validations in the loop, a test pass per checkpoint


def test_rerunning_a_finished_run_does_nothing(data_dir, tmp_path, monkeypatch, capsys):
  config = tiny_config(data_dir, num_train_steps=5)
  results = train.train_and_evaluate(config, tmp_path / 'run')
  (tmp_path / 'run' / run_folder.LEARNING_CURVES_FILE).unlink()
  monkeypatch.setattr(train.datasets, 'load_task', None)  # nothing may load data again
  capsys.readouterr()
  again = train.train_and_evaluate(config, tmp_path / 'run')
  assert again == json.loads(json.dumps(results))
  assert capsys.readouterr().out == (f'nothing to do: {tmp_path / "run"} finished 5 steps; '
                                     f'results in {tmp_path / "run" / "results.json"}\n')
  assert (tmp_path / 'run' / run_folder.LEARNING_CURVES_FILE).exists()  # an older run gets it


def test_smoke_word_keeps_the_shapes_and_shortens_the_run():
  from lra_luna import config_lib  # pylint: disable=g-import-not-at-top
  full = config_lib.load_config('configs/listops.py:luna16,paper')
  smoke = config_lib.load_config('configs/listops.py:luna16,paper,smoke')
  assert smoke.smoke and not full.smoke
  differing = {k for k, v in config_lib.flatten(smoke).items() if config_lib.flatten(full)[k] != v}
  assert differing - {'preset'} == {'smoke', 'num_train_steps', 'eval_every', 'checkpoint_every', 'log_every',
                       'max_eval_batches', 'dataset_name', 'listops.num_train',
                       'listops.num_val', 'listops.num_test', 'batch_size', 'eval_batch_size'}
  steps = config_lib.SMOKE_STEPS
  assert (smoke.num_train_steps, smoke.eval_every, smoke.max_eval_batches) == (steps, steps, 2)
  assert smoke.batch_size == min(full.batch_size, 8) and smoke.eval_batch_size == 8
  # The generated set holds the examples the test reads (the last evaluation batch a part one),
  # in a folder of its own.
  assert smoke.listops.num_train == steps * smoke.batch_size
  assert smoke.listops.num_val == smoke.listops.num_test == 2 * 8 - 4
  assert smoke.dataset_name == full.dataset_name + '-smoke'
  assert (smoke.model.to_dict(), smoke.max_length) == (full.model.to_dict(), full.max_length)
  # Every task config honours it; an explicit override still wins.
  for task in ('text', 'retrieval', 'image', 'pathfinder', 'pathx'):
    assert config_lib.load_config(f'configs/{task}.py:luna16,smoke').num_train_steps == steps
  pathx = config_lib.load_config('configs/pathx.py:luna16,smoke')
  assert pathx.pathfinder.generate_if_missing and pathx.dataset_name.endswith('-smoke')
  pathfinder = config_lib.load_config('configs/pathfinder.py:luna16,smoke')
  assert pathfinder.pathfinder.num_images * 8 // 10 >= steps * pathfinder.batch_size
  assert config_lib.load_config('configs/listops.py:luna16,smoke',
                                ['--config.num_train_steps=7']).num_train_steps == 7


def test_smoke_run_is_marked_in_results(tmp_path):
  from lra_luna import config_lib  # pylint: disable=g-import-not-at-top
  tiny_model = [f'--config.{k}={v}' for k, v in TINY.items() if k.startswith('model.')]
  config = config_lib.load_config('configs/listops.py:luna16,quick,smoke',
                                  [f'--config.data_dir={tmp_path / "data"}', *tiny_model])
  results = train.train_and_evaluate(config, tmp_path / 'run')
  steps = config_lib.SMOKE_STEPS
  assert results['steps'] == steps and results['last']['test_examples'] == 12
  assert 'smoke test' in results['data']['smoke']
  assert results['data']['path'].endswith('listops-quick-smoke')
  assert results['data']['examples'] == {'train': steps * 8, 'validation': 12, 'test': 12}


# Each phase with the signal sent there and the line it must give (after the signal's name).
PHASE_LINES = {
    'data': (signal.SIGTERM, r'stopped while reading the data, no checkpoint saved yet'),
    'model': (signal.SIGINT, r'stopped while building the model and restoring its checkpoint, '
                             r'no checkpoint saved yet'),
    'compile': (signal.SIGTERM, r'stopped at step 0 of 40, no checkpoint \(no step finished\)'),
    'validate': (signal.SIGINT, r'stopped during the validation at step 10 of 40, checkpoint '
                                r'saved at step 10 \(its validation runs again on resume\)'),
    'checkpoint': (signal.SIGTERM, r'stopped at step 10 of 40, checkpoint saved at step 10'),
    'final': (signal.SIGINT, r'stopped during the final evaluation \(training finished at step '
                             r'40\), latest checkpoint at step 40, best at step \d+; '
                             r'results.json not written'),
}


@pytest.mark.parametrize('phase', list(PHASE_LINES))
def test_a_signal_in_each_phase_gives_one_true_line_and_resumes(data_dir, reference_run,
                                                                tmp_path, phase):
  """The run waits in `phase` (LRA_LUNA_PAUSE_IN) for the signal: exit 128 + signal, one line
  (what ran, what is saved, the command), no traceback; the same command then finishes as the
  uninterrupted run, and once more says there is nothing to do."""
  signum, expected = PHASE_LINES[phase]
  workdir = tmp_path / 'run'
  command = cli_args(data_dir, workdir, num_train_steps=40)
  proc = subprocess.Popen(command, env=run_env(LRA_LUNA_PAUSE_IN=phase),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  for line in proc.stderr:
    if line.startswith(f'pausing in phase {phase}'):
      break
  proc.send_signal(signum)
  stderr = proc.stderr.read()
  assert proc.wait(timeout=120) == 128 + signum, stderr
  assert 'Traceback' not in stderr and len(stderr.strip().splitlines()) == 1, stderr
  name = signal.Signals(signum).name
  match = re.fullmatch(rf'{name}: {expected}; resume with: python (.*)', stderr.strip())
  assert match, stderr
  assert shlex.split(match[1]) == command[1:]
  if phase in ('data', 'model', 'compile'):
    assert run_folder.saved_step(workdir, 'latest') is None
    return  # Nothing saved: the rerun is a fresh start, as the other tests run it.
  if phase == 'checkpoint':
    assert run_folder.saved_step(workdir, 'latest') == 10
    return  # Resuming from a step's checkpoint: test_interrupt_saves_the_current_step_...
  subprocess.run(command, env=run_env(), check=True, capture_output=True)
  assert (json.loads((workdir / 'results.json').read_text())
          == json.loads((reference_run / 'results.json').read_text()))
  val_steps = [r['step'] for r in run_folder.read_jsonl(workdir / 'metrics.jsonl')
               if 'val_accuracy' in r]
  assert val_steps == [10, 20, 30, 40]  # the interrupted validation ran once, on resume
  if phase != 'final':
    return
  again = subprocess.run(command, env=run_env(), check=True, capture_output=True, text=True)
  assert again.stdout.startswith(f'nothing to do: {workdir} finished 40 steps; results in '
                                 f'{workdir / "results.json"}\n')


def test_a_signal_to_a_sweep_reaches_its_run_once_and_stops_the_sweep(data_dir, tmp_path):
  """SIGTERM to a sequential sweep while its run validates: the run saves (validation redone on
  resume), and the sweep's one line quotes the run's and gives the command that resumes."""
  overrides = tiny.overrides(data_dir=str(data_dir), num_train_steps=20)
  args = ['--config', f'{REPO}/configs/listops.py:luna16,quick', '--seeds', '0',
          '--sweep_dir', str(tmp_path / 'sweep'), '--override', *overrides]
  proc = subprocess.Popen([sys.executable, '-m', 'lra_luna.sweep', *args],
                          env=run_env(LRA_LUNA_PAUSE_IN='validate'), cwd=REPO,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  workdir = tmp_path / 'sweep' / 'listops' / 'luna16' / 'cls' / 'seed0'
  wait_for(lambda: 'pausing in phase validate' in ((workdir / 'sweep.log').read_text()
                                                   if (workdir / 'sweep.log').exists() else ''))
  proc.send_signal(signal.SIGTERM)
  stderr = proc.communicate(timeout=120)[1]
  assert proc.returncode == 128 + signal.SIGTERM, stderr
  assert stderr.strip().splitlines()[-1] == (
      'SIGTERM: stopped in run listops/luna16/cls/seed0, which said: "SIGTERM: stopped during '
      'the validation at step 10 of 20, checkpoint saved at step 10 (its validation runs again '
      f'on resume)"; resume the sweep with: {shlex.join(["python", "-m", "lra_luna.sweep", *args])}')
  assert run_folder.saved_step(workdir, 'latest') == 10


def test_the_closing_line_gives_the_test_accuracy_beside_what_guessing_gives():
  run = {'task': 'listops', 'model': 'luna16', 'seed': 2, 'steps': 300, 'test_accuracy': 0.375,
         'test_majority_rate': 0.1725, 'best': {'step': 200, 'test_accuracy': 0.4}}
  assert results_lib.closing_line(run) == (
      'listops / luna16, seed 2: test accuracy 37.50% at step 300, 40.00% at the best '
      'validation checkpoint (step 200); the majority class 17.25%.')
  mqar = {**run, 'task': 'mqar', 'test_chance_rate': 0.25, 'best': {}}
  assert results_lib.closing_line(mqar) == (
      'mqar / luna16, seed 2: test accuracy 37.50% at step 300; chance 25.00% (1/N).')
