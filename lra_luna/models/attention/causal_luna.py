"""Causal (autoregressive) Luna attention, paper §3.3 eq. 7 (luna.md §6), and a decoder-only LM.

The causal function of eq. 7 is F_t = (1/t) X_t sum_{j<=t} Y_j^T Z_j (t counts from 1). Per head,
with q already scaled by dh^-1/2 and phi = omega(Linear_pc(X) pq^T) [B, H, n, l]:

  pack scores  S_t   = (1/t) q_t sum_{j<=t} k_j^T phi_j          [l]
  A_t                = softmax_l(S_t)                             (float32, then attention dropout)
  unpack       out_t = (1/t) A_t sum_{j<=t} phi_j^T v_j          [dh]

Three equivalent implementations of that pair of causal functions:
  `causal_luna_direct`  forms the [n, n] masked score matrices: O(n^2) memory; the reference form.
  `causal_luna_cumsum`  cumulative sums of outer products: O(n * dh * l) memory.
  `causal_luna_chunked` scans over chunks carrying the two running sums: O(n * (dh + l)) memory.

Attention dropout on A is passed to them as a multiplier (`a_dropout_scale`, keep-mask / keep-prob,
[B, H, n, l]) drawn once up front, so all three forms give identical results under dropout too.
"""

import math
from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from lra_luna.models.nn import layers
from lra_luna.models.attention.base import merge_heads, projection, projection_init, split_heads
from lra_luna.models.nn.dropout import Dropout
from lra_luna.models.nn.linear import Linear

IMPLEMENTATIONS = ('chunked', 'cumsum', 'direct')
FEATURE_MAPS = ('softplus', 'elu')


# ----------------------------------------------------------------------------- feature maps


def softplus_base2(x: jax.Array) -> jax.Array:
  """omega(x) = softplus with beta = ln 2 (torch: (1/beta) log(1 + exp(beta x))) = log2(1 + 2^x).

  omega(0) = log2(2) = 1; luna.md §6. Written as softplus(x ln 2) / ln 2 for numerical stability.
  """
  return jax.nn.softplus(x * math.log(2.0)) / math.log(2.0)


def elu_plus_one(x: jax.Array) -> jax.Array:
  """omega(x) = elu(x) + 1 (paper §3.3, after Katharopoulos et al. 2020); positive everywhere."""
  return jax.nn.elu(x) + 1.0


def feature_map(name: str) -> Callable[[jax.Array], jax.Array]:
  """The pack activation omega of paper §3.3: 'softplus' (default, log2(1 + 2^x)) or 'elu'."""
  maps = {'softplus': softplus_base2, 'elu': elu_plus_one}
  if name not in maps:
    raise ValueError(f'Unknown feature map {name!r}; valid choices: '
                     f"{', '.join(repr(m) for m in FEATURE_MAPS)}.")
  return maps[name]


_feature_map = feature_map  # CausalLunaAttention's `feature_map` argument shadows the name.


# ----------------------------------------------------------------------------- pure causal forms


def _einsum32(spec: str, *operands) -> jax.Array:
  # Scores and running sums accumulate over up to n tokens: keep them in float32 for low-precision
  # compute dtypes.
  return jnp.einsum(spec, *operands, preferred_element_type=jnp.float32)


def _step_counts(start, length: int) -> jax.Array:
  """The 1/t normaliser's t for positions start .. start+length-1 (t counts from 1), [length, 1]."""
  return (start + jnp.arange(1, length + 1, dtype=jnp.float32))[:, None]


def _pack_probs(scores: jax.Array, a_dropout_scale: jax.Array | None) -> jax.Array:
  """A = softmax over l of the pack scores (float32), then attention dropout as a multiplier."""
  probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1)
  return probs if a_dropout_scale is None else probs * a_dropout_scale


def causal_luna_direct(q, k, v, phi, *, a_dropout_scale=None):
  """Eq. 7, direct O(n^2) form (luna.md §6 check): S_t = (1/t) sum_{j<=t} (q_t.k_j) phi_j,
  A = softmax_l(S), out_t = (1/t) sum_{j<=t} (A_t.phi_j) v_j.

  q, k, v [B, H, n, dh] (q already scaled), phi [B, H, n, l]; a_dropout_scale [B, H, n, l] or None.
  Returns (out [B, H, n, dh] in v's dtype, A [B, H, n, l] float32, after dropout).
  """
  n = q.shape[2]
  steps = _step_counts(0, n)
  causal = jnp.tril(jnp.ones((n, n), dtype=bool))
  query_key = jnp.where(causal, _einsum32('bhid,bhjd->bhij', q, k), 0.0)
  scores = _einsum32('bhij,bhjl->bhil', query_key, phi) / steps
  probs = _pack_probs(scores, a_dropout_scale)
  probs_pack = jnp.where(causal, _einsum32('bhil,bhjl->bhij', probs.astype(phi.dtype), phi), 0.0)
  out = _einsum32('bhij,bhjd->bhid', probs_pack, v) / steps
  return out.astype(v.dtype), probs


def causal_luna_cumsum(q, k, v, phi, *, a_dropout_scale=None):
  """Eq. 7 with cumulative sums of the outer products k_j^T phi_j [dh, l] and phi_j^T v_j [l, dh].

  Linear time, but materialises [B, H, n, dh, l]: O(n * dh * l) memory. Same arguments and
  returns as `causal_luna_direct`.
  """
  steps = _step_counts(0, q.shape[2])
  key_pack_sums = jnp.cumsum(_einsum32('bhnd,bhnl->bhndl', k, phi), axis=2)
  scores = _einsum32('bhnd,bhndl->bhnl', q, key_pack_sums) / steps
  probs = _pack_probs(scores, a_dropout_scale)
  pack_value_sums = jnp.cumsum(_einsum32('bhnl,bhnd->bhnld', phi, v), axis=2)
  out = _einsum32('bhnl,bhnld->bhnd', probs, pack_value_sums) / steps
  return out.astype(v.dtype), probs


def causal_luna_chunked(q, k, v, phi, *, chunk_size: int = 64, a_dropout_scale=None):
  """Eq. 7 scanned over chunks of `chunk_size` positions.

  The scan carries the running sums sum k^T phi [B, H, dh, l] and sum phi^T v [B, H, l, dh];
  inside a chunk the intra-chunk part uses [c, c] masked scores. A_t needs only the pack sum up to
  t, so each chunk computes its A (dropout applied) before its unpack. Memory O(n * (dh + l) +
  c^2), never [n, n] nor [n, dh, l]. n need not be a multiple of chunk_size (zero-padded at the
  end, which only later positions could see, then sliced off). Same returns as the direct form.
  """
  b, h, n, _ = q.shape
  num_chunks = -(-n // chunk_size)
  pad = num_chunks * chunk_size - n

  def to_chunks(x):  # [B, H, n, f] -> [num_chunks, B, H, c, f], the scan axis first.
    x = jnp.pad(x, ((0, 0), (0, 0), (0, pad), (0, 0)))
    return jnp.moveaxis(x.reshape(b, h, num_chunks, chunk_size, x.shape[-1]), 2, 0)

  causal = jnp.tril(jnp.ones((chunk_size, chunk_size), dtype=bool))

  def chunk(carry, inputs):
    key_pack_sum, pack_value_sum = carry
    start, q_c, k_c, v_c, phi_c, scale_c = inputs
    steps = _step_counts(start, chunk_size)
    query_key = jnp.where(causal, _einsum32('bhid,bhjd->bhij', q_c, k_c), 0.0)
    scores = (_einsum32('bhid,bhdl->bhil', q_c, key_pack_sum)
              + _einsum32('bhij,bhjl->bhil', query_key, phi_c)) / steps
    probs = _pack_probs(scores, scale_c)
    probs_c = probs.astype(phi_c.dtype)
    probs_pack = jnp.where(causal, _einsum32('bhil,bhjl->bhij', probs_c, phi_c), 0.0)
    out = (_einsum32('bhil,bhld->bhid', probs_c, pack_value_sum)
           + _einsum32('bhij,bhjd->bhid', probs_pack, v_c)) / steps
    key_pack_sum = key_pack_sum + _einsum32('bhjd,bhjl->bhdl', k_c, phi_c)
    pack_value_sum = pack_value_sum + _einsum32('bhjl,bhjd->bhld', phi_c, v_c)
    return (key_pack_sum, pack_value_sum), (out.astype(v.dtype), probs)

  head_dim, pack_length = q.shape[-1], phi.shape[-1]
  sums = (jnp.zeros((b, h, head_dim, pack_length), jnp.float32),
          jnp.zeros((b, h, pack_length, head_dim), jnp.float32))
  starts = jnp.arange(num_chunks, dtype=jnp.float32) * chunk_size
  scale = None if a_dropout_scale is None else to_chunks(a_dropout_scale)
  _, (out, probs) = jax.lax.scan(chunk, sums, (starts, *map(to_chunks, (q, k, v, phi)), scale))

  def from_chunks(x):  # [num_chunks, B, H, c, f] -> [B, H, n, f]
    x = jnp.moveaxis(x, 0, 2)
    return x.reshape(b, h, num_chunks * chunk_size, x.shape[-1])[:, :, :n]

  return from_chunks(out), from_chunks(probs)


# ----------------------------------------------------------------------------- attention module


class CausalLunaCache(NamedTuple):
  """Incremental-decoding state of one causal Luna attention (luna.md §6).

  pack_query: projected, scaled P [B, H, l, dh]; key_pack_sum: sum_j k_j^T phi_j [B, H, dh, l];
  pack_value_sum: sum_j phi_j^T v_j [B, H, l, dh]; step: tokens consumed so far (int32 scalar).
  """
  pack_query: jax.Array
  key_pack_sum: jax.Array
  pack_value_sum: jax.Array
  step: jax.Array


class CausalLunaAttention(nnx.Module):
  """Causal Luna attention, paper §3.3 eq. 7 (luna.md §6), one head count H for pack and unpack.

  Projections (all D -> D with bias): pack_query (on P), pack_context (on X, gives phi), query,
  key, value (with `tie_kv`, `key` also serves as the value), out. There is no padding mask: a
  decoder's padding sits after the real tokens, and causality keeps it from reaching them.
  P must carry no information about X (a per-layer parameter, or an encoder's final P).
  """

  def __init__(self, dim: int, num_heads: int, *, attention_dropout: float = 0.0,
               tie_kv: bool = False, feature_map: str = 'softplus', chunk_size: int = 64,
               implementation: str = 'chunked', init: str = 'reference', dtype=jnp.float32,
               rngs: nnx.Rngs):
    if dim % num_heads:
      raise ValueError(f'dim {dim} is not divisible by num_heads {num_heads}.')
    if implementation not in IMPLEMENTATIONS:
      raise ValueError(f'Unknown causal implementation {implementation!r}; valid choices: '
                       f"{', '.join(repr(i) for i in IMPLEMENTATIONS)}.")
    if chunk_size < 1:
      raise ValueError(f'chunk_size must be positive, got {chunk_size}.')
    _feature_map(feature_map)  # Validate the name now rather than at the first call.
    self.num_heads = num_heads
    self.head_dim = dim // num_heads
    self.tie_kv = tie_kv
    self.feature_map = feature_map
    self.chunk_size = chunk_size
    self.implementation = implementation
    qkv = dict(init=init, role='qkv', dtype=dtype, rngs=rngs)
    self.pack_query = projection(dim, **qkv)
    self.pack_context = projection(dim, **qkv)
    self.query = projection(dim, **qkv)
    self.key = projection(dim, **qkv)
    self.value = None if tie_kv else projection(dim, **qkv)
    self.out = projection(dim, init=init, role='out', dtype=dtype, rngs=rngs)
    self.dropout = Dropout(attention_dropout)

  def project_pack(self, p: jax.Array, batch_size: int) -> jax.Array:
    """pq = Linear_pq(P) * dh^-1/2 per head; p [l, D] or [B, l, D] -> [B, H, l, dh]."""
    if p.ndim == 2:
      p = jnp.broadcast_to(p, (batch_size, *p.shape))
    return split_heads(self.pack_query(p), self.num_heads) * self.head_dim**-0.5

  def _phi(self, x, pack_query):
    """phi = omega(Linear_pc(X) pq^T) [B, H, n, l] (paper: A_pack^T = omega(X P^T / sqrt(d)))."""
    context = split_heads(self.pack_context(x), self.num_heads)
    return feature_map(self.feature_map)(jnp.einsum('bhnd,bhld->bhnl', context, pack_query))

  def _queries_keys_values(self, x):
    q = split_heads(self.query(x), self.num_heads) * self.head_dim**-0.5
    k = split_heads(self.key(x), self.num_heads)
    v = k if self.value is None else split_heads(self.value(x), self.num_heads)
    return q, k, v

  def __call__(self, x: jax.Array, p: jax.Array, *, deterministic: bool = True,
               rngs: nnx.Rngs | None = None) -> jax.Array:
    """Y = Linear_out(f(A, phi, V)) with A = softmax(f(Q, K, phi)) (eq. 7); x [B, n, D] -> [B, n, D].

    p: [l, D] (shared over the batch) or [B, l, D].
    """
    pack_query = self.project_pack(p, x.shape[0])
    # The same dropped phi feeds both the pack sum and the unpack sum (luna.md §6).
    phi = self.dropout(self._phi(x, pack_query), deterministic=deterministic, rngs=rngs)
    a_dropout_scale = None
    if not deterministic and self.dropout.rate > 0.0:
      # Drawn up front as [B, H, n, l] (the size of phi) so every implementation sees one mask.
      a_dropout_scale = self.dropout(jnp.ones(phi.shape, jnp.float32), deterministic=False,
                                     rngs=rngs)
    q, k, v = self._queries_keys_values(x)
    if self.implementation == 'chunked':
      out, _ = causal_luna_chunked(q, k, v, phi, chunk_size=self.chunk_size,
                                   a_dropout_scale=a_dropout_scale)
    elif self.implementation == 'cumsum':
      out, _ = causal_luna_cumsum(q, k, v, phi, a_dropout_scale=a_dropout_scale)
    else:
      out, _ = causal_luna_direct(q, k, v, phi, a_dropout_scale=a_dropout_scale)
    return self.out(merge_heads(out))

  def init_cache(self, batch_size: int, p: jax.Array) -> CausalLunaCache:
    """Empty decoding state: P projected once, zero running sums, step 0."""
    pack_query = self.project_pack(p, batch_size)
    _, h, l, d = pack_query.shape
    return CausalLunaCache(pack_query=pack_query,
                           key_pack_sum=jnp.zeros((batch_size, h, d, l), jnp.float32),
                           pack_value_sum=jnp.zeros((batch_size, h, l, d), jnp.float32),
                           step=jnp.zeros((), jnp.int32))

  def step(self, x_t: jax.Array, cache: CausalLunaCache) -> tuple[jax.Array, CausalLunaCache]:
    """One token of eq. 7 (deterministic): x_t [B, 1, D] or [B, D] -> (y_t of the same shape, cache).

    Equals position t of `__call__` on the full prefix.
    """
    x = x_t if x_t.ndim == 3 else x_t[:, None]
    phi = self._phi(x, cache.pack_query)[:, :, 0]  # [B, H, l]
    q, k, v = (a[:, :, 0] for a in self._queries_keys_values(x))  # [B, H, dh]
    steps = (cache.step + 1).astype(jnp.float32)
    key_pack_sum = cache.key_pack_sum + _einsum32('bhd,bhl->bhdl', k, phi)
    pack_value_sum = cache.pack_value_sum + _einsum32('bhl,bhd->bhld', phi, v)
    probs = _pack_probs(_einsum32('bhd,bhdl->bhl', q, key_pack_sum) / steps, None)
    out = _einsum32('bhl,bhld->bhd', probs, pack_value_sum) / steps
    y = self.out(out.astype(v.dtype).reshape(x.shape[0], 1, -1))
    cache = CausalLunaCache(cache.pack_query, key_pack_sum, pack_value_sum, cache.step + 1)
    return (y if x_t.ndim == 3 else y[:, 0]), cache


# ----------------------------------------------------------------------------- decoder-only LM


class CausalLunaDecoderLayer(nnx.Module):
  """Post-LN Luna layer (paper eq. 6, luna.md §2) with causal attention and its own learnable P.

  P [l, D] ~ N(0, D^-1/2) is a parameter of this layer (paper §3.3, decoder-only mode): it must
  carry no information about X, so there is no P' passed between layers and no pack output.
    X1 = LN_attn(X + Dropout(CausalLunaAttn(X, P)));  X' = LN_ffn(X1 + Dropout(W2 act(W1 X1)))
  """

  def __init__(self, dim: int, num_heads: int, ffn_dim: int, pack_length: int, *,
               dropout: float = 0.0, attention_dropout: float = 0.0, activation: str = 'gelu',
               tie_kv: bool = False, feature_map: str = 'softplus', chunk_size: int = 64,
               implementation: str = 'chunked', init: str = 'reference', dtype=jnp.float32,
               rngs: nnx.Rngs):
    if activation not in ('gelu', 'relu'):
      raise ValueError(f"Unknown activation {activation!r}; valid choices: 'gelu', 'relu'.")
    self.activation = activation
    self.pack = nnx.Param(jax.random.normal(rngs.params(), (pack_length, dim)) * dim**-0.5)
    self.attention = CausalLunaAttention(
        dim, num_heads, attention_dropout=attention_dropout, tie_kv=tie_kv,
        feature_map=feature_map, chunk_size=chunk_size, implementation=implementation, init=init,
        dtype=dtype, rngs=rngs)
    ffn_init = projection_init(init, 'out')
    self.ffn_in = Linear(dim, ffn_dim, kernel_init=ffn_init, dtype=dtype, rngs=rngs)
    self.ffn_out = Linear(ffn_dim, dim, kernel_init=ffn_init, dtype=dtype, rngs=rngs)
    self.attention_norm = layers.LayerNorm(dim, dtype=dtype)
    self.ffn_norm = layers.LayerNorm(dim, dtype=dtype)
    self.dropout = Dropout(dropout)

  def _feed_forward(self, x, *, deterministic, rngs):
    hidden = self.ffn_in(x)
    # Exact (erf) GELU as in the LRA reference; relu as in its MT models.
    hidden = jax.nn.gelu(hidden, approximate=False) if self.activation == 'gelu' else (
        jax.nn.relu(hidden))
    y = self.ffn_out(hidden)
    return self.ffn_norm(x + self.dropout(y, deterministic=deterministic, rngs=rngs))

  def __call__(self, x: jax.Array, *, deterministic: bool = True,
               rngs: nnx.Rngs | None = None) -> jax.Array:
    """Eq. 6 without the P' output; x [B, n, D] -> [B, n, D]."""
    y = self.attention(x, self.pack[...], deterministic=deterministic, rngs=rngs)
    x = self.attention_norm(x + self.dropout(y, deterministic=deterministic, rngs=rngs))
    return self._feed_forward(x, deterministic=deterministic, rngs=rngs)

  def init_cache(self, batch_size: int) -> CausalLunaCache:
    return self.attention.init_cache(batch_size, self.pack[...])

  def step(self, x_t: jax.Array, cache: CausalLunaCache) -> tuple[jax.Array, CausalLunaCache]:
    """One token (deterministic): x_t [B, D] -> (x'_t [B, D], cache)."""
    y, cache = self.attention.step(x_t, cache)
    x = self.attention_norm(x_t + y)
    return self._feed_forward(x, deterministic=True, rngs=None), cache


class CausalLunaLMCache(NamedTuple):
  """Decoding state of `CausalLunaLM`: one attention cache per layer and the next position."""
  layers: tuple
  position: jax.Array


class CausalLunaLM(nnx.Module):
  """Decoder-only Luna language model: token + learned position embeddings (no sqrt(D) scale),
  embedding LayerNorm and dropout (as luna.md §5), causal Luna layers, a Linear to vocab logits.

  Sequences are at most `max_length` long: `__call__` raises on longer input; `decode_step` past
  it reads an out-of-range position embedding, which jnp.take fills with NaN.
  """

  def __init__(self, vocab_size: int, dim: int, num_heads: int, num_layers: int, ffn_dim: int,
               pack_length: int, max_length: int, dropout: float = 0.0,
               attention_dropout: float = 0.0, *, activation: str = 'gelu', tie_kv: bool = False,
               feature_map: str = 'softplus', chunk_size: int = 64,
               implementation: str = 'chunked', init: str = 'reference', dtype=jnp.float32,
               rngs: nnx.Rngs):
    embed_init = (jax.nn.initializers.normal(0.02) if init == 'bert'
                  else jax.nn.initializers.normal(dim**-0.5))
    self.max_length = max_length
    self.token_embed = nnx.Embed(vocab_size, dim, embedding_init=embed_init, dtype=dtype,
                                 rngs=rngs)
    self.position_embed = nnx.Embed(max_length, dim, embedding_init=embed_init, dtype=dtype,
                                    rngs=rngs)
    self.embed_norm = layers.LayerNorm(dim, dtype=dtype)
    self.dropout = Dropout(dropout)
    self.layers = nnx.List([
        CausalLunaDecoderLayer(
            dim, num_heads, ffn_dim, pack_length, dropout=dropout,
            attention_dropout=attention_dropout, activation=activation, tie_kv=tie_kv,
            feature_map=feature_map, chunk_size=chunk_size, implementation=implementation,
            init=init, dtype=dtype, rngs=rngs)
        for _ in range(num_layers)])
    self.lm_head = Linear(dim, vocab_size, kernel_init=projection_init(init, 'out'),
                          dtype=dtype, rngs=rngs)

  def _embed(self, tokens, positions, *, deterministic, rngs):
    x = self.token_embed(tokens) + self.position_embed(positions)
    return self.dropout(self.embed_norm(x), deterministic=deterministic, rngs=rngs)

  def __call__(self, tokens: jax.Array, *, deterministic: bool = True,
               rngs: nnx.Rngs | None = None) -> jax.Array:
    """tokens [B, n] int -> next-token logits [B, n, vocab]."""
    if tokens.shape[1] > self.max_length:
      raise ValueError(f'Sequence length {tokens.shape[1]} exceeds max_length {self.max_length}.')
    positions = jnp.arange(tokens.shape[1])[None]
    x = self._embed(tokens, positions, deterministic=deterministic, rngs=rngs)
    for layer in self.layers:
      x = layer(x, deterministic=deterministic, rngs=rngs)
    return self.lm_head(x)

  def init_cache(self, batch_size: int) -> CausalLunaLMCache:
    return CausalLunaLMCache(layers=tuple(layer.init_cache(batch_size) for layer in self.layers),
                             position=jnp.zeros((), jnp.int32))

  def decode_step(self, token: jax.Array,
                  cache: CausalLunaLMCache) -> tuple[jax.Array, CausalLunaLMCache]:
    """token [B] int -> (logits [B, vocab] for the next token, cache); equals `__call__` row t."""
    x = self._embed(token, cache.position, deterministic=True, rngs=None)
    layer_caches = []
    for layer, layer_cache in zip(self.layers, cache.layers):
      x, layer_cache = layer.step(x, layer_cache)
      layer_caches.append(layer_cache)
    return self.lm_head(x), CausalLunaLMCache(tuple(layer_caches), cache.position + 1)


@partial(jax.jit, static_argnames=('graphdef', 'num_steps'))
def _greedy_generate(graphdef, state, prompt, num_steps):
  model = nnx.merge(graphdef, state)

  def read_prompt(cache, token):
    logits, cache = model.decode_step(token, cache)
    return cache, logits

  cache, logits = jax.lax.scan(read_prompt, model.init_cache(prompt.shape[0]), prompt.T)

  def generate(carry, _):
    token, cache = carry
    logits, cache = model.decode_step(token, cache)
    return (jnp.argmax(logits, axis=-1).astype(token.dtype), cache), token

  first = jnp.argmax(logits[-1], axis=-1).astype(prompt.dtype)
  _, generated = jax.lax.scan(generate, (first, cache), None, length=num_steps)
  return jnp.concatenate([prompt, generated.T], axis=1)


def greedy_generate(model: CausalLunaLM, prompt: jax.Array, num_steps: int) -> jax.Array:
  """Greedy decoding with `decode_step`: prompt [B, n0] (n0 >= 1) -> [B, n0 + num_steps] tokens."""
  graphdef, state = nnx.split(model)
  return _greedy_generate(graphdef, state, prompt, num_steps)
