"""Attend's attention kernels: pure, jit/vmap/grad-safe JAX functions.

Shapes: queries `[..., T, D]`, keys `[..., S, D]`, values `[..., S, Dv]`; leading dims (batch,
heads) are free. Masks broadcast to `[..., T, S]` with True = may attend.
"""

from attention import addressing  # the NTM's steps: attention.addressing.address, read, write
from attention.chunked import chunked_attention
from attention.core import (attend, attention, attention_pooling, masked_softmax, merge_heads,
                            split_heads)
from attention.masks import causal_mask, combine_masks, padding_mask, padding_mask_from_ids
from attention.penalties import attention_entropy, doubly_stochastic_penalty
from attention.positions import (rotary_embedding, sentence_position_encoding,
                                 sinusoidal_embedding, sinusoidal_positions,
                                 sinusoidal_positions_2d)
from attention.rollout import attention_rollout
from attention.scores import (SCORES, KeyPrep, Score, ScoreParam, ScoreSizes, additive_scores,
                              cosine_scores, dot_scores, general_scores, get_score, get_score_fn,
                              project_keys, scaled_dot_scores)
from attention.sdpa import KERNELS, scaled_dot_product_attention

__all__ = [
    "KERNELS", "KeyPrep", "SCORES", "Score", "ScoreParam", "ScoreSizes", "additive_scores",
    "addressing", "attend", "attention", "attention_entropy", "attention_pooling", "attention_rollout", "causal_mask",
    "chunked_attention", "combine_masks", "cosine_scores", "dot_scores",
    "doubly_stochastic_penalty", "general_scores", "get_score", "get_score_fn", "masked_softmax",
    "merge_heads", "padding_mask", "padding_mask_from_ids", "project_keys", "rotary_embedding",
    "scaled_dot_product_attention", "sentence_position_encoding", "scaled_dot_scores",
    "sinusoidal_embedding",
    "sinusoidal_positions", "sinusoidal_positions_2d", "split_heads",
]
