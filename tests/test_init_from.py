"""Fine-tuning from a pretrained run: `config.init_from` loads exactly the parameters that match
by name and shape, initialises the rest, copies the vocabulary, and rejects what cannot fit."""

import os

from fine_tunes import matching_params, train
import jax
import numpy as np
import pytest
from test_training import get_config, tiny

import tasks
from training import layout
from training.checkpoints import Checkpointer, CheckpointMismatchError
from training.setup import build_state


@pytest.fixture(scope='module')
def pretrained(tfds_dir, tmp_path_factory):
  """A 1-layer translation Transformer trained for 4 steps, and its config."""
  data_dir = tfds_dir
  workdir = str(tmp_path_factory.mktemp('pretrained'))
  config = tiny(get_config('default'), data_dir)
  train(config, workdir)
  return workdir, config


def _flat_params(state):
  return {
    jax.tree_util.keystr(path, simple=True, separator='.'): np.asarray(leaf)
    for path, leaf in jax.tree_util.tree_flatten_with_path(state.params)[0]
  }


def test_init_from_names_a_workdir_or_a_step_in_it():
  assert layout.checkpoint_step('runs/bert') == ('runs/bert', None)
  assert layout.checkpoint_step('runs/bert/') == ('runs/bert', None)
  assert layout.checkpoint_step('runs/bert/checkpoints/200') == ('runs/bert', 200)
  assert layout.checkpoint_step('runs/200') == ('runs/200', None)


def test_loads_exactly_the_matching_names_and_initialises_the_rest(pretrained, tmp_path):
  workdir, config = pretrained
  # A deeper decoder: layer 0 of each stack matches the checkpoint, the new layer 1 cannot.
  deeper = config.copy_and_resolve_references()
  deeper.model.num_decoder_layers = 2
  task = tasks.build(deeper, workdir)
  fresh = build_state(deeper, task)
  deeper.init_from = workdir
  state, loaded, initialised = matching_params(fresh, deeper)

  saved, _ = Checkpointer(os.path.join(workdir, 'checkpoints'), max_to_keep=None).restore(
    build_state(config, tasks.build(config, workdir))
  )
  saved_params = {f'params.{key}': value for key, value in _flat_params(saved).items()}
  fresh_params = {f'params.{key}': value for key, value in _flat_params(fresh).items()}
  new_params = {f'params.{key}': value for key, value in _flat_params(state).items()}
  assert sorted(loaded) == sorted(set(saved_params) & set(fresh_params))
  assert initialised == sorted(set(fresh_params) - set(saved_params))
  assert initialised and all('decoder_layers.1.' in key for key in initialised)
  for key in loaded:
    np.testing.assert_array_equal(new_params[key], saved_params[key])
  for key in initialised:
    np.testing.assert_array_equal(new_params[key], fresh_params[key])
  assert int(state.step) == 0  # a new run, with fresh optimizer moments
  np.testing.assert_array_equal(
    jax.tree.leaves(state.opt_state)[1], jax.tree.leaves(fresh.opt_state)[1]
  )


def test_a_step_of_the_workdir_loads_that_step(pretrained):
  workdir, config = pretrained
  task = tasks.build(config, workdir)
  step_4 = config.copy_and_resolve_references()
  step_4.init_from = os.path.join(workdir, 'checkpoints', '4')
  state, loaded, initialised = matching_params(build_state(config, task), step_4)
  assert loaded and not initialised
  step_4.init_from = os.path.join(workdir, 'checkpoints', '3')
  with pytest.raises(FileNotFoundError, match='holds no checkpoint at step 3'):
    matching_params(state, step_4)


def test_a_shape_that_differs_for_an_existing_name_is_one_clear_error(pretrained):
  workdir, config = pretrained
  wider = config.copy_and_resolve_references()
  wider.model.d_ff = 64
  wider.init_from = workdir
  with pytest.raises(CheckpointMismatchError, match=r'config.init_from=.*other shapes.*w_1'):
    matching_params(build_state(wider, tasks.build(wider, workdir)), wider)


def test_a_fine_tuning_run_starts_from_the_weights_and_the_vocabulary(pretrained, tmp_path):
  workdir, config = pretrained
  tuned = config.copy_and_resolve_references()
  tuned.update(init_from=workdir, num_train_steps=1)
  train(tuned, str(tmp_path))
  vocab = os.path.join(workdir, tasks.VOCAB_DIR, 'vocab.json')
  with (
    open(vocab, encoding='utf-8') as f,
    open(os.path.join(tmp_path, tasks.VOCAB_DIR, 'vocab.json'), encoding='utf-8') as g,
  ):
    assert f.read() == g.read()


def test_init_from_without_a_checkpoint_is_one_sentence_before_anything_is_built(
  pretrained, tmp_path
):
  _, config = pretrained
  config = config.copy_and_resolve_references()
  config.init_from = str(tmp_path / 'nothing_here')
  with pytest.raises(
    FileNotFoundError, match='names nothing Attend reads: give a training workdir'
  ):
    train(config, str(tmp_path / 'run'))
  assert not os.path.exists(tmp_path / 'run' / tasks.VOCAB_DIR)
