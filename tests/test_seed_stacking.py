"""A seed trained in a vmapped stack beside other seeds against the same seed trained alone
(README, "Install and first run"; docs/reproducibility.md): the same state, keys and batches,
so the only difference is XLA's order of summation in the batched program, within a stated
tolerance after N steps of each objective; the same seed alone twice is bitwise the same."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra_luna.profile import measure
from lra_luna.training import steps

STEPS = 10
# Largest |parameter difference| allowed after STEPS steps (float32; measured on a 2-core Xeon
# without dropout: 1e-8 (classification) and 6e-8 (masked) after 10 steps, 7e-7 and 2.5e-6
# after 100). A difference of state (a seed's dropout key, data
# order or initial parameters taken from another member of the stack) is 1e-3 or more at once.
TOLERANCE = 1e-6
SIZES = type('Sizes', (), {'vocab_size': 17, 'num_classes': 10, 'source': {}})()


def batch(seed: int, step: int) -> dict:
  """The batch seed `seed` sees at `step`: its own, whatever it is stacked with."""
  rng = np.random.default_rng([seed, step])
  lengths = rng.integers(4, 33, 8)
  tokens = rng.integers(1, 17, (8, 32))
  return {'inputs': np.where(np.arange(32) < lengths[:, None], tokens, 0).astype(np.int32),
          'targets': rng.integers(0, 10, 8).astype(np.int32)}


def train(objective_name: str, seeds: list, dropout_keys=None) -> list:
  """Each seed's parameters after STEPS vmapped steps of the stack `seeds` (train_loop's step)."""
  config = measure.point_config('configs/listops.py:quick', 'transformer', 32, 8, 'float32',
                                objective_name)
  # Dropout on, so each seed's dropout key takes part (the quick config has none).
  config.model.update(num_layers=1, dim=16, ffn_dim=16, num_heads=2, dropout=0.1)
  objective = steps.pretraining_objective(config, SIZES)
  tx = steps.make_optimizer(config)
  model_cfg = steps.model_config(config, SIZES)
  states = []
  for seed in seeds:
    graphdef, state, _ = steps.init_state(model_cfg, seed, tx, objective)
    states.append(state)
  state = steps.stack_trees(states)
  step_fn = jax.jit(jax.vmap(functools.partial(steps.train_step, graphdef=graphdef, tx=tx,
                                               objective=objective)))
  keys = jnp.stack([jax.random.fold_in(jax.random.key(s), 1) for s in (dropout_keys or seeds)])
  for step in range(STEPS):
    batches = [batch(seed, step) for seed in seeds]
    state, _ = step_fn(state, jax.tree.map(lambda *x: jnp.stack(x), *batches), keys)
  return [steps.unstack_tree(state, i)['params'] for i in range(len(seeds))]


def largest_difference(a, b) -> float:
  return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a),
                                                           jax.tree.leaves(b)))


@pytest.mark.parametrize('objective', ['classification', 'masked'])
def test_a_stacked_seed_is_the_seed_alone_within_the_stated_tolerance(objective):
  alone = train(objective, [0])[0]
  assert largest_difference(alone, train(objective, [0])[0]) == 0.0  # bitwise, twice alone
  stacked = train(objective, [1, 0])[1]  # seed 0 as the second member of the stack
  assert largest_difference(alone, stacked) <= TOLERANCE


def test_a_difference_of_state_is_far_beyond_the_tolerance():
  """What the tolerance tells apart: seed 0 with seed 1's dropout key."""
  alone = train('classification', [0])[0]
  other_key = train('classification', [0], dropout_keys=[1])[0]
  assert largest_difference(alone, other_key) > 100 * TOLERANCE
