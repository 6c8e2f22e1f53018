"""Multi-device runs, and every model's steps lower for the accelerators from this CPU machine: the
training step (vmapped over seeds, the batch sharded over 4 devices of an abstract mesh, as
`train` runs it), the evaluation step (as `steps.make_evaluator` runs it) and, in float32, the
profiler's single-seed training step, exported with jax.export for 'cuda' and 'tpu' in float32,
bfloat16 and float16, with no host callback in the module and the expected device count. The fused
Transformer in 16 bits lowers to cuDNN's fused attention for cuda (JAX's trace-time cuDNN version
probe pinned to a supported stack, since this JAX has no CUDA libraries), and to XLA's attention
for tpu.

The Transformer and Luna in float32 and the cuDNN lowering run in the fast tier; every model in
float32 and bfloat16, and one model of each kind in float16, in the slow tier (conftest).
"""

import functools
import json
import os
import pathlib
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import optax
import pytest
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

from lra_luna import config_lib
from lra_luna import registry
from lra_luna.models import attention
from lra_luna.models import model_config
from lra_luna.training import steps
import tiny  # the shared tiny run (tests/tiny.py)

DEVICES = 4   # data-parallel devices of the abstract mesh
SEEDS = 2     # vmapped seeds of the training step
BATCH = 8     # global batch: 2 rows per device
LENGTH = 24   # tokens, [CLS] not counted: odd with [CLS], as the fused kernel's padding needs
PLATFORMS = ('cuda', 'tpu')
# cuDNN 9.10: a stack whose flash attention supports bf16/fp16 with padding masks.
PINNED_CUDNN_VERSION = 91000
CUDNN_ATTENTION = ('__cudnn$fmhaSoftmax', '__cudnn$fmhaSoftmaxBackward')
HOST_CALLBACKS = ('callback', 'host_compute', 'SendToHost', 'RecvFromHost', 'py_func')


def tiny_model(name: str, dtype: str) -> model_config.ModelConfig:
  config = config_lib.set_model(config_lib.base_config(), name)
  model = registry.get(name)
  config.model.attention_options.update(model.test_options)
  config.model.update(dim=16, num_heads=2, num_layers=1, ffn_dim=32, classifier_dim=16,
                      pack_length=4, dtype=dtype, vocab_size=11, num_classes=3,
                      max_length=LENGTH)
  return model_config.ModelConfig.from_config(config.model)


def spec(shape, dtype, mesh=None, partition=PartitionSpec()):
  sharding = None if mesh is None else NamedSharding(mesh, partition)
  return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


def abstract(tree, mesh=None, seed_axis=False):
  """ShapeDtypeStructs of a state (replicated over `mesh`), with a leading seed axis if asked."""
  lead = (SEEDS,) if seed_axis else ()
  return jax.tree.map(lambda x: spec(lead + x.shape, x.dtype, mesh), tree)


def batch_specs(mesh=None, seed_axis=False, weights=False):
  lead = (SEEDS,) if seed_axis else ()
  partition = PartitionSpec(None, 'data') if seed_axis else PartitionSpec('data')
  batch = {'inputs': spec(lead + (BATCH, LENGTH), jnp.int32, mesh, partition),
           'targets': spec(lead + (BATCH,), jnp.int32, mesh, partition)}
  if weights:
    batch['weights'] = spec((BATCH,), jnp.float32, mesh, partition)
  return batch


def exported_steps(name: str, dtype: str, platforms, devices: int = DEVICES) -> dict:
  """{'train', 'eval', 'profile'}: the jax.export.Exported of each step of a tiny `name`, the
  train and eval steps' batch sharded over `devices` (1: no mesh). The profiler's step (the
  single-seed training step) only in float32: in 16 bits it differs from 'train' by the vmap."""
  tx = optax.adamw(1e-3)
  graphdef, state, _ = steps.init_state(tiny_model(name, dtype), 0, tx)
  mesh = (AbstractMesh((devices,), ('data',), axis_types=(AxisType.Auto,)) if devices > 1
          else None)
  key = jax.eval_shape(lambda: jax.random.key(0))
  seed_keys = spec((SEEDS,), key.dtype, mesh)
  train = jax.vmap(functools.partial(steps.train_step, graphdef=graphdef, tx=tx))
  evaluate = jax.vmap(functools.partial(steps.eval_step, graphdef=graphdef), in_axes=(0, 0, None))
  profile = functools.partial(steps.train_step, graphdef=graphdef, tx=tx)
  seeded = abstract(state, mesh, seed_axis=True)
  cudnn_only = tuple(jax.export.DisabledSafetyCheck.custom_call(t) for t in CUDNN_ATTENTION)
  export = lambda f: jax.export.export(jax.jit(f), platforms=platforms,
                                       disabled_checks=cudnn_only)
  exported = {
      'train': export(train)(seeded, batch_specs(mesh, seed_axis=True), seed_keys),
      'eval': export(evaluate)(seeded['params'], seeded['constants'],
                               batch_specs(mesh, weights=True)),
  }
  if dtype == 'float32':
    exported['profile'] = export(profile)(abstract(state), batch_specs(), key)
  return exported


def check_exported(exported: dict, platforms, devices: int = DEVICES) -> None:
  for step, module in exported.items():
    text = module.mlir_module()
    assert module.platforms == platforms
    assert module.nr_devices == (1 if step == 'profile' else devices), step
    found = [c for c in HOST_CALLBACKS if c.lower() in text.lower()]
    assert not found, f'{step} step has host callbacks: {found}'


def fused_kernels(exported) -> set:
  return set(re.findall(r'__cudnn\$fmha\w+', exported.mlir_module()))


FAST_TIER_EXPORTS = ('transformer', 'luna16')  # float32: the fast tier's own test
# float16 differs from bfloat16 by the loss-scaling step around the model, the same code for
# every model: one model of each kind of layer (softmax and nested attention, the SSMs, Mega).
FLOAT16_EXPORTS = ('transformer', 'luna16', 's4d', 's5', 'lru', 'mega_chunk')


@pytest.mark.parametrize('name', FAST_TIER_EXPORTS)
def test_float32_steps_export_for_cuda_and_tpu(name):
  check_exported(exported_steps(name, 'float32', PLATFORMS), PLATFORMS)


@pytest.mark.parametrize('dtype, name', [
    (dtype, name) for dtype in ('float32', 'bfloat16', 'float16') for name in registry.MODELS
    if (name, dtype) not in [(n, 'float32') for n in FAST_TIER_EXPORTS]
    and (dtype != 'float16' or name in FLOAT16_EXPORTS)])
def test_every_models_steps_export_for_cuda_and_tpu(name, dtype):
  check_exported(exported_steps(name, dtype, PLATFORMS), PLATFORMS)


@pytest.fixture
def pinned_cudnn(monkeypatch):
  """JAX asks the installed cuDNN for its version when it traces cuDNN attention; this CPU-only
  JAX has none, so the probe answers a supported version (the compute-capability checks see no
  GPU and take the pre-Hopper limits, which the tiny head dim meets)."""
  from jax._src.cudnn import fused_attention_stablehlo
  monkeypatch.setattr(fused_attention_stablehlo, 'check_cudnn_version',
                      lambda: PINNED_CUDNN_VERSION)


@pytest.mark.parametrize('dtype', ['bfloat16', 'float16'])
def test_16_bit_fused_transformer_lowers_to_cudnn_attention_for_cuda(dtype, pinned_cudnn):
  """On one device: JAX lowers the cuDNN call's sharding only with real devices present, so an
  abstract mesh is refused ('AbstractMesh cannot be used when jaxpr contains primitives that
  require devices to be present during lowering')."""
  with attention.target_platform('cuda'):
    exported = exported_steps('transformer_fused', dtype, ('cuda',), devices=1)
  check_exported(exported, ('cuda',), devices=1)
  assert fused_kernels(exported['train']) == set(CUDNN_ATTENTION)  # forward and backward
  assert fused_kernels(exported['eval']) == {CUDNN_ATTENTION[0]}


def test_fused_transformer_lowers_to_xla_attention_for_tpu_and_in_float32(pinned_cudnn):
  with attention.target_platform('tpu'):
    exported = exported_steps('transformer_fused', 'bfloat16', ('tpu',), devices=1)
    assert not fused_kernels(exported['train'])
  with attention.target_platform('cuda'):
    exported = exported_steps('transformer_fused', 'float32', ('cuda',), devices=1)
    assert not fused_kernels(exported['train'])


# ----------------------------------------------------------------------------------------------
# A multi-device run on this machine: 8 forced CPU devices.
# ----------------------------------------------------------------------------------------------
REPO = pathlib.Path(__file__).resolve().parents[1]
# The quick config's eval batch (250) and data, on the tiny model (tests/tiny.py): the test is the
# eval batch's padding over 8 devices, not the model's size.
SHORT_QUICK = {'num_train_steps': 4, 'warmup_steps': 2, 'eval_every': 4, 'checkpoint_every': 4,
               'log_every': 2, 'listops.num_train': 256, 'listops.num_val': 500,
               'listops.num_test': 300, 'progress_bar': False,
               **{key: tiny.SETTINGS[key] for key in ('model.dim', 'model.num_heads',
                                                      'model.num_layers', 'model.ffn_dim',
                                                      'model.classifier_dim')}}


def quick_listops_results(tmp_path, data_dir, devices: int) -> dict:
  """results.json of the README's first command (quick ListOps, eval batch 250), shortened and
  on the tiny model, on `devices` forced CPU devices."""
  workdir = tmp_path / f'devices{devices}'
  args = [sys.executable, str(REPO / 'run_lra.py'), '--config',
          f'{REPO}/configs/listops.py:luna16,quick', '--workdir', str(workdir),
          f'--config.data_dir={data_dir}', *(f'--config.{k}={v}' for k, v in SHORT_QUICK.items())]
  env = dict(os.environ, JAX_PLATFORMS='cpu', CI='1',
             XLA_FLAGS=tiny.xla_flags(f'--xla_force_host_platform_device_count={devices}'))
  done = subprocess.run(args, env=env, capture_output=True, text=True)
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads((workdir / 'results.json').read_text())


def test_quick_listops_runs_on_8_devices_with_eval_batch_250(tmp_path):
  """250 does not divide over 8 devices: evaluation runs batches of 256 whose 6 extra rows
  weigh 0, so every example counts once and the metrics are the one-device run's."""
  data_dir = tmp_path / 'data'
  eight = quick_listops_results(tmp_path, data_dir, 8)
  one = quick_listops_results(tmp_path, data_dir, 1)
  num_test = SHORT_QUICK['listops.num_test']
  assert eight['last']['test_examples'] == one['last']['test_examples'] == num_test
  for key in ('val_accuracy', 'test_accuracy', 'val_loss', 'test_loss'):
    assert eight[key] == pytest.approx(one[key], rel=1e-4, abs=1e-4), key
  assert eight['precision'] == {'dtype': 'float32', 'loss_scaling': False, 'platform': 'cpu',
                                'matmul_precision': 'default',
                                'attention_implementation': 'vanilla'}


def test_eval_batch_rounds_up_to_a_multiple_of_the_devices(monkeypatch):
  config = config_lib.load_config('configs/listops.py:luna16,quick')
  assert steps.eval_batch_size(config) == 250
  monkeypatch.setattr(jax, 'device_count', lambda: 8)
  assert steps.eval_batch_size(config) == 256


def test_each_process_gets_its_local_devices(monkeypatch):
  monkeypatch.delenv('JAX_LOCAL_DEVICE_IDS', raising=False)
  monkeypatch.delenv('LOCAL_RANK', raising=False)
  assert steps.local_device_ids() is None
  monkeypatch.setenv('LOCAL_RANK', '3')
  assert steps.local_device_ids() == [3]
  monkeypatch.setenv('JAX_LOCAL_DEVICE_IDS', '2,3')
  assert steps.local_device_ids() == [2, 3]
