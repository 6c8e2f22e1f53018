"""Generates Pathfinder / Path-X images (lra.md §2) in the LRA release layout.

  python data/generate_pathfinder.py --resolution 32 --difficulty hard     # LRA's Pathfinder
  python data/generate_pathfinder.py --resolution 128 --difficulty hard    # Path-X
  python data/generate_pathfinder.py --num_images 2000 --seed 1 --out_root /tmp/pf

Writes <out_root>/pathfinder<res>/<difficulty folder>/{imgs,metadata}. A killed run resumes
where it stopped when started again with the same settings.
"""

import argparse
import pathlib
import sys
import time

# Run as a plain script from the repo root: make `lra_luna` importable without installing it.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from lra_luna.datasets import base  # noqa: E402
from lra_luna.datasets import pathfinder_generator  # noqa: E402


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--resolution', type=int, default=32,
                      choices=sorted(pathfinder_generator.GEOMETRIES))
  parser.add_argument('--difficulty', default='hard',
                      choices=list(pathfinder_generator.DIFFICULTY_FOLDERS))
  parser.add_argument('--num_images', type=int, default=200000)
  parser.add_argument('--images_per_batch', type=int, default=1000,
                      help='images per imgs/<batch> folder and metadata file')
  parser.add_argument('--seed', type=int, default=0, help='generation seed')
  parser.add_argument('--workers', type=int, default=None, help='processes (default: all cores)')
  parser.add_argument('--out_root', default=None,
                      help=f'data root (default: ${base.DATA_DIR_ENV} or {base.DEFAULT_DATA_ROOT})')
  parser.add_argument('--no_progress', action='store_true', help='hide the progress bar')
  args = parser.parse_args()

  out_root = pathlib.Path(args.out_root) if args.out_root else base.data_root()
  print(f'Generating pathfinder{args.resolution} {args.difficulty} into {out_root}', flush=True)
  start = time.time()
  try:
    folder = pathfinder_generator.generate_pathfinder(
        out_root, resolution=args.resolution, difficulty=args.difficulty,
        num_images=args.num_images, images_per_batch=args.images_per_batch, seed=args.seed,
        num_workers=args.workers, progress=not args.no_progress)
  except ValueError as e:  # DataError included: a clash with existing files, or bad settings
    sys.exit(f'error: {e}')
  print(f'Done in {time.time() - start:.0f} s: {folder}')


if __name__ == '__main__':
  main()
