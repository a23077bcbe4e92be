"""studies/mechanisms.py's measurements on its own models, at its sizes but untrained: the cache
bytes per token counted from each mechanism's cache arrays against the sizes its configuration
gives by hand, and the sink share and largest activation read from one captured pass (a layer
that forms no weights, a delta-rule layer, left out of the share and counted)."""

from flax import nnx
import jax.numpy as jnp
import numpy as np
import pytest

from models import interventions
from models.language import DecoderLM
from models.stack_config import StackConfig
from studies import mechanisms

CONTEXT = 2048
D, L = mechanisms.MODEL['d_model'], mechanisms.MODEL['num_layers']
H = D // mechanisms.MODEL['num_heads']  # 32: every head's size
DELTA_LAYER = 4 * (4 * H * H + 3 * (3 * D))  # its state [4, 32, 32] and conv [3, q+k+v]


def _model(name: str) -> DecoderLM:
  fields = mechanisms._model_fields(name, seq_length=128)
  stack = StackConfig(norm='pre', max_length=CONTEXT, **fields)
  return DecoderLM(vocab_size=40, pad_id=0, stack=stack, rngs=nnx.Rngs(0))


@pytest.mark.parametrize(
  'name, per_token',
  [
    ('softmax', L * 2 * D * 4),  # a key and a value of D features per layer, float32
    ('MLA latent 16', L * (16 + 16) * 4),  # the latent and the shared rotary key only
    ('DeepSeek sparse k=T/4', L * (64 + 16 + 32) * 4),  # and the indexer's key
    ('Gated DeltaNet', L * DELTA_LAYER / CONTEXT),  # a fixed state spread over the context
    ('3:1 hybrid', (3 * DELTA_LAYER / CONTEXT) + 2 * D * 4),
  ],
)
def test_cache_bytes_per_token_are_counted_from_the_cache_arrays(name, per_token):
  assert mechanisms.cache_bytes_per_token(_model(name), CONTEXT) == pytest.approx(per_token)


def test_the_readings_of_a_hybrid_leave_out_the_layers_without_weights():
  model = _model('3:1 hybrid')
  ids = np.random.default_rng(0).integers(1, 40, (2, 12))
  readings = mechanisms._readings(model, ids)
  _, captured = interventions.capture(model, jnp.asarray(ids), method='encode')
  weights = captured['layers/3/self_attn/weights']  # the one softmax layer
  assert readings['sink_layers'] == 1
  assert readings['sink_share'] == pytest.approx(float(jnp.mean(weights[..., 1:, 0])), rel=1e-5)
  residual = max(float(jnp.max(jnp.abs(captured[f'layers/{i}/residual']))) for i in range(L))
  assert readings['largest_activation'] == pytest.approx(residual, rel=1e-5)
