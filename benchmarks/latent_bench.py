"""Multi-head latent attention's decoding step: the absorbed kernel against the plain path.

    python -m benchmarks.latent_bench --json=/tmp/latent.json

One layer (`models.latent_attention.LatentAttention`: d_model 512, 8 heads of 64, kv_lora_rank 64,
rope_head_dim 16, float32), B=1, a cache of `--cache` filled positions. Both sides read the same
cache and the same new query (its projections are shared by both and left out):

- absorbed: `attention.latent_attention`, the query folded into latent space, scores and the
  weighted sum over the `[S, r]` latents, then `W_UV`;
- plain: `attention.expand_latent` (keys and values per head, `[N, S, Dn + Dr]`, `[N, S, Dv]`,
  re-expanded at every step, as a cache of latents must) then `attention.VARIANTS['softmax']`.

A third row times the whole layer's `decode_step` (projections, cache write, absorbed kernel).
Times: `benchmarks.timing.compare`, medians of `--turns` turns of `--calls` calls each.
"""

from training import allocator

if __name__ == '__main__':
  allocator.use_mimalloc()  # first: the allocator is chosen at process start, before JAX loads

import argparse
import json

from flax import nnx
import jax
import jax.numpy as jnp

import attention
from benchmarks import timing
from models.latent_attention import LatentAttention
from models.stack_config import AttentionConfig

CONFIG = dict(
  d_model=512, num_heads=8, kv_lora_rank=64, rope_head_dim=16, positions='rope', qkv_bias=False
)


def sides(cache_length: int) -> dict:
  """`{name: call}`: the absorbed and plain attention of one new query over a full cache, and the
  layer's whole decoding step."""
  layer = LatentAttention(AttentionConfig(**CONFIG), rngs=nnx.Rngs(0))
  keys = jax.random.split(jax.random.key(1), 3)
  x = jax.random.normal(keys[0], (1, cache_length, CONFIG['d_model']))
  cache = jax.jit(lambda x: layer.decode_step(x, layer.init_cache(1, cache_length + 1), 0)[1])(x)
  step = jnp.int32(cache_length)
  q_nope, q_rope, _ = layer._queries(jax.random.normal(keys[1], (1, 1, 512)), step[None])
  w_uk, w_uv = layer._up()
  latent, rope_key = cache['latent'], cache['rope_key']  # [1, L, r], [1, L, Dr]
  mask = (jnp.arange(cache_length + 1) <= step)[None, None, None]  # [1, 1, 1, L]
  scale = layer.scale

  @jax.jit
  def absorbed(q_nope, q_rope, latent, rope_key):
    return attention.latent_attention(
      q_nope, q_rope, latent, rope_key, w_uk, w_uv, mask=mask, scale=scale
    )

  @jax.jit
  def plain(q_nope, q_rope, latent, rope_key):
    k, v = attention.expand_latent(latent, rope_key, w_uk, w_uv)  # [1, N, L, Dn + Dr | Dv]
    q = jnp.concatenate([q_nope, q_rope], axis=-1)
    return attention.VARIANTS['softmax'].attend(q, k, v, mask=mask, scale=scale)

  layer_step = jax.jit(layer.decode_step)
  new = jax.random.normal(keys[2], (1, 1, CONFIG['d_model']))
  inputs = (q_nope, q_rope, latent, rope_key)
  return {
    'absorbed': lambda: absorbed(*inputs),
    'plain': lambda: plain(*inputs),
    'layer decode_step (absorbed)': lambda: layer_step(new, cache, step),
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--cache', type=int, default=2048, help='filled cache positions')
  parser.add_argument('--turns', type=int, default=5)
  parser.add_argument('--calls', type=int, default=20)
  parser.add_argument('--json', default='', help='write the results here')
  args = parser.parse_args()
  fns = sides(args.cache)
  times = timing.compare(fns, turns=args.turns, calls=args.calls, warmup=3)
  absorbed, plain = fns['absorbed'](), fns['plain']()
  report = {
    'device': jax.devices()[0].device_kind,
    'cache': args.cache,
    'config': CONFIG,
    'turns': args.turns,
    'calls': args.calls,
    'max_abs_difference': float(jnp.abs(absorbed - plain).max()),
    'results': [
      {'case': name, 'ms': times.seconds(name) * 1e3, 'spread_ms': times.spread(name).scaled(1e3)}
      for name in fns
    ],
    'plain_over_absorbed': times.ratio('plain', 'absorbed')._asdict(),
  }
  if args.json:
    with open(args.json, 'w', encoding='utf-8') as f:
      json.dump(report, f, indent=1)
  print(json.dumps(report, indent=1))


if __name__ == '__main__':
  main()
