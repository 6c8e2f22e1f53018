"""Generates the ListOps TSVs (docs/data.md) in the LRA release layout.

  python data/generate_listops.py                      # full set into <data root>/listops-generated
  python data/generate_listops.py --out_dir /tmp/lo --num_train 2000 --seed 1
"""

import pathlib
import sys

# Run as a plain script from the repo root: make `lra_luna` importable without installing it.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from lra_luna import cli  # noqa: E402
from lra_luna import console  # noqa: E402
from lra_luna.datasets import base  # noqa: E402
from lra_luna.datasets import listops  # noqa: E402


def main() -> None:
  parser = cli.ArgumentParser(prog='python data/generate_listops.py',
                              description=__doc__.splitlines()[0])
  parser.add_argument('--out_dir', default=None,
                      help='output folder (default: <data root>/listops-generated, data root from '
                           f'${base.DATA_DIR_ENV} or {base.DEFAULT_DATA_ROOT})')
  parser.add_argument('--num_train', type=int, default=96000)
  parser.add_argument('--num_val', type=int, default=2000)
  parser.add_argument('--num_test', type=int, default=2000)
  parser.add_argument('--min_length', type=int, default=500, help='keep length > this')
  parser.add_argument('--max_length', type=int, default=2000, help='keep length < this')
  parser.add_argument('--max_depth', type=int, default=10)
  parser.add_argument('--max_args', type=int, default=10)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--no_progress', action='store_true', help='hide the progress bar')
  args = parser.parse_args()

  try:
    root = base.data_root()
    out_dir = (pathlib.Path(args.out_dir) if args.out_dir else root / 'listops-generated').resolve()
    base.check_generation_target(out_dir.parent, out_dir, listops.RELEASE_FOLDER, 'ListOps')
    base.make_folder(out_dir)
  except base.DataError as e:
    sys.exit(f'error: {e}')
  print(f'Generating ListOps into {out_dir}', flush=True)
  paths = listops.generate_listops(
      out_dir, num_train=args.num_train, num_val=args.num_val, num_test=args.num_test,
      min_length=args.min_length, max_length=args.max_length, max_depth=args.max_depth,
      max_args=args.max_args, seed=args.seed, progress=not args.no_progress)
  for split, path in paths.items():
    print(f'  {split}: {path}')


if __name__ == '__main__':
  with console.one_line_on_signals(
      'no split file was written (each is written whole at the end); rerun the same command '
      'to generate the set.'):
    main()
