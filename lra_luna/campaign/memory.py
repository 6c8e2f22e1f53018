"""How much device memory a seed of a group needs, from XLA's estimate of the compiled vmapped
training step (compiled, never run), and how much memory the device has. JAX is imported only
when a step is compiled or a device asked, so the driver starts no backend for other work."""

import functools
import hashlib
import json
import time
import types

from lra_luna.campaign import plan as plan_lib
from lra_luna.training import run_folder

GIB = 2**30


def vmapped_step_bytes(config, num_seeds: int = 1) -> int | None:
  """XLA's memory estimate (arguments + outputs - aliased + temporaries, profile.compiled_memory)
  of train.train_seeds' step, vmapped over num_seeds seeds, compiled for this process's default
  device; the batch and the stacked state are shapes only, nothing is run."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from lra_luna import datasets  # pylint: disable=g-import-not-at-top
  from lra_luna import profile  # pylint: disable=g-import-not-at-top
  from lra_luna.training import steps  # pylint: disable=g-import-not-at-top
  vocab_size, num_classes = datasets.task_sizes(config.task, config.append_eos)
  model = steps.model_config(config, types.SimpleNamespace(vocab_size=vocab_size,
                                                           num_classes=num_classes))
  tx = steps.make_optimizer(config)
  graphdef, state, _ = steps.init_state(model, config.seed, tx)
  stacked = jax.tree.map(lambda x: jax.ShapeDtypeStruct((num_seeds, *x.shape), x.dtype), state)
  shape = (num_seeds, config.batch_size, config.max_length)
  batch = {name: jax.ShapeDtypeStruct(shape, jnp.int32)
           for name in (('inputs1', 'inputs2') if model.dual_encoder else ('inputs',))}
  batch['targets'] = jax.ShapeDtypeStruct(shape[:2], jnp.int32)
  keys = jax.ShapeDtypeStruct((num_seeds,), jax.random.key(0).dtype)
  step = jax.jit(jax.vmap(functools.partial(
      steps.train_step, graphdef=graphdef, tx=tx,
      accumulation_steps=config.grad_accumulation_steps)), donate_argnums=0)  # As train.train_seeds: the state is donated.
  return profile.compiled_memory(step.lower(stacked, batch, keys).compile())['estimated_bytes']


def device_memory_bytes(device_memory_gib: float | None) -> int | None:
  """The memory a program may use on this process's device: --device_memory_gib where given,
  else the device's own `bytes_limit` (memory_stats(); GPUs report it, a CPU does not), else
  None (no limit known: a group trains in one program)."""
  if device_memory_gib:
    return int(device_memory_gib * GIB)
  import jax  # pylint: disable=g-import-not-at-top
  stats = jax.devices()[0].memory_stats() or {}
  return stats.get('bytes_limit') or None


def platform() -> str:
  import jax  # pylint: disable=g-import-not-at-top
  return jax.default_backend()


def config_key(config) -> str:
  """A digest of what a group's step memory depends on: its config without the seed, with its
  gradient accumulation (left out at 1, so digests from before the field existed still hold)."""
  fields = {k: v for k, v in json.loads(config.to_json()).items() if k not in ('seed', 'preset')}
  if fields.get('grad_accumulation_steps') == 1:
    del fields['grad_accumulation_steps']
  return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def with_accumulation(config, steps: int):
  """A copy of config that accumulates its gradient over `steps` micro-batches."""
  config = config.copy_and_resolve_references()
  config.grad_accumulation_steps = steps
  return config


def cached_estimate(saved: dict, path, name: str, config, estimate) -> int | None:
  """estimate(config), kept in `saved` (written to path) under the group's name, or
  'name:grad_accumulation_steps=<k>' where it accumulates, with its config_key and platform."""
  k = config.grad_accumulation_steps
  entry_name = name if k == 1 else f'{name}:grad_accumulation_steps={k}'
  entry, where = saved.get(entry_name, {}), platform()
  if entry.get('config') != config_key(config) or entry.get('platform') != where:
    start = time.perf_counter()
    print(f'{name}: compiling its training step' + (f' with {k} micro-batches' if k > 1 else '')
          + ' for its memory estimate ...', flush=True)
    entry = {'config': config_key(config), 'platform': where, 'seed_bytes': estimate(config),
             'compile_s': time.perf_counter() - start}
    saved[entry_name] = entry
    run_folder.write_json_atomically(path, saved)
  return entry['seed_bytes']


def group_memory(groups: dict, campaign_dir, device_bytes, estimate=vmapped_step_bytes) -> dict:
  """{group name: (gradient accumulation steps, bytes one seed of its step needs, whether one
  seed fits)}: plan.fitting_accumulation on the device (one device per job: the whole batch),
  each estimate compiled once per config and platform and kept in
  <campaign>/estimate/memory.json (a full-size step compiles for seconds to minutes)."""
  path = run_folder.memory_file(campaign_dir)
  saved = json.loads(path.read_text()) if path.exists() else {}
  plans = {}
  for key, runs in groups.items():
    name, config = plan_lib.group_name(key), runs[0].config
    plans[name] = plan_lib.fitting_accumulation(
        lambda k, name=name, config=config: cached_estimate(
            saved, path, name, with_accumulation(config, k), estimate),
        device_bytes, config.grad_accumulation_steps, config.batch_size)
  return plans
