"""Your own attention in the LRA encoder: a module outside the package, named by its path.

  python run_lra.py --config configs/listops.py:transformer,quick --workdir runs/cosine \\
      --config.model.attention=examples/cosine_attention.py:CosineAttention \\
      --config.model.attention_options="{'scale': 5.0}"

`config.model.attention` names a plug-in as 'path/to/file.py:Class' (a file, relative to the
current directory) or 'package.module:Class' (imported from sys.path, e.g. PYTHONPATH). It
replaces the softmax attention of the Transformer's pre-LN block (so the config starts from the
`transformer` preset) and keeps the baselines' protocol (baselines.py):

  Class(dim, num_heads, *, attention_dropout, init, dtype, rngs, max_length, **options)
  module(x, mask, *, deterministic, rngs) -> y

x [B, n, D] in the compute `dtype`, mask [B, n] bool (True = real token; position 0 is [CLS]),
y [B, n, D]. `max_length` is the longest n the module will see ([CLS] included); `init` is
'reference' or 'bert' (attention.projection_init); `rngs` draws the parameters at construction
and carries the dropout stream at call time (None when deterministic); `options` are
config.model.attention_options. Results, sweep folders, reports and profiles label the model
with the class name. The import and the constructor's signature are checked with the config
(config_lib.validate), the call's signature and the output's shape when the model is built.
"""

import functools
import importlib
import importlib.util
import inspect
import pathlib
import re
import sys

import jax
import jax.numpy as jnp
from flax import nnx

SEPARATOR = ':'
PROTOCOL = ('Class(dim, num_heads, *, attention_dropout, init, dtype, rngs, max_length, '
            '**options) and module(x, mask, *, deterministic, rngs) -> y [B, n, D]')


def is_plugin(attention: str) -> bool:
  """Whether an attention name ('softmax', 'luna', a baseline, or a 'where:Class') is a plug-in."""
  return SEPARATOR in attention


def label(name: str) -> str:
  """A model as results show it: a plug-in by its class name, any other name as it is."""
  return name.rpartition(SEPARATOR)[2] if is_plugin(name) else name


def _split(spec: str) -> tuple[str, str, bool]:
  """'where:Class' -> (where, Class, whether `where` is a file)."""
  where, _, class_name = spec.rpartition(SEPARATOR)
  if not where or not class_name.isidentifier():
    raise ValueError(f"Attention plug-in {spec!r}: expected 'path/to/file.py:Class' or "
                     "'package.module:Class'.")
  return where, class_name, where.endswith('.py') or '/' in where


def resolved(spec: str) -> str:
  """A plug-in named with an absolute file path (for processes started elsewhere); other names
  as they are."""
  if not is_plugin(spec):
    return spec
  where, class_name, is_file = _split(spec)
  return f'{pathlib.Path(where).resolve()}{SEPARATOR}{class_name}' if is_file else spec


@functools.cache
def _import_file(path: pathlib.Path):
  # Cached, so that every layer and every seed gets the same class (jit caches key on it).
  name = 'lra_luna_plugin_' + re.sub(r'\W', '_', str(path))
  module_spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(module_spec)
  sys.modules[name] = module
  try:
    module_spec.loader.exec_module(module)
  except BaseException:
    del sys.modules[name]
    raise
  return module


def module_classes(module) -> list[str]:
  """The names of the nnx.Module classes a module defines itself (not those it imports)."""
  return sorted(n for n, v in vars(module).items() if isinstance(v, type)
                and issubclass(v, nnx.Module) and v.__module__ == module.__name__)


def check_not_a_bare_file(attention: str) -> None:
  """ValueError when an attention name is a file without ':Class' (path/to/file.py), naming the
  nnx.Module classes the file defines, so that the run stops before any data is read."""
  if is_plugin(attention) or not (attention.endswith('.py') or '/' in attention):
    return
  path = pathlib.Path(attention).resolve()
  if not path.is_file():
    raise ValueError(f"config.model.attention = {attention!r}: no file {path}; a plug-in is "
                     "named 'path/to/file.py:Class' (a path relative to the current folder).")
  try:
    found = module_classes(_import_file(path))
  except Exception as e:  # The user's module: any error it raises means it cannot be used.
    raise ValueError(f"config.model.attention = {attention!r} names a file but no class (add "
                     f"':Class'), and the file cannot be imported ({type(e).__name__}: "
                     f'{e}).') from e
  example = found[0] if found else 'MyAttention'
  raise ValueError(f"config.model.attention = {attention!r} names a file but no class: add "
                   f"':Class', e.g. {attention}:{example}; the nnx.Module classes it defines: "
                   f'{found}.')


def load_class(spec: str) -> type:
  """The nnx.Module class that `spec` names; FileNotFoundError or ValueError that says what is
  wrong (no file, an import error, no such class, not a module class)."""
  where, class_name, is_file = _split(spec)
  if is_file:
    path = pathlib.Path(where).resolve()
    if not path.is_file():
      raise FileNotFoundError(f'Attention plug-in {spec!r}: no file {path} (a path is relative '
                              'to the current directory).')
  try:
    module = _import_file(path) if is_file else importlib.import_module(where)
  except Exception as e:  # The user's module: any error it raises means it cannot be used.
    hint = '' if is_file else '; put its folder on PYTHONPATH, or name its file: file.py:Class'
    raise ValueError(f'Attention plug-in {spec!r}: cannot import {where} '
                     f'({type(e).__name__}: {e}){hint}.') from e
  cls = getattr(module, class_name, None)
  if cls is None:
    found = module_classes(module)
    raise ValueError(f'Attention plug-in {spec!r}: {where} has no {class_name!r}; the nnx.Module '
                     f'classes it defines: {found}.')
  if not (isinstance(cls, type) and issubclass(cls, nnx.Module)):
    raise ValueError(f'Attention plug-in {spec!r}: {class_name} is not a flax.nnx.Module class.')
  return cls


def _check_signature(function, args: tuple, kwargs: dict, what: str) -> None:
  """ValueError naming `what` unless function(*args, **kwargs) binds to its signature."""
  try:
    inspect.signature(function).bind(*args, **kwargs)
  except TypeError as e:
    raise ValueError(f'{what} does not fit the plug-in protocol ({e}); the protocol is '
                     f'{PROTOCOL}.') from None


def check_constructor(cls: type, options: dict) -> None:
  """ValueError unless cls's constructor takes the protocol's arguments and `options`."""
  protocol = dict.fromkeys(('attention_dropout', 'init', 'dtype', 'rngs', 'max_length'))
  # The __init__ (nnx's metaclass hides it from inspect.signature(cls)); None stands for self,
  # dim and num_heads.
  _check_signature(cls.__init__, (None, None, None), {**protocol, **options},
                   f'{cls.__name__}.__init__, given config.model.attention_options {options}')


def build(spec: str, dim: int, num_heads: int, *, attention_dropout: float, init: str, dtype,
          rngs: nnx.Rngs, max_length: int, options: dict) -> nnx.Module:
  """The plug-in module of `spec`, constructed by the protocol and its output shape checked."""
  cls = load_class(spec)
  check_constructor(cls, options)
  module = cls(dim, num_heads, attention_dropout=attention_dropout, init=init, dtype=dtype,
               rngs=rngs, max_length=max_length, **options)
  check_output(module, dim, max_length, dtype)
  return module


def check_output(module: nnx.Module, dim: int, length: int, dtype) -> None:
  """ValueError unless module(x, mask, deterministic=True, rngs=None) maps x [2, length, dim] to
  one array of x's shape. Traced only (jax.eval_shape): nothing is computed."""
  name = type(module).__name__
  x = jax.ShapeDtypeStruct((2, length, dim), dtype)
  mask = jax.ShapeDtypeStruct((2, length), jnp.bool_)
  _check_signature(module.__call__, (x, mask), dict(deterministic=True, rngs=None),
                   f'{name}.__call__')
  graphdef, state = nnx.split(module)
  y = jax.eval_shape(
      lambda s, x, mask: nnx.merge(graphdef, s)(x, mask, deterministic=True, rngs=None),
      state, x, mask)
  if not isinstance(y, jax.ShapeDtypeStruct) or y.shape != x.shape:
    got = (f'shape {y.shape}' if isinstance(y, jax.ShapeDtypeStruct)
           else f'{type(y).__name__} {jax.tree.map(lambda a: a.shape, y)}')
    raise ValueError(f'Attention plug-in {name} returned {got} for x of shape {x.shape} and mask '
                     f'{mask.shape}; expected one array of shape {x.shape} ([batch, length, dim]).')
