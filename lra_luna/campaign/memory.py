"""How much device memory a seed of a group needs, from XLA's estimate of the compiled vmapped
training step (compiled, never run), and how much memory the device has. JAX is imported only
when a step is compiled or a device asked, so the driver starts no backend for other work."""

import functools
import hashlib
import json
import os
import time
import types

from lra_luna.campaign import plan as plan_lib
from lra_luna.training import run_folder

GIB = 2**30


# Options of the estimate's compile on a CPU: XLA assigns the step's buffers (memory_analysis())
# before the backend turns the program into machine code, so LLVM's optimisation level changes
# the code, not the estimate; level 0 compiles in about half the time
# (tests/test_campaign.py: the same bytes as the default compile, model by model).
ESTIMATE_COMPILE_OPTIONS = {'cpu': {'xla_backend_optimization_level': 0}}
# XLA's default level (3), named so that the slow path compiles with it whatever XLA_FLAGS says.
DEFAULT_COMPILE_OPTIONS = {'cpu': {'xla_backend_optimization_level': 3}}


def abstract_state(model, seed: int, tx):
  """(graphdef, state as ShapeDtypeStructs) of steps.init_state: traced, never run (a full-size
  model's eager initialisation takes longer than its lowering)."""
  import jax  # pylint: disable=g-import-not-at-top
  from lra_luna.training import steps  # pylint: disable=g-import-not-at-top
  graphdefs = []

  def init():
    graphdef, state, _ = steps.init_state(model, seed, tx)
    graphdefs.append(graphdef)
    return state
  state = jax.eval_shape(init)
  return graphdefs[0], state


def vmapped_step_bytes(config, num_seeds: int = 1, quick: bool = True) -> int | None:
  """XLA's memory estimate (arguments + outputs - aliased + temporaries, profile.compiled_memory)
  of train.train_seeds' step, vmapped over num_seeds seeds, compiled for this process's default
  device; the batch and the stacked state are shapes only, nothing is run. quick: the state's
  shapes traced (abstract_state) and ESTIMATE_COMPILE_OPTIONS; else the model initialised and
  compiled at XLA's default level (the same estimate, slower: kept to test the quick one)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from lra_luna import datasets  # pylint: disable=g-import-not-at-top
  from lra_luna import profile  # pylint: disable=g-import-not-at-top
  from lra_luna.training import steps  # pylint: disable=g-import-not-at-top
  vocab_size, num_classes = datasets.task_sizes(config.task, config.append_eos)
  model = steps.model_config(config, types.SimpleNamespace(vocab_size=vocab_size,
                                                           num_classes=num_classes))
  tx = steps.make_optimizer(config)
  if quick:
    graphdef, state = abstract_state(model, config.seed, tx)
  else:
    graphdef, state, _ = steps.init_state(model, config.seed, tx)
  stacked = jax.tree.map(lambda x: jax.ShapeDtypeStruct((num_seeds, *x.shape), x.dtype), state)
  batch = {name: jax.ShapeDtypeStruct((num_seeds, *shape), jnp.int32)
           for name, shape in steps.batch_shapes(config, model).items()}
  keys = jax.ShapeDtypeStruct((num_seeds,), jax.random.key(0).dtype)
  step = jax.jit(jax.vmap(functools.partial(
      steps.train_step, graphdef=graphdef, tx=tx,
      accumulation_steps=config.grad_accumulation_steps)), donate_argnums=0)  # As train.train_seeds: the state is donated.
  lowered = step.lower(stacked, batch, keys)
  options = (ESTIMATE_COMPILE_OPTIONS.get(jax.default_backend()) if quick
             else DEFAULT_COMPILE_OPTIONS.get(jax.default_backend()))
  compiled = lowered.compile(options) if options else lowered.compile()
  return profile.compiled_memory(compiled)['estimated_bytes']


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


def entry_name(name: str, config) -> str:
  """A group's key in memory.json: its name, with ':grad_accumulation_steps=<k>' where k > 1."""
  k = config.grad_accumulation_steps
  return name if k == 1 else f'{name}:grad_accumulation_steps={k}'


def shared_key(config) -> str:
  """A step's key in the per-user cache (run_folder.step_memory_cache): its config digest and
  the platform it compiles for, whichever campaign or group asks."""
  return f'{config_key(config)}@{platform()}'


class EstimateCache:
  """The memory estimates of a campaign (<campaign>/estimate/memory.json) backed by the per-user
  cache that every campaign shares, so that a step compiled once is never compiled again."""

  def __init__(self, campaign_dir, shared: bool = True):
    """shared: backed by the per-user cache (only for XLA's real estimates, not stubs)."""
    self.path = run_folder.memory_file(campaign_dir)
    self.shared_path = run_folder.step_memory_cache() if shared else None
    self.saved, self.shared = (json.loads(p.read_text()) if p and p.exists() else {}
                               for p in (self.path, self.shared_path))

  def get(self, name: str, config) -> dict | None:
    """The entry of a group's step, from the campaign's file or the shared cache; None if
    neither holds it for this config and platform."""
    entry = self.saved.get(entry_name(name, config), {})
    if entry.get('config') == config_key(config) and entry.get('platform') == platform():
      return entry
    shared = self.shared.get(shared_key(config))
    if shared is None:
      return None
    self.put(name, config, shared['seed_bytes'], shared['compile_s'])  # this campaign's too
    return self.saved[entry_name(name, config)]

  def put(self, name: str, config, seed_bytes, compile_s: float) -> None:
    entry = {'config': config_key(config), 'platform': platform(), 'seed_bytes': seed_bytes,
             'compile_s': compile_s}
    self.saved[entry_name(name, config)] = entry
    self.shared[shared_key(config)] = entry
    run_folder.write_json_atomically(self.path, self.saved)
    if self.shared_path:
      run_folder.write_json_atomically(self.shared_path, self.shared)


def cached_estimate(cache: EstimateCache, name: str, config, estimate) -> int | None:
  """estimate(config), kept in `cache` (the campaign's memory.json and the shared cache)."""
  entry = cache.get(name, config)
  if entry is None:
    k = config.grad_accumulation_steps
    start = time.perf_counter()
    print(f'{name}: compiling its training step' + (f' with {k} micro-batches' if k > 1 else '')
          + ' for its memory estimate ...', flush=True)
    cache.put(name, config, estimate(config), time.perf_counter() - start)
    entry = cache.get(name, config)
  return entry['seed_bytes']


def timed_estimate(config) -> tuple[int | None, float]:
  """(vmapped_step_bytes(config), seconds it took): a worker process's job."""
  start = time.perf_counter()
  return vmapped_step_bytes(config), time.perf_counter() - start


# Host memory a compiling worker may take (a full-size step: 1 to 2 GiB), for the default count.
WORKER_HOST_BYTES = 4 * GIB


def default_workers() -> int:
  """Compiling processes at once: one per core, at most one per WORKER_HOST_BYTES of the host."""
  from lra_luna.profile import measure  # pylint: disable=g-import-not-at-top
  return max(1, min(os.cpu_count() or 1, measure.host_memory_bytes() // WORKER_HOST_BYTES))


def compile_in_parallel(todo: list, cache: EstimateCache, workers: int,
                        what: str = '') -> None:
  """The estimates of todo [([group names], config)] compiled by `workers` processes at once (XLA
  compiles a step mostly on one core), each kept in `cache` for every group of its config as it
  arrives, with a progress line and the time left at the mean pace so far. A worker compiles one
  step and exits, so that the host gets its memory back (a process that compiled many steps
  keeps gigabytes)."""
  import concurrent.futures  # pylint: disable=g-import-not-at-top
  import multiprocessing  # pylint: disable=g-import-not-at-top
  from lra_luna import console  # pylint: disable=g-import-not-at-top
  print(f'Compiling {len(todo)} training steps{what} for their memory estimates, {workers} at a '
        f'time (cached in {cache.shared_path} for every later campaign) ...', flush=True)
  start = time.perf_counter()
  context = multiprocessing.get_context('spawn')  # a fresh JAX per worker, no forked threads
  with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context,
                                              initializer=_worker_setup,
                                              max_tasks_per_child=1) as pool:
    futures = {pool.submit(timed_estimate, config): (names, config) for names, config in todo}
    for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
      names, config = futures[future]
      seed_bytes, seconds = future.result()
      for name in names:
        cache.put(name, config, seed_bytes, seconds)
      left = (time.perf_counter() - start) / done * (len(todo) - done)
      size = '-' if seed_bytes is None else f'{seed_bytes / GIB:.2f} GiB'
      shared = f' (and {len(names) - 1} groups of the same step)' if len(names) > 1 else ''
      print(f'  [{done}/{len(todo)}] {names[0]}{shared}: {size} per seed (compiled in '
            f'{seconds:.0f} s); about {console.format_duration(left)} left', flush=True)


def _worker_setup() -> None:
  """A compiling worker on a GPU host: allocate device memory on demand, not 75% up front."""
  import os  # pylint: disable=g-import-not-at-top
  os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')


def distinct_steps(pending: list, cache: EstimateCache) -> list:
  """[([group names], config)]: the configs of pending [(group name, config)] that `cache` lacks,
  each once with every group whose step it is (the same config_key: the same compiled step)."""
  steps = {}
  for name, config in pending:
    if cache.get(name, config) is None:
      steps.setdefault(config_key(config), ([], config))[0].append(name)
  return list(steps.values())


def group_memory(groups: dict, campaign_dir, device_bytes, estimate=vmapped_step_bytes,
                 workers: int | None = None) -> dict:
  """{group name: (gradient accumulation steps, bytes one seed of its step needs, whether one
  seed fits)}: plan.fitting_accumulation's rule on the device (one device per job: the whole
  batch): the fewest micro-batches at which one seed fits, else the most. Each estimate is
  compiled once per config and platform, whichever groups share it, and kept in
  <campaign>/estimate/memory.json and the per-user cache. The groups are planned in rounds:
  first every group's own step, then, for the groups whose seed did not fit, their steps at
  twice the micro-batches, and so on; each round's steps compile `workers` at a time (default:
  default_workers()) in processes that exit after each step."""
  cache = EstimateCache(campaign_dir, shared=estimate is vmapped_step_bytes)
  # group name: (config, the accumulation steps to try); round `tried` tries each one's [tried]
  pending = {plan_lib.group_name(key): (runs[0].config, plan_lib.accumulation_steps_to_try(
      runs[0].config.grad_accumulation_steps, runs[0].config.batch_size))
             for key, runs in groups.items()}
  plans, tried = {}, 0
  while pending:
    now = [(name, with_accumulation(config, ks[tried])) for name, (config, ks) in pending.items()]
    todo = distinct_steps(now, cache)
    count = min(workers or default_workers(), len(todo))
    if todo and estimate is vmapped_step_bytes:  # even one at a time: the host's memory back
      compile_in_parallel(todo, cache, count, ' of the groups that did not fit, at twice the '
                          'micro-batches' if tried else '')
    for name, config in now:
      seed_bytes = cached_estimate(cache, name, config, estimate)
      ks = pending[name][1]
      if plan_lib.fits(seed_bytes, device_bytes) or tried == len(ks) - 1:
        plans[name] = (ks[tried], seed_bytes, plan_lib.fits(seed_bytes, device_bytes))
        del pending[name]
    tried += 1
  return {plan_lib.group_name(key): plans[plan_lib.group_name(key)] for key in groups}
