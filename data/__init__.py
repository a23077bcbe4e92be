"""Attend's data, in rooms by role. Nothing is imported here: import the module you need.

- One module per task, named after the task in `tasks/` it serves, each with its
  `config.dataset` schema (`default_config`, `validate_config`) and `build(...)`:
  `translation` (with `translation_sources`), `classification` (with `classification_sources`
  and `classification_vocabulary`), `language` (with `language_sources` and `language_rows`),
  `image_classification`, `captioning`, `question_answering`, `algorithmic`.
- `builders/`: the TFDS datasets Attend generates offline and deterministically (number words,
  dates, digits, digit captions, key-sentence documents, associative recall, bAbI-style stories).
- `readers/`: the readers of users' own files (TSV corpora, image folders, the original bAbI
  files), each a TFDS builder prepared offline from the file.
- Shared: `tfds_reading` (a builder from `config.dataset`, a split read whole), `schema` (the
  checks every dataset schema shares), `tokenizers` (special ids `<pad>`=0, `<bos>`=1, `<eos>`=2,
  `<unk>`=3, the same in every vocabulary) and `pretrained_tokenizer`, `text` (preprocessing),
  `sentences` (a sentence splitter), `encoded_split` (a split's ids, flat) and `pipeline`
  (resumable, fixed-shape batches), `batch_source` (`batches`, which every task's data class
  offers, defined once).

    from data import translation
    translation_data = translation.build(config.dataset, workdir)
    it = translation_data.batches('train', batch_size=64, shuffle=True, seed=0)
    batch = next(it)   # {'inputs': int32 [B, S], 'targets': int32 [B, T], 'index': int32 [B]}
    state = it.get_state()                                 # {'epoch': 0, 'batch': 1}
"""
