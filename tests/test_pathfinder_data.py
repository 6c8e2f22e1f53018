"""Pathfinder: our generator (lra.md §2), the release-layout reader and the task loader."""

import math

import ml_collections
import numpy as np
from PIL import Image
import pytest

from lra_luna.datasets import base
from lra_luna.datasets import pathfinder
from lra_luna.datasets import pathfinder_generator as gen

FOLDER = 'pathfinder32/curv_contour_length_14'
NUM_GENERATED = 200


def generated_files(folder):
  return {str(p.relative_to(folder)): p.read_bytes()
          for p in sorted(folder.rglob('*')) if p.is_file() and p.suffix in ('.png', '.npy')}


@pytest.fixture(scope='module')
def generated(tmp_path_factory):
  root = tmp_path_factory.mktemp('pf_generated')
  folder = gen.generate_pathfinder(root, resolution=32, difficulty='hard',
                                   num_images=NUM_GENERATED, images_per_batch=50, seed=0,
                                   num_workers=1, progress=False)
  return root, folder


@pytest.fixture(scope='module')
def generated_arrays(generated):
  root, _ = generated
  return pathfinder.read_pathfinder(root, 32, 'hard')


# --- generator: files ---------------------------------------------------------------------------

def test_layout_and_png_format(generated):
  _, folder = generated
  assert folder == generated[0] / FOLDER
  assert sorted(p.name for p in (folder / 'metadata').iterdir()) == [
      '0.npy', '1.npy', '2.npy', '3.npy']
  pngs = sorted((folder / 'imgs').rglob('*.png'))
  assert len(pngs) == NUM_GENERATED
  for path in pngs[::10]:
    with Image.open(path) as image:
      assert image.format == 'PNG' and image.mode == 'L' and image.size == (32, 32)
      pixels = np.asarray(image)
    assert pixels.min() == 0 and pixels.max() == 255  # min-max scaled


def test_metadata_lines_follow_the_release_format(generated):
  _, folder = generated
  for batch in range(4):
    lines = (folder / 'metadata' / f'{batch}.npy').read_text().splitlines()
    assert len(lines) == 50
    for i, line in enumerate(lines):
      fields = line.split(' ')
      assert fields[:3] == [f'imgs/{batch}', f'sample_{i}.png', str(i)]
      assert fields[3] in ('0', '1')
      # continuity, contour length, distractor length, paddle length, thickness, margin, contrasts
      assert fields[4:] == ['1.0', '14', '4', '2', '0.5', '1', '1']
      assert (folder / fields[0] / fields[1]).exists()


def test_labels_are_balanced(generated_arrays):
  _, targets = generated_arrays
  # Fair coin: 4 standard deviations of Binomial(200, 0.5) is about 28.
  assert abs(int(targets.sum()) - NUM_GENERATED / 2) <= 4 * math.sqrt(NUM_GENERATED / 4)


def test_no_lit_pixel_shortcut(generated_arrays):
  inputs, targets = generated_arrays
  lit = (inputs > 0).sum(axis=1).astype(float)
  ink = inputs.sum(axis=1, dtype=np.float64)
  for amount in (lit, ink):
    pos, neg = amount[targets == 1], amount[targets == 0]
    stderr = math.sqrt(pos.var() / len(pos) + neg.var() / len(neg))
    assert abs(pos.mean() - neg.mean()) < 4 * stderr


def test_same_seed_same_bytes_whatever_the_worker_count(tmp_path):
  kwargs = dict(resolution=32, difficulty='hard', num_images=40, images_per_batch=10, seed=7,
                progress=False)
  one = gen.generate_pathfinder(tmp_path / 'one', num_workers=1, **kwargs)
  two = gen.generate_pathfinder(tmp_path / 'two', num_workers=2, **kwargs)
  files = generated_files(one)
  assert len(files) == 40 + 4 and files == generated_files(two)
  kwargs['seed'] = 8
  other = gen.generate_pathfinder(tmp_path / 'other', num_workers=1, **kwargs)
  assert generated_files(other) != files


def test_resume_skips_finished_batches_and_redoes_the_rest(tmp_path):
  kwargs = dict(resolution=32, difficulty='easy', num_images=20, images_per_batch=10, seed=3,
                num_workers=1, progress=False)
  folder = gen.generate_pathfinder(tmp_path, **kwargs)
  before = generated_files(folder)
  # Batch 1 "killed" before its metadata; batch 0 finished (a marker byte proves no rewrite).
  (folder / 'metadata' / '1.npy').unlink()
  (folder / 'imgs' / '1' / 'sample_4.png').write_bytes(b'')
  (folder / 'imgs' / '0' / 'sample_0.png').write_bytes(b'kept')
  gen.generate_pathfinder(tmp_path, **kwargs)
  after = generated_files(folder)
  assert after['imgs/0/sample_0.png'] == b'kept'
  del before['imgs/0/sample_0.png'], after['imgs/0/sample_0.png']
  assert after == before


def test_generator_refuses_mismatched_or_foreign_folders(tmp_path):
  kwargs = dict(resolution=32, difficulty='easy', images_per_batch=10, num_workers=1,
                progress=False)
  gen.generate_pathfinder(tmp_path / 'a', num_images=10, seed=0, **kwargs)
  with pytest.raises(base.DataError, match='records another run'):
    gen.generate_pathfinder(tmp_path / 'a', num_images=10, seed=1, **kwargs)
  write_release(tmp_path / 'b', {0: [0, 1]}, difficulty_folder='curv_baseline')
  with pytest.raises(base.DataError, match='did not write'):
    gen.generate_pathfinder(tmp_path / 'b', num_images=10, seed=0, **kwargs)
  with pytest.raises(ValueError, match='resolution'):
    gen.generate_pathfinder(tmp_path / 'c', resolution=48, num_images=1)


# --- generator: geometry ------------------------------------------------------------------------

def path_gaps(path):
  """Distances from each paddle's end to the next one's start."""
  return np.linalg.norm(path[1:, 0] - path[:-1, 1], axis=1)


def min_distance(path_a, path_b):
  """Smallest centre-line distance between two paths (segments sampled every 0.05 px)."""
  t = np.linspace(0.0, 1.0, 41)[None, :, None]
  points = (path_a[:, :1] + t * (path_a[:, 1:] - path_a[:, :1])).reshape(-1, 2)
  return gen._point_segment_distance(points, path_b).min()


@pytest.mark.parametrize('difficulty', ['easy', 'intermediate', 'hard'])
def test_paths_dashes_and_circles(difficulty):
  g = gen.GEOMETRIES[32]
  contour_length, distractor_length, num_distractors = gen.level(difficulty, g)
  assert (contour_length, distractor_length) == {
      'easy': (6, 2), 'intermediate': (9, 3), 'hard': (14, 4)}[difficulty]
  for index in range(12):
    sample = gen.make_pathfinder_image(32, difficulty, seed=5, batch=2, index=index)
    assert sample.image.shape == (32, 32) and sample.image.dtype == np.uint8
    assert [len(t) for t in sample.targets] == [contour_length] * 2
    assert all(len(d) == distractor_length for d in sample.distractors)
    assert 1 <= len(sample.distractors) <= num_distractors
    # Circle 1 on the start of one target path; circle 2 on the end of the same (positive) or
    # the other (negative) path.
    first, second = sample.circles
    circled = sample.targets[sample.circled_path]
    np.testing.assert_allclose(first, circled[0, 0])
    end_path = sample.targets[sample.circled_path if sample.label else 1 - sample.circled_path]
    np.testing.assert_allclose(second, end_path[-1, 1])
    assert np.linalg.norm(sample.targets[0][0, 0] - sample.targets[1][0, 0]) == pytest.approx(
        g.seed_distance)
    for centre in sample.circles:  # both circles are drawn, fully bright at their centres
      x, y = np.floor(centre).astype(int)
      assert sample.image[y, x] >= 200
    for path in sample.targets + sample.distractors:
      lengths = np.linalg.norm(path[:, 1] - path[:, 0], axis=1)
      np.testing.assert_allclose(lengths, g.paddle_length)
      np.testing.assert_allclose(path_gaps(path), sample.margin)
      headings = np.arctan2(path[:, 1, 1] - path[:, 0, 1], path[:, 1, 0] - path[:, 0, 0])
      turns = np.abs((np.diff(headings) + np.pi) % (2 * np.pi) - np.pi)
      assert np.all(np.degrees(turns) <= 90 / g.continuity + 1e-6)
      assert path.min() >= g.padding - 1e-9 and path.max() <= 32 - g.padding + 1e-9


def test_paths_keep_their_margin():
  g = gen.GEOMETRIES[32]
  for index in range(6):
    sample = gen.make_pathfinder_image(32, 'hard', seed=9, index=index)
    reach = g.thickness + sample.margin  # centre lines this far apart leave `margin` between edges
    paths = sample.targets + sample.distractors
    for a in range(len(paths)):
      for b in range(a + 1, len(paths)):
        assert min_distance(paths[a], paths[b]) >= reach - 1e-6


def test_each_image_is_a_function_of_seed_batch_index():
  a = gen.make_pathfinder_image(32, 'hard', seed=1, batch=4, index=9)
  b = gen.make_pathfinder_image(32, 'hard', seed=1, batch=4, index=9)
  np.testing.assert_array_equal(a.image, b.image)
  for other in [dict(seed=2, batch=4, index=9), dict(seed=1, batch=5, index=9),
                dict(seed=1, batch=4, index=8)]:
    assert not np.array_equal(gen.make_pathfinder_image(32, 'hard', **other).image, a.image)


@pytest.mark.parametrize('resolution', [64, 128, 256])
def test_other_resolutions(resolution):
  g = gen.GEOMETRIES[resolution]
  sample = gen.make_pathfinder_image(resolution, 'hard', seed=0, index=1)
  assert sample.image.shape == (resolution, resolution)
  assert sample.margin in g.margins
  assert [len(t) for t in sample.targets] == [14, 14]
  line = gen.metadata_line(0, 1, sample, resolution, 'hard')
  assert line.split()[4:] == [str(float(g.continuity)), '14', '4', str(g.paddle_length),
                              str(float(g.thickness)), str(sample.margin), '1']


# --- reader and loader --------------------------------------------------------------------------

def write_release(root, batches, difficulty_folder='curv_contour_length_14', size=32, seed=0):
  """Writes the release layout by hand; returns (pixels [N, size*size], labels) in file order."""
  rng = np.random.default_rng(seed)
  folder = root / f'pathfinder{size}' / difficulty_folder
  (folder / 'metadata').mkdir(parents=True)
  pixels, labels = [], []
  for batch, batch_labels in batches.items():
    (folder / 'imgs' / str(batch)).mkdir(parents=True)
    lines = []
    for i, label in enumerate(batch_labels):
      image = rng.integers(0, 256, (size, size), dtype=np.uint8)
      image[0, 0] = 0  # a black pixel is a real token, not padding
      Image.fromarray(image).save(folder / 'imgs' / str(batch) / f'sample_{i}.png')
      lines.append(f'imgs/{batch} sample_{i}.png {i} {label} 1.0 14 4 2 0.5 1 1')
      pixels.append(image.reshape(-1))
      labels.append(label)
    (folder / 'metadata' / f'{batch}.npy').write_text('\n'.join(lines) + '\n')
  return np.stack(pixels), np.array(labels)


# Batches 0, 2, 10: numeric order differs from name order ('10' < '2').
RELEASE = {0: [0, 1, 1, 0, 1, 0, 0, 1], 2: [1, 1, 0, 0, 1, 0], 10: [0, 1, 0, 1, 1, 0]}


def make_config(root, **pathfinder_settings):
  settings = dict(resolution=32, difficulty='hard', skip_bad_images=False,
                  generate_if_missing=False, num_images=40, seed=0)
  settings.update(pathfinder_settings)
  return ml_collections.ConfigDict({'data_dir': str(root), 'data_source': 'auto',
                                    'dataset_name': 'pathfinder-generated',
                                    'pathfinder': settings})


def test_reader_returns_exact_pixels_and_labels_in_numeric_batch_order(tmp_path):
  pixels, labels = write_release(tmp_path, RELEASE)
  inputs, targets = pathfinder.read_pathfinder(tmp_path, 32, 'hard')
  assert inputs.dtype == np.uint8 and inputs.shape == (20, 1024)
  assert targets.dtype == np.int32
  np.testing.assert_array_equal(inputs, pixels)
  np.testing.assert_array_equal(targets, labels)


def test_loader_splits_80_10_10_in_file_order_and_caches(tmp_path):
  pixels, labels = write_release(tmp_path, RELEASE)
  data = pathfinder.load_pathfinder(make_config(tmp_path))
  assert (data.vocab_size, data.num_classes, data.max_length) == (256, 2, 1024)
  bounds = {'train': (0, 16), 'validation': (16, 18), 'test': (18, 20)}
  for split, (a, b) in bounds.items():
    np.testing.assert_array_equal(data.splits[split]['inputs'], pixels[a:b])
    np.testing.assert_array_equal(data.splits[split]['targets'], labels[a:b])
  assert (tmp_path / FOLDER / 'cache.npz').exists()
  with pytest.MonkeyPatch.context() as patch:  # The second load comes from the cache alone.
    patch.setattr(pathfinder, 'read_pathfinder', lambda *args, **kwargs: pytest.fail('read'))
    again = pathfinder.load_pathfinder(make_config(tmp_path))
  np.testing.assert_array_equal(again.splits['test']['inputs'], pixels[18:])
  # A removed image changes the folder, so the cache is rebuilt and the loss reported.
  next((tmp_path / FOLDER / 'imgs').rglob('*.png')).unlink()
  with pytest.raises(base.DataError, match='image is missing'):
    pathfinder.load_pathfinder(make_config(tmp_path))


def test_split_sizes_of_a_round_number():
  inputs = np.zeros((200000, 4), np.uint8)
  splits = pathfinder.split_in_file_order(inputs, np.zeros(200000, np.int32))
  assert [len(splits[s]['targets']) for s in ('train', 'validation', 'test')] == [
      160000, 20000, 20000]


def break_line(folder, line_number, new_line):
  path = folder / 'metadata' / '2.npy'
  lines = path.read_text().splitlines()
  lines[line_number - 1] = new_line
  path.write_text('\n'.join(lines) + '\n')
  return path


@pytest.mark.parametrize('damage, message', [
    (lambda f: break_line(f, 3, 'imgs/2 sample_2.png 2 1 1.0 14'), r'2\.npy, line 3: expected 11'),
    (lambda f: break_line(f, 2, 'imgs/2 sample_1.png 1 yes 1.0 14 4 2 0.5 1 1'),
     r'2\.npy, line 2: label .* not an integer'),
    (lambda f: break_line(f, 2, 'imgs/2 sample_1.png 1 3 1.0 14 4 2 0.5 1 1'),
     r'2\.npy, line 2: label .* 0 or 1'),
    (lambda f: (f / 'imgs/2/sample_4.png').unlink(), r'imgs/2/sample_4\.png .*missing'),
    (lambda f: (f / 'imgs/2/sample_4.png').write_bytes(b''), r'imgs/2/sample_4\.png .*empty'),
    (lambda f: (f / 'imgs/2/sample_4.png').write_bytes(b'not a png at all'),
     r'imgs/2/sample_4\.png .*unreadable'),
    (lambda f: Image.new('L', (16, 16)).save(f / 'imgs/2/sample_4.png'),
     r'imgs/2/sample_4\.png: image is 16x16, expected 32x32'),
    (lambda f: Image.new('I;16', (32, 32)).save(f / 'imgs/2/sample_4.png'),
     r'imgs/2/sample_4\.png: expected an 8-bit grayscale'),
    (lambda f: [p.unlink() for p in (f / 'metadata').iterdir()], r'metadata: no metadata files'),
])
def test_bad_inputs_raise_data_error_naming_the_file(tmp_path, damage, message):
  write_release(tmp_path, RELEASE)
  damage(tmp_path / FOLDER)
  with pytest.raises(base.DataError, match=message):
    pathfinder.read_pathfinder(tmp_path, 32, 'hard')


def test_missing_folder_says_how_to_generate(tmp_path):
  with pytest.raises(base.DataError,
                     match='python data/generate_pathfinder.py --resolution 32 --difficulty hard'):
    pathfinder.read_pathfinder(tmp_path, 32, 'hard')
  with pytest.raises(base.DataError, match='--resolution 128 --difficulty hard'):
    pathfinder.load_pathfinder(make_config(tmp_path, resolution=128))


def test_missing_folder_points_at_a_nested_release_copy(tmp_path):
  write_release(tmp_path / 'lra_release' / 'lra_release', RELEASE)
  with pytest.raises(base.DataError, match='lra_release/lra_release/pathfinder32'):
    pathfinder.read_pathfinder(tmp_path, 32, 'hard')


def test_skip_bad_images_drops_an_empty_png_and_reports_it(tmp_path, caplog):
  pixels, labels = write_release(tmp_path, RELEASE)
  bad = tmp_path / FOLDER / 'imgs' / '0' / 'sample_5.png'  # 6th image in file order
  bad.write_bytes(b'')
  result = pathfinder.read_pathfinder(tmp_path, 32, 'hard', skip_bad_images=True)
  inputs, targets = result
  keep = np.arange(20) != 5
  np.testing.assert_array_equal(inputs, pixels[keep])
  np.testing.assert_array_equal(targets, labels[keep])
  assert len(result.skipped) == 1 and result.skipped[0][0] == str(bad)
  assert 'skipped 1 bad image' in caplog.text
  data = pathfinder.load_pathfinder(make_config(tmp_path, skip_bad_images=True))
  assert sum(len(s['targets']) for s in data.splits.values()) == 19


def test_loader_generates_when_missing_if_allowed(tmp_path, capsys):
  config = make_config(tmp_path, generate_if_missing=True, num_images=40, seed=0)
  data = pathfinder.load_pathfinder(config)
  assert 'Pathfinder: data generated now in' in capsys.readouterr().out
  pathfinder.load_pathfinder(config)  # Read again, not generated: it says so.
  assert 'Pathfinder: read previously generated data from' in capsys.readouterr().out
  assert [len(data.splits[s]['targets']) for s in ('train', 'validation', 'test')] == [32, 4, 4]
  assert data.splits['train']['inputs'].shape == (32, 1024)
  # Generated sets live under dataset_name, never where the release keeps pathfinder32/.
  assert (tmp_path / 'pathfinder-generated' / FOLDER / gen.RECORD_FILE).exists()
  assert not (tmp_path / 'pathfinder32').exists()
  assert data.source['source'] == 'generated' and data.source['generator']['settings']['seed'] == 0
  expected = gen.make_pathfinder_image(32, 'hard', seed=0, batch=0, index=0)
  np.testing.assert_array_equal(data.splits['train']['inputs'][0], expected.image.reshape(-1))


def test_loader_refuses_an_unfinished_generation_unless_allowed(tmp_path):
  set_root = tmp_path / 'pathfinder-generated'
  gen.generate_pathfinder(set_root, num_images=20, images_per_batch=10, num_workers=1,
                          progress=False)
  (set_root / FOLDER / 'metadata' / '1.npy').unlink()
  settings = dict(num_images=20, images_per_batch=10)
  with pytest.raises(base.DataError, match='unfinished generation'):
    pathfinder.load_pathfinder(make_config(tmp_path, **settings))
  data = pathfinder.load_pathfinder(make_config(tmp_path, generate_if_missing=True, **settings))
  assert sum(len(s['targets']) for s in data.splits.values()) == 20
  # Other generation settings than the set was made with: refused, not silently the old set.
  with pytest.raises(base.DataError, match='was generated with'):
    pathfinder.load_pathfinder(make_config(tmp_path, num_images=20, images_per_batch=10, seed=1))


def test_release_position_holding_generated_data_is_not_called_release(tmp_path):
  gen.generate_pathfinder(tmp_path, num_images=10, images_per_batch=10, num_workers=1,
                          progress=False)  # an old version's habit: generated into pathfinder32/
  config = make_config(tmp_path)
  config.data_source = 'release'
  with pytest.raises(base.DataError, match='must not pass for the release'):
    pathfinder.load_pathfinder(config)
