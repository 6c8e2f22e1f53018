"""Our S5 against the S5 authors' JAX code, with the same parameters, on this machine.

Run from the repository root with a copy of github.com/lindermanlab/S5 (a checkout or a bare git
directory; read at run time, never copied into this project):
  python benchmarks/s5_against_authors.py --s5 path/to/S5 [--commit HEAD]

The authors' `s5/ssm.py`, `s5/ssm_init.py` and `s5/layers.py` are read from that copy (`git show
<commit>:<file>` for a git directory) into a temporary package and imported (their code names
`jax.numpy.DeviceArray`, which JAX has since removed; it is set to `jax.Array` first). For each
variant (discretisation, conjugate symmetry, bidirectional, C initialisation, activation, pre- or
post-norm) their S5SSM and SequenceLayer (LayerNorm, batchnorm off; dropout off) are initialised,
their parameters are copied into our S5SSM and S5Block, and both are applied to the same random
inputs. Prints, and writes as JSON with --out, the largest absolute difference of the SSM outputs
and of the layer outputs per variant, the largest over all, and the largest difference of the
HiPPO-N eigenvalues (their make_DPLR_HiPPO + train.py's block-diagonal set-up against our
block_diagonal_init).
"""

import argparse
import importlib
import itertools
import json
import pathlib
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lra_luna.models.blocks import s5  # noqa: E402
from lra_luna.models.model_config import ModelConfig  # noqa: E402

AUTHORS_FILES = ('s5/ssm.py', 's5/ssm_init.py', 's5/layers.py')


def read_authors_file(s5_path: pathlib.Path, commit: str, name: str) -> str:
  """The text of the authors' file `name` at `commit` (a git directory) or in a checkout."""
  if (s5_path / name).exists():
    return (s5_path / name).read_text()
  return subprocess.run(['git', '--git-dir', str(s5_path), 'show', f'{commit}:{name}'],
                        check=True, capture_output=True, text=True).stdout


def load_authors(s5_path: pathlib.Path, commit: str):
  """(their ssm module, ssm_init module, layers module, the commit hash) imported from a
  temporary package `authors_s5`."""
  folder = pathlib.Path(tempfile.mkdtemp(prefix='authors_s5_')) / 'authors_s5'
  folder.mkdir()
  (folder / '__init__.py').write_text('')
  for name in AUTHORS_FILES:
    (folder / pathlib.Path(name).name).write_text(read_authors_file(s5_path, commit, name))
  jnp.DeviceArray = jax.Array  # removed from JAX; their dataclass fields name it
  sys.path.insert(0, str(folder.parent))
  modules = [importlib.import_module(f'authors_s5.{m}') for m in ('ssm', 'ssm_init', 'layers')]
  head = subprocess.run(['git', '--git-dir', str(s5_path if (s5_path / 'HEAD').exists()
                                                   else s5_path / '.git'), 'rev-parse', commit],
                        capture_output=True, text=True).stdout.strip()
  return (*modules, head)


def authors_initial_matrices(ssm_init, state_dim: int, blocks: int, conj_sym: bool):
  """Lambda, V, V_inv as their train.py builds them (block-diagonal HiPPO-N)."""
  size = state_dim // blocks
  lambda_, _, _, v, _ = ssm_init.make_DPLR_HiPPO(size)
  if conj_sym:
    size //= 2
  lambda_, v = lambda_[:size], v[:, :size]
  lambda_ = (lambda_ * jnp.ones((blocks, size))).ravel()
  v_inv = jax.scipy.linalg.block_diag(*([v.conj().T] * blocks))
  return lambda_, jax.scipy.linalg.block_diag(*([v] * blocks)), v_inv


def our_parameters(params, variant) -> dict:
  """Their S5SSM parameters as our S5SSM's (name -> value)."""
  if variant['c_init'] == 'complex_normal':
    c = params['C']  # [H, channels x P, 2]
    channels = 2 if variant['bidirectional'] else 1
    c = jnp.stack(jnp.split(c, channels, axis=1))
  elif variant['bidirectional']:
    c = jnp.stack([params['C1'], params['C2']])
  else:
    c = params['C'][None]
  return {'lambda_re': params['Lambda_re'], 'lambda_im': params['Lambda_im'],
          'b_tilde': params['B'], 'c_tilde': c, 'd': params['D'],
          'log_step': params['log_step'][:, 0]}


def compare(modules, variant, *, dim=8, state_dim=16, blocks=2, length=64, batch=3, seed=0):
  """(largest |ours - theirs| of the SSM outputs, of the layer outputs) for one variant."""
  ssm_module, ssm_init, layers_module = modules
  lambda_, v, v_inv = authors_initial_matrices(ssm_init, state_dim, blocks, variant['conj_sym'])
  half = state_dim // 2 if variant['conj_sym'] else state_dim
  ssm_fn = ssm_module.init_S5SSM(
      H=dim, P=half, Lambda_re_init=lambda_.real, Lambda_im_init=lambda_.imag, V=v, Vinv=v_inv,
      C_init=variant['c_init'], discretization=variant['discretization'], dt_min=1e-3,
      dt_max=1e-1, conj_sym=variant['conj_sym'], clip_eigs=variant['clip_eigs'],
      bidirectional=variant['bidirectional'])
  layer = layers_module.SequenceLayer(ssm=ssm_fn, dropout=0.0, d_model=dim,
                                      activation=variant['activation'], training=False,
                                      prenorm=variant['prenorm'], batchnorm=False)
  u = jax.random.normal(jax.random.key(seed + 1), (batch, length, dim))
  variables = layer.init(jax.random.key(seed), u[0])
  theirs_layer = jax.vmap(lambda x: layer.apply(variables, x))(u)
  ssm = ssm_fn(step_rescale=1.0)
  theirs_ssm = jax.vmap(lambda x: ssm.apply({'params': variables['params']['seq']}, x))(u)
  cfg = ModelConfig.from_config({
      'dim': dim, 'dropout': 0.0, 'attention_options': {
          'state_dim': state_dim, 'blocks': blocks, **{k: variant[k] for k in (
              'c_init', 'discretization', 'conj_sym', 'clip_eigs', 'bidirectional',
              'activation', 'prenorm')}}})
  block = s5.S5Block(cfg, nnx.Rngs(0))
  for name, value in our_parameters(variables['params']['seq'], variant).items():
    getattr(block.ssm, name)[...] = jnp.asarray(value, jnp.float32)
  params = variables['params']
  block.norm.scale[...], block.norm.bias[...] = params['norm']['scale'], params['norm']['bias']
  for ours, theirs in (('gate', 'out2'), ('value', 'out1')):
    if theirs in params:
      getattr(block, ours).kernel[...] = params[theirs]['kernel']
      getattr(block, ours).bias[...] = params[theirs]['bias']
  ours_layer = block(u, jnp.ones(u.shape[:2], bool))
  return (float(jnp.max(jnp.abs(block.ssm(u) - theirs_ssm))),
          float(jnp.max(jnp.abs(ours_layer - theirs_layer))))


VARIANTS = [dict(zip(('discretization', 'conj_sym', 'bidirectional', 'c_init', 'activation',
                      'prenorm', 'clip_eigs'), values))
            for values in itertools.product(('zoh', 'bilinear'), (True, False), (True, False),
                                            s5.C_INITS, ('half_glu1', 'half_glu2', 'full_glu',
                                                         'gelu'), (True, False), (False, True))
            if values[4] == 'half_glu1' or values[0] == 'zoh']


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--s5', type=pathlib.Path, required=True,
                      help='a checkout of lindermanlab/S5 or its bare git directory')
  parser.add_argument('--commit', default='HEAD', help='the commit to read (git directory)')
  parser.add_argument('--out', type=pathlib.Path, help='write the figures as JSON here')
  args = parser.parse_args()
  *modules, commit = load_authors(args.s5, args.commit)
  ssm_init = modules[1]
  theirs, _, _ = authors_initial_matrices(ssm_init, 64, 4, True)
  ours, _, _ = s5.block_diagonal_init(64, 4, True)
  rows = []
  for variant in VARIANTS:
    ssm_difference, layer_difference = compare(modules, variant)
    rows.append({**variant, 'ssm_max_abs_difference': ssm_difference,
                 'layer_max_abs_difference': layer_difference})
    print(json.dumps(rows[-1]))
  summary = {'authors_commit': commit, 'variants': len(rows),
             'hippo_n_eigenvalues_max_abs_difference': float(np.max(np.abs(
                 np.asarray(theirs) - ours))),
             'ssm_max_abs_difference': max(r['ssm_max_abs_difference'] for r in rows),
             'layer_max_abs_difference': max(r['layer_max_abs_difference'] for r in rows)}
  print(json.dumps(summary))
  if args.out:
    args.out.write_text(json.dumps({'summary': summary, 'rows': rows}, indent=1))


if __name__ == '__main__':
  main()
