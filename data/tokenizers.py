"""Character, word and SentencePiece tokenizers, built from a training split, saved as plain files.

Every vocabulary starts with the same special ids: `<pad>`=0, `<bos>`=1, `<eos>`=2, `<unk>`=3.
`encode` adds no specials; the input pipeline appends EOS and the training code prepends BOS.
`decode` stops at the first EOS and skips PAD and BOS, so it accepts raw model output.

Saved layout in a directory (the training workdir): `vocab.json` holds, per side, the tokenizer
kind and either its token list (char, word) or the name of a SentencePiece model file stored
beside it (`source.spm.model`, `target.spm.model`, or `shared.spm.model`).
"""

import collections
from collections.abc import Iterable, Sequence
import io
import json

from etils import epath
import sentencepiece as spm

from data.pretrained_tokenizer import PretrainedTokenizer
from data.special_ids import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID

VOCAB_KINDS = ('char', 'word', 'sentencepiece')
MANIFEST = 'vocab.json'

# Shown for a space in `CharTokenizer.tokens`, as SentencePiece does, so axis labels stay visible.
_SPACE_LABEL = '\u2581'
# SentencePiece keeps at most this many training sentences; more add time, not quality.
_SPM_MAX_SENTENCES = 1_000_000


def _ints(ids: Iterable[int]) -> list[int]:
  """The ids before the first EOS, without PAD and BOS, as Python ints (accepts NumPy arrays)."""
  out = []
  for i in ids:
    i = int(i)
    if i == EOS_ID:
      break
    if i not in (PAD_ID, BOS_ID):
      out.append(i)
  return out


class SpecialIds:
  """The special ids every tokenizer exposes; models, decoding and losses read them from here."""

  pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID
  # Every id that is not text (BERT masking never picks one); a pretrained tokenizer has its own.
  special_ids = tuple(range(len(SPECIAL_TOKENS)))


class VocabTokenizer(SpecialIds):
  """A tokenizer over an explicit token list: ids are positions in `vocab` (specials first)."""

  kind = ''

  def __init__(self, vocab: Sequence[str]):
    """Creates the tokenizer.

    Args:
      vocab: all tokens, `SPECIAL_TOKENS` first, each token once.

    Raises:
      ValueError: if the specials are missing or a token repeats.
    """
    vocab = list(vocab)
    if tuple(vocab[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
      raise ValueError(f'{self.kind} vocabulary must start with {SPECIAL_TOKENS}, got {vocab[:4]}.')
    if len(set(vocab)) != len(vocab):
      raise ValueError(f'{self.kind} vocabulary has repeated tokens.')
    self.vocab = vocab
    self._ids = {token: i for i, token in enumerate(vocab)}

  @classmethod
  def build(cls, texts: Iterable[str], max_size: int | None = None) -> 'VocabTokenizer':
    """Counts the pieces of `texts`; most frequent first, ties in code-point order.

    Args:
      texts: training texts, already preprocessed.
      max_size: cap on the vocabulary size including the 4 specials; None keeps every piece.

    Returns:
      The tokenizer.
    """
    counts = collections.Counter()
    for text in texts:
      counts.update(cls._split(text))
    pieces = sorted(counts, key=lambda piece: (-counts[piece], piece))
    if max_size is not None:
      pieces = pieces[: max(0, max_size - len(SPECIAL_TOKENS))]
    return cls(SPECIAL_TOKENS + tuple(pieces))

  @staticmethod
  def _split(text: str) -> list[str]:
    raise NotImplementedError

  @staticmethod
  def _join(pieces: list[str]) -> str:
    raise NotImplementedError

  @property
  def vocab_size(self) -> int:
    """Number of ids, specials included."""
    return len(self.vocab)

  def encode(self, text: str) -> list[int]:
    """Ids of the pieces of `text`; pieces outside the vocabulary become `UNK_ID`."""
    return [self._ids.get(piece, UNK_ID) for piece in self._split(text)]

  def _piece(self, i: int) -> str:
    return self.vocab[i] if 0 <= i < len(self.vocab) else SPECIAL_TOKENS[UNK_ID]

  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids` up to the first EOS, PAD and BOS skipped; unknown ids read `<unk>`."""
    return self._join([self._piece(i) for i in _ints(ids)])

  def tokens(self, ids: Iterable[int]) -> list[str]:
    """One display string per id (specials by name), e.g. for attention heatmap axes."""
    return [self._piece(int(i)) for i in ids]

  def to_json(self) -> dict:
    return {'kind': self.kind, 'vocab': self.vocab}


class CharTokenizer(VocabTokenizer):
  """One id per character, the space included."""

  kind = 'char'

  @staticmethod
  def _split(text: str) -> list[str]:
    return list(text)

  @staticmethod
  def _join(pieces: list[str]) -> str:
    return ''.join(pieces)

  def tokens(self, ids: Iterable[int]) -> list[str]:
    return [_SPACE_LABEL if t == ' ' else t for t in super().tokens(ids)]


class WordTokenizer(VocabTokenizer):
  """One id per whitespace-separated word (use `split_punctuation` to separate punctuation)."""

  kind = 'word'

  @staticmethod
  def _split(text: str) -> list[str]:
    return text.split()

  @staticmethod
  def _join(pieces: list[str]) -> str:
    return ' '.join(pieces)


class SentencePieceTokenizer(SpecialIds):
  """A SentencePiece unigram model whose special ids match Attend's."""

  kind = 'sentencepiece'

  def __init__(self, model_proto: bytes):
    """Loads a serialized SentencePiece model (the bytes of a `.model` file)."""
    self.model_proto = model_proto
    self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
    specials = tuple(self._sp.id_to_piece(i) for i in range(len(SPECIAL_TOKENS)))
    if specials != SPECIAL_TOKENS:
      raise ValueError(f'SentencePiece model must start with {SPECIAL_TOKENS}, got {specials}.')

  @classmethod
  def build(
    cls, texts: Sequence[str], vocab_size: int, symbols: Sequence[str] = ()
  ) -> 'SentencePieceTokenizer':
    """Trains a unigram model on `texts` (at most 1M of them, evenly spaced).

    Args:
      texts: training texts, already preprocessed.
      vocab_size: the requested size; small corpora may give fewer pieces.
      symbols: strings that are always one piece of their own (after the specials).

    Returns:
      The tokenizer.

    Raises:
      ValueError: if `vocab_size` cannot hold the corpus's characters.
    """
    stride = max(1, len(texts) // _SPM_MAX_SENTENCES)
    sentences = [t for t in texts[::stride] if t]
    model = io.BytesIO()
    try:
      spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=vocab_size,
        model_type='unigram',
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
        pad_piece=SPECIAL_TOKENS[PAD_ID],
        bos_piece=SPECIAL_TOKENS[BOS_ID],
        eos_piece=SPECIAL_TOKENS[EOS_ID],
        unk_piece=SPECIAL_TOKENS[UNK_ID],
        unk_surface=SPECIAL_TOKENS[UNK_ID],
        hard_vocab_limit=False,
        # Identity normalization keeps decode(encode(x)) == x; TextOptions does the normalizing.
        normalization_rule_name='identity',
        shuffle_input_sentence=False,
        user_defined_symbols=list(symbols),
        minloglevel=2,
      )
    except RuntimeError as e:
      raise ValueError(
        f'config.dataset.vocab_size={vocab_size} is too small for SentencePiece on this corpus: {e}'
      ) from None
    return cls(model.getvalue())

  @property
  def vocab_size(self) -> int:
    """Number of ids, specials included."""
    return self._sp.vocab_size()

  def encode(self, text: str) -> list[int]:
    """Piece ids of `text`; characters never seen in training become `UNK_ID`."""
    return self._sp.encode(text, out_type=int)

  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids` up to the first EOS, PAD and BOS skipped; UNK reads `<unk>`."""
    return self._sp.decode([i if 0 <= i < self.vocab_size else UNK_ID for i in _ints(ids)])

  def scored_pieces(self) -> list[tuple[str, float]]:
    """Every piece with its unigram log-probability, in id order (`▁` marks a word start)."""
    return [(self._sp.id_to_piece(i), self._sp.get_score(i)) for i in range(self.vocab_size)]

  def tokens(self, ids: Iterable[int]) -> list[str]:
    """The piece of each id (`▁` marks a word start), for attention heatmap axes."""
    size = self.vocab_size
    return [
      self._sp.id_to_piece(int(i)) if 0 <= int(i) < size else SPECIAL_TOKENS[UNK_ID] for i in ids
    ]


Tokenizer = CharTokenizer | WordTokenizer | SentencePieceTokenizer
_VOCAB_CLASSES = {'char': CharTokenizer, 'word': WordTokenizer}


def build_tokenizer(
  kind: str, texts: Sequence[str], vocab_size: int, symbols: Sequence[str] = ()
) -> Tokenizer:
  """Builds a tokenizer of `kind` ('char' | 'word' | 'sentencepiece') from training texts.

  `vocab_size` caps word and SentencePiece vocabularies; a character vocabulary keeps every
  character of the training texts. `symbols` (SentencePiece only) are always pieces of their own.
  """
  if symbols and kind != 'sentencepiece':
    raise ValueError(f'Only sentencepiece vocabularies take symbols of their own, got {kind!r}.')
  if kind == 'char':
    return CharTokenizer.build(texts)
  if kind == 'word':
    return WordTokenizer.build(texts, max_size=vocab_size)
  if kind == 'sentencepiece':
    return SentencePieceTokenizer.build(texts, vocab_size, symbols)
  raise ValueError(f'Tokenizer kind must be one of {VOCAB_KINDS}, got {kind!r}.')


def save_tokenizers(directory: str, source: Tokenizer, target: Tokenizer, **info) -> None:
  """Writes both tokenizers into `directory` (created if needed); `info` goes into the manifest.

  When `source is target` the vocabulary is stored once and marked shared.
  """
  directory = epath.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  shared = source is target
  sides = {'shared': source} if shared else {'source': source, 'target': target}
  manifest = {'shared': shared, **info}
  for side, tokenizer in sides.items():
    if isinstance(tokenizer, SentencePieceTokenizer):
      filename = f'{side}.spm.model'
      (directory / filename).write_bytes(tokenizer.model_proto)
      manifest[side] = {'kind': tokenizer.kind, 'model_file': filename}
    elif tokenizer.kind == 'pretrained':  # data.pretrained_tokenizer: a checkpoint's own
      filename = f'{side}.tokenizer.json'
      (directory / filename).write_text(tokenizer.tokenizer_json)
      manifest[side] = {'kind': tokenizer.kind, 'model_file': filename}
      if tokenizer.chat_template:
        chat = f'{side}.chat_template.jinja'
        (directory / chat).write_text(tokenizer.chat_template)
        manifest[side]['chat_template'] = chat
    else:
      manifest[side] = tokenizer.to_json()
  # Written last and moved into place (over an older one), so a reader never sees a manifest
  # without its models.
  tmp = directory / (MANIFEST + '.tmp')
  tmp.write_text(json.dumps(manifest, ensure_ascii=False, indent=1))
  tmp.replace(directory / MANIFEST)


def load_tokenizers(directory: str) -> tuple[Tokenizer, Tokenizer] | None:
  """Reads the tokenizers saved by `save_tokenizers`; None when `directory` holds none.

  Returns:
    `(source, target)`, the same object twice when the vocabulary is shared.
  """
  directory = epath.Path(directory)
  path = directory / MANIFEST
  if not path.exists():
    return None
  manifest = json.loads(path.read_text())

  def load(entry: dict) -> Tokenizer:
    if entry['kind'] == 'sentencepiece':
      return SentencePieceTokenizer((directory / entry['model_file']).read_bytes())
    if entry['kind'] == 'pretrained':
      chat = (directory / entry['chat_template']).read_text() if 'chat_template' in entry else ''
      return PretrainedTokenizer((directory / entry['model_file']).read_text(), chat_template=chat)
    return _VOCAB_CLASSES[entry['kind']](entry['vocab'])

  if manifest['shared']:
    shared = load(manifest['shared'])
    return shared, shared
  return load(manifest['source']), load(manifest['target'])
