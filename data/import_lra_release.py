"""Links (or copies) the datasets of an unpacked LRA release into the data root.

  wget https://storage.googleapis.com/long-range-arena/lra_release.gz   # about 7.7 GB
  tar xzf lra_release.gz                        # unpacks lra_release/
  python data/import_lra_release.py lra_release
  python data/import_lra_release.py lra_release --copy --data_dir /data/lra --tasks retrieval

The release nests a second lra_release/ inside the first (docs/data.md); the folder that holds the
most of listops-1000/, tsv_data/, pathfinder<res>/ is used, and any other copy is reported. It puts
  listops-1000/basic_{train,val,test}.tsv        -> <root>/listops-1000/
  tsv_data/new_aan_pairs.{train,eval,test}.tsv   -> <root>/aan/
  pathfinder<res>/<difficulty>/{imgs,metadata}   -> <root>/pathfinder<res>/<difficulty>/
for res in 32, 64, 128, 256. Files and imgs/ metadata/ folders are linked one by one into real
folders, so the readers' caches are written to the data root, never into the release. Existing
entries in the data root are left alone.
"""

import os
import pathlib
import shutil
import sys

# Run as a plain script from the repo root: make `lra_luna` importable without installing it.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from lra_luna import cli  # noqa: E402
from lra_luna.datasets import base  # noqa: E402
from lra_luna.datasets import pathfinder_generator  # noqa: E402

PATHFINDER_RESOLUTIONS = (32, 64, 128, 256)
# task -> [(folder in the release, names inside it, folder under the data root)]
LAYOUT = {
    'listops': [('listops-1000', ('basic_train.tsv', 'basic_val.tsv', 'basic_test.tsv'),
                 'listops-1000')],
    'retrieval': [('tsv_data', ('new_aan_pairs.train.tsv', 'new_aan_pairs.eval.tsv',
                                'new_aan_pairs.test.tsv'), 'aan')],
    'pathfinder': [(f'pathfinder{res}/{difficulty}', ('imgs', 'metadata'),
                    f'pathfinder{res}/{difficulty}')
                   for res in PATHFINDER_RESOLUTIONS
                   for difficulty in pathfinder_generator.DIFFICULTY_FOLDERS.values()],
}
TOP_FOLDERS = ('listops-1000', 'tsv_data', *(f'pathfinder{res}' for res in PATHFINDER_RESOLUTIONS))
MAX_DEPTH = 3  # lra_release/lra_release/... is 2 levels down


def release_folders(release: pathlib.Path) -> list:
  """Folders within MAX_DEPTH of `release` that hold any of TOP_FOLDERS, best first.

  Best = holds the most of them; ties go to the shallower folder.
  """
  found = []
  level = [release]
  for depth in range(MAX_DEPTH + 1):
    for folder in level:
      score = sum((folder / name).is_dir() for name in TOP_FOLDERS)
      if score:
        found.append((-score, depth, str(folder), folder))
    if depth < MAX_DEPTH:  # descend, but not into the datasets themselves
      level = [child for folder in level for child in sorted(folder.iterdir())
               if child.is_dir() and not child.is_symlink() and child.name not in TOP_FOLDERS]
  return [folder for *_, folder in sorted(found)]


def place(source: pathlib.Path, target: pathlib.Path, copy: bool) -> str:
  """Links or copies source to target; returns what it did, in words."""
  if target.is_symlink() or target.exists():
    if target.resolve() == source.resolve():
      return f'already there: {target}'
    return f'kept existing {target} (delete it to import {source})'
  target.parent.mkdir(parents=True, exist_ok=True)
  if not copy:
    os.symlink(source.resolve(), target, target_is_directory=source.is_dir())
    return f'linked {target} -> {source.resolve()}'
  if source.is_dir():
    shutil.copytree(source, target)
  else:
    shutil.copy2(source, target)
  return f'copied {source} -> {target}'


def import_release(release, data_root, *, copy: bool = False, tasks=tuple(LAYOUT)) -> dict:
  """Imports `tasks` from the release into data_root; returns {'done', 'missing', 'notes'}."""
  release, data_root = pathlib.Path(release), pathlib.Path(data_root)
  if not release.is_dir():
    raise SystemExit(f'error: {release} is not a folder (unpack lra_release.gz first).')
  folders = release_folders(release)
  report = {'done': [], 'missing': [], 'notes': []}
  if not folders:
    report['missing'].append(f'{release} holds none of {", ".join(TOP_FOLDERS)} within '
                             f'{MAX_DEPTH} levels')
    return report
  for task in tasks:
    found = False
    for inner, names, destination in LAYOUT[task]:
      copies = [folder / inner for folder in folders if (folder / inner).is_dir()]
      if not copies:
        top, _, inside = inner.partition('/')
        if inside and any((folder / top).is_dir() for folder in folders):
          report['missing'].append(f'{top}/{inside}/ (the release has {top}/ without it)')
        continue
      found = True
      source = copies[0]
      # LRA users found one of the release's two pathfinder128 copies unlearnable: say where
      # the other copy is, so it can be swapped in by hand.
      report['notes'] += [f'another copy of {inner} at {other} is not used (to use it, replace '
                          f'the entries of {data_root / destination} with links to it)'
                          for other in copies[1:]]
      for name in names:
        if (source / name).exists():
          report['done'].append(place(source / name, data_root / destination / name, copy))
        else:
          report['missing'].append(str(source / name))
    if not found:
      # Releases differ in which pathfinder sets they carry: one of them is enough.
      wanted = ', '.join(dict.fromkeys(inner.split('/')[0] for inner, _, _ in LAYOUT[task]))
      report['missing'].append(f'{task}: none of {wanted} in {folders[0]}')
  return report


def main(argv=None) -> int:
  parser = cli.ArgumentParser(prog='python data/import_lra_release.py',
                              description=__doc__.splitlines()[0])
  parser.add_argument('release', help='the unpacked lra_release folder')
  parser.add_argument('--data_dir', default='',
                      help=f'data root (default: ${base.DATA_DIR_ENV} or {base.DEFAULT_DATA_ROOT})')
  parser.add_argument('--copy', action='store_true', help='copy instead of symlinking')
  parser.add_argument('--tasks', nargs='+', choices=list(LAYOUT), default=list(LAYOUT))
  args = parser.parse_args(argv)
  data_root = base.data_root(args.data_dir)
  print(f'Importing {", ".join(args.tasks)} from {args.release} into {data_root}')
  report = import_release(args.release, data_root, copy=args.copy, tasks=args.tasks)
  for line in report['done']:
    print('  ' + line)
  for line in report['notes']:
    print('  note: ' + line)
  for line in report['missing']:
    print('  missing: ' + line)
  print(f'{len(report["done"])} entries in place, {len(report["missing"])} missing.')
  return 0 if report['done'] else 1


if __name__ == '__main__':
  sys.exit(main())
