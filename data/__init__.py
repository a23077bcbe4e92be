"""Attend's data: offline TFDS datasets, tokenizers, and resumable batches of NumPy arrays.

Importing this package registers the TFDS builders `number_words`, `dates` and `tsv_parallel`.

    task = data.build_task(config.dataset, workdir)       # see data.default_config() for fields
    it = task.batches('train', batch_size=64, shuffle=True, seed=0)
    batch = next(it)   # {'inputs': int32 [B, S], 'targets': int32 [B, T], 'index': int32 [B]}
    state = it.get_state()                                 # {'epoch': 0, 'batch': 1}

Special ids, the same in every vocabulary: `<pad>`=0, `<bos>`=1, `<eos>`=2, `<unk>`=3.
"""

from data.config import default_config, validate_config
from data.dates import Dates, DatesConfig
from data.number_words import NumberWords, NumberWordsConfig
from data.pipeline import BatchIterator, EncodedSplit
from data.task import Task, build_task
from data.text import TextOptions
from data.tokenizers import (BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID, CharTokenizer,
                             SentencePieceTokenizer, WordTokenizer, build_tokenizer,
                             load_tokenizers, save_tokenizers)
from data.tsv_parallel import TsvParallel, TsvParallelConfig, config_for_path

__all__ = [
    "BOS_ID", "BatchIterator", "CharTokenizer", "Dates", "DatesConfig", "EOS_ID", "EncodedSplit",
    "NumberWords", "NumberWordsConfig", "PAD_ID", "SPECIAL_TOKENS", "SentencePieceTokenizer",
    "Task", "TextOptions", "TsvParallel", "TsvParallelConfig", "UNK_ID", "WordTokenizer",
    "build_task", "build_tokenizer", "config_for_path", "default_config", "load_tokenizers",
    "save_tokenizers", "validate_config",
]
