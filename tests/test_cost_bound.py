"""benchmarks/cost_bound.py's table (docs/performance.md): the points it names and the bold it
gives a step far above its bound. Its timings come from a run, never from a test."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / 'benchmarks'))
import cost_bound  # noqa: E402  pylint: disable=wrong-import-position


def row(model: str, ratio: float) -> dict:
  return {'point': '4K', 'side': model, 'step_s': ratio * 0.5, 'spread': 0.04, 'gflop': 64.0,
          'matmul_gflops': 128.0, 'bound_s': 0.5, 'step_over_bound': ratio}


@pytest.mark.parametrize('point, tokens, batch', [('1K', 1024, 1), ('4K', 4096, 1),
                                                  ('2000', 2000, 1), ('quick', 60, 64)])
def test_points_name_their_length_and_batch(point, tokens, batch):
  spec, got_tokens, got_batch = cost_bound.point_spec(point)
  assert (got_tokens, got_batch) == (tokens, batch)
  assert spec.endswith('listops.py:quick' if point == 'quick' else 'text.py')


def test_only_a_step_more_than_3x_its_bound_is_bold():
  lines = cost_bound.table([row('luna16', 1.8), row('mega_chunk', 3.0),
                            row('transformer', 5.6)]).splitlines()[2:]
  cells = [line.split('|')[-2].strip() for line in lines]
  assert cells == ['1.8', '3.0', '**5.6**']
  assert lines[2].startswith('| 4K | transformer | 2.8000 (4%) | 64.00 | 128 | 0.5000 |')
