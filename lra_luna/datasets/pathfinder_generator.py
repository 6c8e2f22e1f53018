"""Our seeded Pathfinder generator (lra.md §2, after Linsley et al. 2018) in the release layout.

Every image is a deterministic function of (seed, batch, index): its random numbers come from
`np.random.default_rng([seed, batch, index])`, so the output does not depend on the worker count.

Geometry, in image pixels. A paddle is a segment of `paddle_length`; a path is a chain of them,
each next one starting `margin` beyond the end of the previous one, turned by delta from it. A
placed paddle reserves every point within thickness + margin of its centre line (a disc swept
along it), so drawn edges of different paddles stay at least `margin` apart. Occupancy is kept
on the 2x canvas the paddles are drawn on; the border band of width `padding` is reserved too.

Choices where lra.md leaves them open:
- One intensity: all paths and both circles are drawn at the same full intensity, at every
  resolution (lra.md notes the original's 32 px setting drew targets dimmer than distractors).
- Distractor count: round(B / distractor_length), half up, at every level (hard 32 px: 20 / 4
  = 5, intermediate 7, easy 10), not a fixed B / 2. Each distractor starts on a random free
  pixel and gets DISTRACTOR_TRIES tries; one that still fails is skipped.
- Turn sampling: 16 stratified candidate turns in (-90 / continuity, 90 / continuity) degrees,
  weighted cos^2(continuity * |delta|) times 1 where the paddle fits, 0 where it does not.
- Circles sit centred on path tips. The two target paths start at tips `seed_distance` apart and
  grow in turns, keeping room for a circle on all four tips (inside the image, centre outside the
  padding band, clear of the other path); a pair that gets stuck restarts. All four tips get the
  same room whatever the label, and distractors stay out of it, so no tip betrays the label.
- Antialiasing: each 2x-canvas pixel gets the covered fraction of a 1 px ramp at the stroke
  edge; the 2x canvas is then averaged 2x2 down. PNGs are min-max scaled to 0..255, so circles
  (fully covered pixels) are 255 and thin 32 px dashes come out mid-grey.
- Metadata: <index> is the image's index in its batch (as in sample_<index>.png); n_contrasts
  is 1 (one intensity).
"""

import concurrent.futures
import dataclasses
import functools
import json
import math
import multiprocessing
import os
import pathlib
import tempfile

import numpy as np
from PIL import Image
from lra_luna import console
from lra_luna.datasets import base

DIFFICULTY_FOLDERS = {'easy': 'curv_baseline', 'intermediate': 'curv_contour_length_9',
                      'hard': 'curv_contour_length_14'}
CONTOUR_LENGTHS = {'easy': 6, 'intermediate': 9, 'hard': 14}
RECORD_FILE = 'generation.json'  # our run's settings; lets a killed run resume and be told apart

NUM_CANDIDATE_TURNS = 16
DISTRACTOR_TRIES = 5  # per distractor, before it is skipped
MIN_FREE_FRACTION = 0.01  # stop placing distractors below this share of free pixels
MAX_TARGET_TRIES = 10000  # a stuck pair restarts; this only guards against a hopeless setting
# Reserved discs are grown by this much (px) to cover the mask's quantization: a point is judged
# by its canvas pixel's centre (up to 0.18 px off) and stamps are binned (up to 0.15 px off).
RESERVE_SLACK = 0.35


@dataclasses.dataclass(frozen=True)
class Geometry:
  """Per-resolution settings of lra.md §2 (lengths in image pixels)."""
  resolution: int
  paddle_length: int
  thickness: float
  margins: tuple  # one is drawn per image
  continuity: float
  seed_distance: float
  circle_radius: float
  distractor_budget: int
  padding: int


GEOMETRIES = {
    32: Geometry(32, 2, 0.5, (1,), 1.0, 7, 1.5, 20, 1),
    64: Geometry(64, 5, 1.0, (1,), 1.8, 12, 2.5, 22, 1),
    128: Geometry(128, 5, 1.5, (2, 3), 1.8, 20, 3.0, 35, 1),
    256: Geometry(256, 5, 2.0, (3,), 1.8, 27, 5.0, 30, 22),
}


def check_setting(resolution: int, difficulty: str) -> None:
  """Raises ValueError for a resolution or difficulty outside lra.md §2."""
  if resolution not in GEOMETRIES:
    raise ValueError(f'Pathfinder resolution must be one of {sorted(GEOMETRIES)}, got {resolution}')
  if difficulty not in DIFFICULTY_FOLDERS:
    raise ValueError(f'Pathfinder difficulty must be one of {list(DIFFICULTY_FOLDERS)}, '
                     f'got {difficulty!r}')


def level(difficulty: str, geometry: Geometry) -> tuple:
  """(contour_length, distractor_length, number of distractors) of a difficulty."""
  contour_length = CONTOUR_LENGTHS[difficulty]
  distractor_length = contour_length // 3
  num_distractors = int(geometry.distractor_budget / distractor_length + 0.5)
  return contour_length, distractor_length, num_distractors


def dataset_folder(root, resolution: int, difficulty: str) -> pathlib.Path:
  """<root>/pathfinder<res>/<difficulty folder>, as in the LRA release."""
  return pathlib.Path(root) / f'pathfinder{resolution}' / DIFFICULTY_FOLDERS[difficulty]


@dataclasses.dataclass
class PathfinderSample:
  """One image and the geometry it was drawn from (points are (x, y) in image pixels).

  targets / distractors: arrays [paddles, 2, 2], each paddle as (start, end), in path order; a
  path's start is targets[p][0, 0] and its end targets[p][-1, 1]. circles: [2, 2] centres;
  circle 1 on the start of targets[circled_path], circle 2 on the end of the same path (label 1)
  or of the other one (label 0).
  """
  image: np.ndarray  # uint8 [res, res]
  label: int
  margin: int
  targets: list
  distractors: list
  circles: np.ndarray
  circled_path: int


def _point_segment_distance(points: np.ndarray, segments: np.ndarray) -> np.ndarray:
  """Distances [M, S] from points [M, 2] to segments [S, 2, 2]."""
  start = segments[:, 0]
  direction = segments[:, 1] - start
  length2 = np.maximum((direction * direction).sum(-1), 1e-12)
  rel = points[:, None, :] - start[None]
  t = np.minimum(np.maximum((rel * direction[None]).sum(-1) / length2, 0.0), 1.0)
  gap = rel - t[..., None] * direction[None]
  return np.sqrt((gap * gap).sum(-1))


def _disc(centre, radius: float, scale: float) -> tuple:
  """(y0, x0, distances) of the pixel centres around a disc on a canvas of `scale` px per px."""
  cx, cy = float(centre[0]) * scale, float(centre[1]) * scale
  r = radius * scale
  x0, y0 = math.floor(cx - r) - 1, math.floor(cy - r) - 1
  xs = np.arange(x0, math.ceil(cx + r) + 2) + 0.5 - cx
  ys = np.arange(y0, math.ceil(cy + r) + 2) + 0.5 - cy
  return y0, x0, np.hypot(xs[None, :], ys[:, None])


# Paddles are stamped from tables: one stamp per (direction, sub-pixel start) bin. The binning
# moves a paddle's stamped footprint by at most ~0.1 px; the geometry itself stays exact.
ANGLE_BINS = 256
SUBPIXEL_BINS = 4  # per canvas pixel and axis


@functools.lru_cache(maxsize=None)
def _paddle_stamps(length: float, radius: float, soft: bool) -> tuple:
  """(R, stamps [ANGLE_BINS, S, S, 2R+1, 2R+1]) for a paddle of `length` canvas px.

  The stamp is placed with its centre pixel on the canvas pixel holding the paddle start.
  soft=False: bool, pixel centre within `radius` of the centre line (space reservation).
  soft=True: float32 coverage of a stroke of half-width `radius` with a 1 px edge ramp.
  """
  r_half = int(math.ceil(length + radius)) + 1
  offsets = np.arange(-r_half, r_half + 1) + 0.5  # pixel centres, from the start pixel's corner
  sub = (np.arange(SUBPIXEL_BINS) + 0.5) / SUBPIXEL_BINS
  px = offsets[None, None, None, :] - sub[None, :, None, None]  # [1, Sx, 1, W]
  py = offsets[None, None, :, None] - sub[:, None, None, None]  # [Sy, 1, H, 1]
  stamps = np.empty((ANGLE_BINS, SUBPIXEL_BINS, SUBPIXEL_BINS, 2 * r_half + 1, 2 * r_half + 1),
                    np.float32 if soft else bool)
  for k in range(ANGLE_BINS):
    dx = length * math.cos(2 * math.pi * k / ANGLE_BINS)
    dy = length * math.sin(2 * math.pi * k / ANGLE_BINS)
    t = np.clip((px * dx + py * dy) / (length * length), 0.0, 1.0)
    dist = np.hypot(px - t * dx, py - t * dy)  # [Sy, Sx, H, W]
    stamps[k] = np.clip(radius + 0.5 - dist, 0.0, 1.0) if soft else dist <= radius
  return r_half, stamps


def _stamp(canvas: np.ndarray, origin: int, table: tuple, x: float, y: float, angle: float,
           combine) -> None:
  """Combines into `canvas` the table's stamp of a paddle starting at canvas point (x, y) in
  direction `angle`; canvas index 0 sits at canvas coordinate -origin."""
  r_half, stamps = table
  ix, iy = math.floor(x), math.floor(y)
  sx = min(int((x - ix) * SUBPIXEL_BINS), SUBPIXEL_BINS - 1)
  sy = min(int((y - iy) * SUBPIXEL_BINS), SUBPIXEL_BINS - 1)
  k = int(round(angle * (ANGLE_BINS / (2 * math.pi)))) % ANGLE_BINS
  y0, x0 = iy - r_half + origin, ix - r_half + origin
  size = 2 * r_half + 1
  view = canvas[y0:y0 + size, x0:x0 + size]
  combine(view, stamps[k, sy, sx], out=view)


def _angle(paddle: np.ndarray) -> float:
  return math.atan2(float(paddle[1, 1] - paddle[0, 1]), float(paddle[1, 0] - paddle[0, 0]))


class _Scene:
  """Reserved space on the 2x canvas: a pixel is blocked where no path centre line may pass.

  The mask extends `pad` canvas pixels past the image on every side, always blocked, so any
  point near the image indexes it without bounds checks.
  """

  def __init__(self, geometry: Geometry, margin: int):
    g = geometry
    self.geometry = g
    self.margin = margin
    self.reach = g.thickness + margin  # centre-line gap that leaves `margin` between edges
    # Room kept around path tips for circles: to another path's centre line, and to the own one.
    self.circle_clear_other = g.circle_radius + g.thickness / 2 + margin
    self.circle_clear_own = g.circle_radius + g.thickness / 2
    # Circle centres stay out of the padding band, and circles inside the image.
    self.tip_low = max(g.padding, g.circle_radius)
    self.tip_high = g.resolution - self.tip_low
    self.stamps = _paddle_stamps(2.0 * g.paddle_length, 2.0 * (self.reach + RESERVE_SLACK),
                                 False)
    disc_half = int(math.ceil(2 * (self.circle_clear_other + RESERVE_SLACK)))
    self.pad = max(self.stamps[0], disc_half) + 2
    size = 2 * g.resolution
    self.blocked = np.ones((size + 2 * self.pad,) * 2, bool)
    inner = self.pad + 2 * g.padding  # the border band stays blocked
    self.blocked[inner:-inner, inner:-inner] = False
    self.canvas_pixels = size * size
    # Centre-line samples every 1/4 px (half a canvas pixel) along a paddle.
    num_points = int(math.ceil(g.paddle_length * 4)) + 1
    self.offsets = np.linspace(0.0, g.paddle_length, num_points)
    k = NUM_CANDIDATE_TURNS
    max_turn = math.pi / 2 / g.continuity
    # Stratified turns: delta_i = turn_base_i + U(0, turn_step), one per stratum of (-max, max).
    self.turn_base = max_turn * (2.0 * np.arange(k) / k - 1.0)
    self.turn_step = 2.0 * max_turn / k

  def free_pixels(self) -> np.ndarray:
    """Flat mask indices of free pixels."""
    return np.flatnonzero(~self.blocked)

  def pixel_corner(self, flat_index: int) -> np.ndarray:
    """Image coordinates (x, y) of a mask pixel's top-left corner."""
    row, col = divmod(flat_index, self.blocked.shape[1])
    return np.array([col - self.pad, row - self.pad], float) / 2

  def reserve_paddle(self, paddle: np.ndarray, mask: np.ndarray) -> None:
    _stamp(mask, self.pad, self.stamps, 2.0 * float(paddle[0, 0]), 2.0 * float(paddle[0, 1]),
           _angle(paddle), np.logical_or)

  def reserve_disc(self, centre, radius: float) -> None:
    """Blocks canvas pixels whose centre is within radius (image px) of centre."""
    radius += RESERVE_SLACK
    y0, x0, dist = _disc(centre, radius, 2.0)
    h, w = dist.shape
    view = self.blocked[y0 + self.pad:y0 + self.pad + h, x0 + self.pad:x0 + self.pad + w]
    view |= dist <= 2.0 * radius

  def _fits(self, mask: np.ndarray, xs: np.ndarray, ys: np.ndarray, discs) -> np.ndarray:
    """Which candidates (centre-line samples xs, ys [K, P]) lie on free pixels with every
    sample outside the discs (cx [M], cy [M], squared radii [M]; None for none)."""
    ix = (xs * 2.0 + self.pad).astype(np.intp)
    iy = (ys * 2.0 + self.pad).astype(np.intp)
    ok = ~mask[iy, ix].any(axis=1)
    if discs is not None:
      cx, cy, radii2 = discs
      dx = xs[:, :, None] - cx
      dy = ys[:, :, None] - cy
      ok &= ~(dx * dx + dy * dy < radii2).reshape(len(xs), -1).any(axis=1)
    return ok

  def grow(self, rng: np.random.Generator, tips: list, headings, num_paddles: int,
           room_for_circles: bool = False):
    """Grows one path per tip together, a paddle each in turn; None when one gets stuck.

    On success the paths' space is reserved. With room_for_circles, every tip (start and end of
    each path) ends up able to hold a circle: inside the window and clear of the other paths.
    """
    growth = _Growth(self, tips, headings, room_for_circles)
    if not growth.first_paddles_fit():
      return None
    mask = self.blocked.copy()  # scratch: a stuck attempt leaves the scene untouched
    for step in range(1, num_paddles):
      for p in range(growth.n):
        if not growth.add_paddle(rng, p, mask, last_step=step == num_paddles - 1):
          return None
    for path in growth.paths:
      self.reserve_paddle(path[-1], mask)
    self.blocked = mask
    return [np.stack(path) for path in growth.paths]


class _Growth:
  """The state of `PathScene.grow`: each path's paddles, newest centre-line samples and heading,
  and each path's keep-out discs (the other paths' newest samples, then room for circles)."""

  def __init__(self, scene, tips, headings, room_for_circles: bool):
    self.scene, self.room_for_circles = scene, room_for_circles
    self.n = n = len(tips)
    offsets = scene.offsets
    self.num_points = len(offsets)
    self.reach2 = scene.reach ** 2
    self.other2, self.own2 = scene.circle_clear_other ** 2, scene.circle_clear_own ** 2
    self.headings = [float(h) for h in headings]
    # Newest paddle of each path as centre-line samples: not in the mask yet, so other paths
    # test against these; the own one is exempt (the chain gap, margin, is below the reach).
    self.new_x = [float(t[0]) + offsets * math.cos(h) for t, h in zip(tips, self.headings)]
    self.new_y = [float(t[1]) + offsets * math.sin(h) for t, h in zip(tips, self.headings)]
    self.tip_x = np.array([float(t[0]) for t in tips])
    self.tip_y = np.array([float(t[1]) for t in tips])
    self.others = [[q for q in range(n) if q != p] for p in range(n)]
    self.paths = [[np.array([[self.tip_x[p], self.tip_y[p]],
                             [self.new_x[p][-1], self.new_y[p][-1]]])] for p in range(n)]
    self.keep = [self._keep_out(p) for p in range(n)]

  def _keep_out(self, p: int):
    """Path p's keep-out discs (x, y, radius^2): the other paths' newest samples (slot i of
    others[p]), then circle room (all start tips; end tips of paths as they finish)."""
    parts = [(self.new_x[q], self.new_y[q], np.full(self.num_points, self.reach2))
             for q in self.others[p]]
    if self.room_for_circles:
      parts.append((self.tip_x, self.tip_y,
                    np.where(np.arange(self.n) == p, self.own2, self.other2)))
    return [np.concatenate(a) for a in zip(*parts)] if parts else None

  def first_paddles_fit(self) -> bool:
    """Whether the first paddles are clear of each other and of the other start tips."""
    for p in range(self.n):
      parts = [(self.new_x[q], self.new_y[q], np.full(self.num_points, self.reach2))
               for q in self.others[p]]
      if self.room_for_circles:
        parts += [(self.tip_x[q:q + 1], self.tip_y[q:q + 1], np.full(1, self.other2))
                  for q in self.others[p]]
      discs = tuple(np.concatenate(a) for a in zip(*parts)) if parts else None
      if not self.scene._fits(self.scene.blocked, self.new_x[p][None], self.new_y[p][None],
                              discs)[0]:
        return False
    return True

  def add_paddle(self, rng, p: int, mask, last_step: bool) -> bool:
    """Adds one paddle to path p, its turn drawn among NUM_CANDIDATE_TURNS weighted by
    continuity among those that fit; False when none fits."""
    scene, k = self.scene, NUM_CANDIDATE_TURNS
    deltas = scene.turn_base + scene.turn_step * rng.random(k)
    weights = np.cos(np.minimum(np.abs(deltas) * scene.geometry.continuity, math.pi / 2))
    weights *= weights
    angles = deltas + self.headings[p]
    cos, sin = np.cos(angles), np.sin(angles)
    start_x = cos * scene.margin + self.new_x[p][-1]
    start_y = sin * scene.margin + self.new_y[p][-1]
    xs = cos[:, None] * scene.offsets + start_x[:, None]
    ys = sin[:, None] * scene.offsets + start_y[:, None]
    ok = scene._fits(mask, xs, ys, self.keep[p])
    if last_step and self.room_for_circles:
      ok &= self._ends_have_room(p, xs[:, -1], ys[:, -1])
    weights *= ok
    total = weights.sum()
    if total <= 0.0:
      return False
    choice = min(int(np.searchsorted(np.cumsum(weights), rng.random() * total, side='right')),
                 k - 1)
    scene.reserve_paddle(self.paths[p][-1], mask)
    self.paths[p].append(np.array([[start_x[choice], start_y[choice]],
                                   [xs[choice, -1], ys[choice, -1]]]))
    self.new_x[p], self.new_y[p] = xs[choice], ys[choice]
    self.headings[p] = float(angles[choice])
    self._update_keep_out(p, last_step)
    return True

  def _ends_have_room(self, p: int, end_x, end_y):
    """Which candidate end tips of path p are inside the window and clear of every path."""
    ends = np.stack([end_x, end_y], axis=-1)
    ok = ((ends >= self.scene.tip_low) & (ends <= self.scene.tip_high)).all(axis=1)
    for q in range(self.n):
      clear = self.scene.circle_clear_other if q != p else self.scene.circle_clear_own
      ok &= _point_segment_distance(ends, np.stack(self.paths[q])).min(axis=1) >= clear
    return ok

  def _update_keep_out(self, p: int, last_step: bool) -> None:
    """The other paths now keep out of path p's new paddle (and of its end tip at the end)."""
    num_points = self.num_points
    for q in self.others[p]:
      keep = self.keep[q]
      slot = self.others[q].index(p) * num_points
      keep[0][slot:slot + num_points] = self.new_x[p]
      keep[1][slot:slot + num_points] = self.new_y[p]
      if last_step and self.room_for_circles:
        self.keep[q] = [np.append(keep[0], self.new_x[p][-1]),
                        np.append(keep[1], self.new_y[p][-1]), np.append(keep[2], self.other2)]


def _tips(path: np.ndarray) -> tuple:
  return path[0, 0], path[-1, 1]


def _place_targets(scene: _Scene, rng: np.random.Generator, contour_length: int) -> list:
  """Two target paths whose start tips are seed_distance apart, restarted until they fit."""
  g = scene.geometry
  lo, hi = scene.tip_low, scene.tip_high
  for _ in range(MAX_TARGET_TRIES):
    first = rng.uniform(lo, hi, 2)
    angle = rng.uniform(0.0, 2 * math.pi)
    second = first + g.seed_distance * np.array([math.cos(angle), math.sin(angle)])
    if not (lo <= second[0] <= hi and lo <= second[1] <= hi):
      continue
    paths = scene.grow(rng, [first, second], rng.uniform(0.0, 2 * math.pi, 2), contour_length,
                       room_for_circles=True)
    if paths is not None:
      return paths
  raise RuntimeError(f'could not place two target paths of {contour_length} paddles at '
                     f'{g.resolution} px in {MAX_TARGET_TRIES} tries')


def _place_distractors(scene: _Scene, rng: np.random.Generator, length: int, count: int) -> list:
  """Up to `count` paths of `length` paddles, each started on a random free pixel."""
  distractors = []
  for _ in range(count):
    free = scene.free_pixels()
    if free.size < MIN_FREE_FRACTION * scene.canvas_pixels:
      break
    for _ in range(DISTRACTOR_TRIES):
      tip = scene.pixel_corner(int(free[rng.integers(free.size)])) + rng.random(2) / 2
      grown = scene.grow(rng, [tip], [rng.uniform(0.0, 2 * math.pi)], length)
      if grown is not None:
        distractors.append(grown[0])
        break
  return distractors


def _render(paddles: list, circles: np.ndarray, geometry: Geometry) -> np.ndarray:
  """Antialiased uint8 image: strokes on the 2x canvas, 2x2 average, min-max to 0..255."""
  res = geometry.resolution
  size = 2 * res
  # Thickness t px is 2t canvas px: half-width t.
  table = _paddle_stamps(2.0 * geometry.paddle_length, float(geometry.thickness), True)
  radius = 2.0 * geometry.circle_radius
  pad = max(table[0], int(math.ceil(radius)) + 2) + 1
  canvas = np.zeros((size + 2 * pad,) * 2, np.float32)
  for paddle in paddles:
    _stamp(canvas, pad, table, 2.0 * float(paddle[0, 0]), 2.0 * float(paddle[0, 1]),
           _angle(paddle), np.maximum)
  for centre in circles:
    y0, x0, dist = _disc(centre, geometry.circle_radius, 2.0)
    h, w = dist.shape
    view = canvas[y0 + pad:y0 + pad + h, x0 + pad:x0 + pad + w]
    np.maximum(view, np.clip(radius + 0.5 - dist, 0.0, 1.0), out=view)
  image = canvas[pad:pad + size, pad:pad + size].reshape(res, 2, res, 2).mean(axis=(1, 3))
  low, high = float(image.min()), float(image.max())
  if high <= low:
    return np.zeros((res, res), np.uint8)
  return np.rint((image - low) * (255.0 / (high - low))).astype(np.uint8)


def make_pathfinder_image(resolution: int = 32, difficulty: str = 'hard', *, seed: int = 0,
                          batch: int = 0, index: int = 0) -> PathfinderSample:
  """Draws image `index` of `batch` for `seed`: same arguments, same image."""
  check_setting(resolution, difficulty)
  g = GEOMETRIES[resolution]
  contour_length, distractor_length, num_distractors = level(difficulty, g)
  rng = np.random.default_rng([seed, batch, index])
  label = int(rng.integers(2))
  circled = int(rng.integers(2))
  margin = int(g.margins[rng.integers(len(g.margins))])
  scene = _Scene(g, margin)
  targets = _place_targets(scene, rng, contour_length)
  for path in targets:  # all four tips, whichever carry circles, so no tip betrays the label
    for tip in _tips(path):
      scene.reserve_disc(tip, scene.circle_clear_other)
  distractors = _place_distractors(scene, rng, distractor_length, num_distractors)
  circles = np.stack([targets[circled][0, 0], targets[circled if label else 1 - circled][-1, 1]])
  paddles = [paddle for path in targets + distractors for paddle in path]
  return PathfinderSample(image=_render(paddles, circles, g), label=label, margin=margin,
                          targets=targets, distractors=distractors, circles=circles,
                          circled_path=circled)


def metadata_line(batch: int, index: int, sample: PathfinderSample, resolution: int,
                  difficulty: str) -> str:
  """The release's metadata line (lra.md §1) for one image."""
  g = GEOMETRIES[resolution]
  contour_length, distractor_length, _ = level(difficulty, g)
  return (f'imgs/{batch} sample_{index}.png {index} {sample.label} {float(g.continuity)} '
          f'{contour_length} {distractor_length} {g.paddle_length} {float(g.thickness)} '
          f'{sample.margin} 1')


def _write_batch(folder: str, resolution: int, difficulty: str, seed: int, batch: int,
                 count: int) -> int:
  """Writes one batch's PNGs, then its metadata file (atomically), which marks it done."""
  folder = pathlib.Path(folder)
  image_dir = folder / 'imgs' / str(batch)
  image_dir.mkdir(parents=True, exist_ok=True)
  lines = []
  for index in range(count):
    sample = make_pathfinder_image(resolution, difficulty, seed=seed, batch=batch, index=index)
    Image.fromarray(sample.image).save(image_dir / f'sample_{index}.png')
    lines.append(metadata_line(batch, index, sample, resolution, difficulty))
  metadata_dir = folder / 'metadata'
  metadata_dir.mkdir(parents=True, exist_ok=True)
  with tempfile.NamedTemporaryFile('w', dir=metadata_dir, suffix='.tmp', delete=False,
                                   encoding='ascii', newline='\n') as f:
    f.write('\n'.join(lines) + '\n')
  os.replace(f.name, metadata_dir / f'{batch}.npy')
  return count


def batch_sizes(num_images: int, images_per_batch: int) -> list:
  """Image counts of batches 0, 1, ... (the last may be short)."""
  return [min(images_per_batch, num_images - start)
          for start in range(0, num_images, images_per_batch)]


def read_record(folder) -> dict | None:
  """The settings our generator recorded in `folder`, or None if it did not write there."""
  path = pathlib.Path(folder) / RECORD_FILE
  if not path.exists():
    return None
  return json.loads(path.read_text(encoding='utf-8'))


def missing_batches(folder, record: dict) -> list:
  """Batches of a recorded run whose metadata (written last) is not there yet."""
  metadata_dir = pathlib.Path(folder) / 'metadata'
  sizes = batch_sizes(record['num_images'], record['images_per_batch'])
  return [b for b in range(len(sizes)) if not (metadata_dir / f'{b}.npy').exists()]


def generate_pathfinder(out_root, *, resolution: int = 32, difficulty: str = 'hard',
                        num_images: int = 200000, images_per_batch: int = 1000, seed: int = 0,
                        num_workers: int | None = None, progress: bool = True) -> pathlib.Path:
  """Writes <out_root>/pathfinder<res>/<difficulty folder>/{imgs,metadata}; returns that folder.

  Resumes a killed run: batches whose metadata file exists are skipped. Refuses to write into a
  folder holding another run's settings or data it did not generate.
  """
  check_setting(resolution, difficulty)
  if num_images < 1 or images_per_batch < 1:
    raise ValueError('num_images and images_per_batch must be positive')
  folder = dataset_folder(out_root, resolution, difficulty)
  record = {'generator': 'lra_luna', 'resolution': resolution, 'difficulty': difficulty,
            'num_images': num_images, 'images_per_batch': images_per_batch, 'seed': seed}
  existing = read_record(folder)
  if existing is None:
    if any((folder / 'metadata').glob('*.npy')):
      raise base.DataError(f'{folder} already holds Pathfinder data that this generator did not '
                           f'write (no {RECORD_FILE}); choose another output root.')
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RECORD_FILE).write_text(json.dumps(record, indent=1) + '\n', encoding='utf-8')
  elif existing != record:
    raise base.DataError(f'{folder / RECORD_FILE} records another run ({existing}); resume it with '
                         f'the same settings, or delete {folder} to start over.')
  sizes = batch_sizes(num_images, images_per_batch)
  todo = missing_batches(folder, record)
  workers = min(num_workers or os.cpu_count() or 1, max(len(todo), 1))
  jobs = [(str(folder), resolution, difficulty, seed, b, sizes[b]) for b in todo]
  with console.Progress(num_images, f'Pathfinder{resolution} {difficulty}', 'img',
                        initial=num_images - sum(sizes[b] for b in todo), enabled=progress) as bar:
    if workers <= 1:
      for job in jobs:
        bar.update(_write_batch(*job))
    else:
      # spawn, not fork: forking a process that already runs JAX threads can deadlock.
      context = multiprocessing.get_context('spawn')
      with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = [pool.submit(_write_batch, *job) for job in jobs]
        for future in concurrent.futures.as_completed(futures):
          bar.update(future.result())
  return folder
