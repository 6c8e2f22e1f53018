"""The package's import graph: no module imports, directly or through others, a module that
imports it back (at the top or inside a function), so each one imports fresh on its own."""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'lra_luna'


def module_name(path: pathlib.Path) -> str:
  name = '.'.join(path.relative_to(PACKAGE.parent).with_suffix('').parts)
  return name.removesuffix('.__init__')


def lra_luna_imports(path: pathlib.Path, modules) -> set:
  """The lra_luna modules a file imports anywhere (`import a.b`, `from a import b`), leaving out
  its own ancestor packages (a submodule always has its package imported first)."""
  own = module_name(path)
  found = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      found |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      found |= {node.module, *(f'{node.module}.{alias.name}' for alias in node.names)}
  return {m for m in found if m in modules and m != own and not own.startswith(m + '.')}


def import_graph() -> dict:
  paths = {module_name(p): p for p in PACKAGE.rglob('*.py')}
  return {name: lra_luna_imports(path, paths) for name, path in paths.items()}


def cycles(graph: dict) -> list:
  """The strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for other in graph[node]:
      if other not in index:
        visit(other)
        low[node] = min(low[node], low[other])
      elif other in on_stack:
        low[node] = min(low[node], index[other])
    if low[node] == index[node]:
      component = []
      while True:
        other = stack.pop()
        on_stack.discard(other)
        component.append(other)
        if other == node:
          break
      if len(component) > 1:
        found.append(sorted(component))

  sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
  for node in graph:
    if node not in index:
      visit(node)
  return found


def test_cycles_finds_a_circle_and_nothing_else():
  assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]
  assert cycles({'a': {'b'}, 'b': set()}) == []


def test_no_import_circle_among_the_package_modules():
  graph = import_graph()
  assert {'lra_luna.config_lib', 'lra_luna.spt', 'lra_luna.training.run_folder'} <= set(graph)
  assert cycles(graph) == []


def test_run_folder_imports_nothing_of_the_package():
  """config_lib and spt build on the run folder's layout, report reads run folders with it."""
  assert import_graph()['lra_luna.training.run_folder'] == set()


@pytest.mark.parametrize('module', ['lra_luna.config_lib', 'lra_luna.spt',
                                    'lra_luna.training.run_folder', 'lra_luna.training.train'])
def test_each_module_imports_fresh_on_its_own(module):
  proc = subprocess.run([sys.executable, '-c', f'import {module}'], capture_output=True,
                        text=True, cwd=PACKAGE.parent, env=dict(os.environ, JAX_PLATFORMS='cpu'))
  assert proc.returncode == 0, proc.stderr[-2000:]
