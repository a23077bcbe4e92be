"""What every task provides: the chain examples -> batches -> model inputs -> loss -> evaluation.

The training loop, checkpointing and evaluation in `training/` see an experiment only through
this interface, so they never ask which task runs. A task is built from the whole config (it reads
`config.dataset` and the loss fields it needs) and a workdir (for vocabularies it saves).

Batches are dicts of fixed-shape NumPy arrays with the batch on axis 0, and always carry
`'index'`: the example's position in its split, -1 for the padding rows that fill a last batch.
Counts are dicts of scalars that add up over batches (e.g. tokens, correct predictions); the
task turns their sums into metrics with `summarize`.
"""

import abc
import dataclasses
from typing import Any, ClassVar, Protocol

from flax import nnx
import jax
import ml_collections

from attention import Press
from data.batch_source import BatchSource
import models

Array = jax.Array
Batch = dict[str, Any]
# The workdir's sub-folder where a task saves what it derives from the data (vocabularies); a
# fine-tuning run (`config.init_from`) starts with a copy of its pretraining run's.
VOCAB_DIR = 'vocab'


@dataclasses.dataclass(frozen=True)
class EvalOptions:
  """How `eval.py` (or validation during training) predicts and draws.

  Attributes:
    max_examples: predict only the first this many examples of the split (0 = all).
    beam_size: 1 = greedy; more = beam search, for tasks that generate sequences.
    alpha: beam-search length penalty.
    num_pictures: attention pictures to draw, for the first predicted examples.
    layer: the layer whose attention is drawn (negative counts from the end).
    head: the head drawn; -1 = the mean over heads.
    temperatures: sampling temperatures, for tasks that sample text (0 = greedy).
    top_k: sampling keeps only the k most likely tokens (0 = all).
    top_p: sampling keeps the smallest set of most likely tokens with this mass (1 = all).
    seed: the sampling seed (the same seed samples the same text).
    press: `(press, ratio)`: the KV-cache press (an `attention.Press`, resolved from its name by
      the entry point) the continuations' prompts are compressed by, or None
      (`models.compression`).
  """

  max_examples: int = 0
  beam_size: int = 1
  alpha: float = 0.6
  num_pictures: int = 0
  layer: int = -1
  head: int = -1
  temperatures: tuple[float, ...] = (0.0,)
  top_k: int = 0
  top_p: float = 1.0
  seed: int = 0
  press: tuple[Press, float] | None = None


class BatchIterator(Protocol):
  """An iterator of batches whose position can be saved in, and restored from, a checkpoint."""

  def __next__(self) -> Batch:
    """The next batch; StopIteration after the last epoch."""

  def get_state(self) -> dict[str, int]:
    """The position of the next batch, JSON-able."""

  def set_state(self, state: dict[str, int]) -> None:
    """Restores a position from `get_state`; the next batch is the one that followed it."""


class Task(abc.ABC):
  """One kind of experiment. Subclasses set `interface` and implement the abstract methods.

  Attributes:
    data: the task's data (set by `__init__`), which the default `batches` reads.
    interface: the Protocol (from `models.interfaces`) that a model must implement to fit.
    unit: the count in `loss`'s counts that measures throughput (logged per second).
    samples_header: the first line of the samples file, naming the fields of each line.
    samples_file: the file in `eval/` that holds one line per predicted example.
    selection_metric: the validation metric that picks the best checkpoint by default
      (`training.selection`; config.selection_metric overrides it): the task's headline metric
      where every validation has it, else the loss.
    decoded_metrics: the metrics `prediction_metrics` computes from decoded outputs, which a
      validation has only with config.num_eval_decode > 0 (tests check the names).
  """

  data: BatchSource
  interface: ClassVar[type]
  unit: ClassVar[str]
  samples_header: ClassVar[str]
  samples_file: ClassVar[str] = 'samples.txt'
  selection_metric: ClassVar[str] = 'loss'
  decoded_metrics: ClassVar[tuple[str, ...]] = ()

  @staticmethod
  @abc.abstractmethod
  def dataset_config() -> ml_collections.ConfigDict:
    """The `config.dataset` schema of this task: every field at its default."""

  @abc.abstractmethod
  def __init__(self, config: ml_collections.ConfigDict, workdir: str):
    """Prepares the data of `config.dataset` (and what it derives, e.g. vocabularies)."""

  @abc.abstractmethod
  def model_args(self) -> dict[str, Any]:
    """The model constructor arguments that come from the data (sizes, special ids)."""

  def build_model(self, model_config: Any, rngs: nnx.Rngs) -> nnx.Module:
    """The model `config.model` names, with this task's data arguments."""
    return models.build(model_config, rngs=rngs, **self.model_args())

  def batches(
    self, split: str, *, batch_size: int, shuffle: bool, seed: int, num_epochs: int | None = None
  ) -> BatchIterator:
    """This host's share of the global batches of `split` (see the module docstring): by
    default `self.data`'s, as `data.batch_source.BatchSource.batches` documents them."""
    return self.data.batches(
      split, batch_size=batch_size, shuffle=shuffle, seed=seed, num_epochs=num_epochs
    )

  def split_views(self, split: str) -> dict[str, str]:
    """Other views of `split` that every evaluation also reports, `{metric suffix: split name
    for batches}` (a language model's rows of other lengths: `{'@256': 'validation@256'}`)."""
    del split
    return {}

  @abc.abstractmethod
  def loss(self, model: nnx.Module, batch: Batch, rng: Array) -> tuple[Array, dict[str, Array]]:
    """The training loss (a scalar, dropout on with `rng`) and the batch's counts. Pure."""

  @abc.abstractmethod
  def eval_counts(self, model: nnx.Module, batch: Batch) -> dict[str, Array]:
    """The counts of a batch without dropout, including what `summarize` needs for the loss."""

  @abc.abstractmethod
  def summarize(self, counts: dict[str, float]) -> dict[str, float]:
    """Metrics from counts summed over batches (each metric the counts present allow)."""

  @abc.abstractmethod
  def predict(self, model: nnx.Module, batch: Batch, options: EvalOptions) -> dict[str, Array]:
    """Predictions for the batch's rows (arrays with the batch on axis 0), e.g. decoded ids."""

  @abc.abstractmethod
  def sample(self, split: str, row: dict[str, Any]) -> dict[str, Any]:
    """One example's record from its batch row and prediction row (NumPy), for files and plots.

    Every record has 'index' and, for the samples file, a 'line' of text.
    """

  @abc.abstractmethod
  def prediction_metrics(self, samples: list[dict[str, Any]]) -> dict[str, float]:
    """Metrics of the predicted samples (exact match, BLEU, accuracy, ...)."""

  def metric_signatures(self) -> dict[str, str]:
    """How some of `prediction_metrics` were computed, by metric name (sacreBLEU's signatures
    for BLEU and chrF); eval.py writes them into metrics.json as 'signatures'."""
    return {}

  @abc.abstractmethod
  def draw(
    self, model: nnx.Module, samples: list[dict[str, Any]], out_dir: str, options: EvalOptions
  ) -> list[str]:
    """Writes the task's attention pictures for `samples` into `out_dir`; returns their paths."""

  def explore(
    self, model: nnx.Module, samples: list[dict[str, Any]], options: EvalOptions
  ) -> list[dict[str, Any]]:
    """The attention explorer's record per sample of `samples` (the examples to show): its
    reference, prediction, correctness and attention views (`reports.explorer` names the
    fields). The default shows none; every task of Attend overrides it."""
    del model, options
    return [dict(index=s['index'], views=[], correct=None) for s in samples]

  def text_sample(self, model: nnx.Module, text: str, options: EvalOptions) -> dict[str, Any]:
    """`sample`'s record of a researcher's own `text`, read as this task reads an example of
    its data, predicted, with no reference (its fields None): what `draw` and `explore` take
    (prompt.py attention). The default refuses: tasks of images or symbols read no text.

    Raises:
      ValueError: one sentence, if this task reads no text or `text` does not fit it.
    """
    del model, text, options
    raise ValueError(f'{type(self).__name__} reads no text, so it has no prompt to read.')

  @classmethod
  def has_text_samples(cls) -> bool:
    """Whether `text_sample` takes a researcher's text (the task overrides it)."""
    return cls.text_sample is not Task.text_sample


def one_row(task: Task, model: nnx.Module, batch: Batch, options: EvalOptions) -> dict[str, Any]:
  """A one-example batch's fields and `task.predict`'s, as `Task.sample` receives a row (NumPy,
  the batch axis dropped, index 0)."""
  predictions = jax.device_get(task.predict(model, batch, options))
  return {key: value[0] for key, value in {**batch, **predictions}.items()} | {'index': 0}
