"""Fitted log-log slopes of step time and memory against sequence length (1 = linear, 2 =
quadratic), with their standard error."""

import numpy as np

# Two lengths always fit a line exactly: a slope needs at least this many to mean anything.
MIN_SLOPE_LENGTHS = 3


def fitted_slope(lengths, values, log_errors=None) -> dict | None:
  """Slope of log(value) against log(length) (1 = linear, 2 = quadratic) and its standard error:
  the larger of the fit's (from its residuals) and the one the values' own errors give
  (`log_errors`, per point, in log units: the repeats' spread of a timed step). None with fewer
  than MIN_SLOPE_LENGTHS lengths."""
  if len(lengths) < MIN_SLOPE_LENGTHS:
    return None
  x, y = np.log(lengths), np.log(values)
  slope, intercept = np.polyfit(x, y, 1)
  sxx = float(np.sum((x - x.mean())**2))
  residuals = y - (slope * x + intercept)
  fit_error = float(np.sqrt(np.sum(residuals**2) / (len(x) - 2) / sxx))
  errors = np.zeros_like(x) if log_errors is None else np.asarray(log_errors, float)
  value_error = float(np.sqrt(np.sum((x - x.mean())**2 * errors**2)) / sxx)
  return {'slope': float(slope), 'stderr': max(fit_error, value_error),
          'lengths': [int(n) for n in lengths]}


def spread_log_error(point: dict) -> float:
  """Half the range of the timed steps in log units: the point's own error for the fit."""
  if point.get('step_s_min') and point.get('step_s_max'):
    return float(np.log(point['step_s_max'] / point['step_s_min']) / 2)
  return 0.0


def scaling_slopes(points, key: str) -> dict:
  """model -> fitted_slope of `key` (step_s: the step time, with its repeats' spread) over its
  measured points; models with fewer than MIN_SLOPE_LENGTHS lengths are left out."""
  slopes = {}
  for name in dict.fromkeys(p['model'] for p in points):
    measured = sorted((p['length'], p[key], spread_log_error(p) if key == 'step_s' else 0.0)
                      for p in points if p['model'] == name and p['status'] == 'ok'
                      and p.get(key))
    if measured:
      lengths, values, log_errors = zip(*measured)
      slope = fitted_slope(lengths, values, log_errors)
      if slope is not None:
        slopes[name] = slope
  return slopes


def format_slope(slope: dict | None) -> str:
  """'1.06 ± 0.03': as many decimals as the error's first digit (at most 2), so no digit is
  printed that the data does not support; '-' where there is no slope."""
  if slope is None:
    return f'- (needs {MIN_SLOPE_LENGTHS}+ lengths)'
  error = slope['stderr']
  decimals = 2 if error <= 0 else int(min(2, max(0, -np.floor(np.log10(error)))))
  return f'{slope["slope"]:.{decimals}f} ± {error:.{decimals}f}'
