"""Copy accuracy (`tasks.copy_metric`) on hand-made software messages, and the translation task's
prediction metrics (BLEU, chrF, copy accuracy, sacreBLEU signatures) on hand-scored outputs."""

import types

import pytest

from tasks.copy_metric import copy_accuracy, copy_items
from tasks.translation import Translation

ITEMS = {
  '%s failed: exit code %d': ['%s', '%d'],
  '%1$s and %.250s, %lu bytes, 100%% done': ['%1$s', '%.250s', '%lu', '%%'],
  '%pB: cannot read section': ['%pB'],
  '--header=STRING insert STRING': ['--header', 'STRING', 'STRING'],
  '--header=CHAÎNE insérer la CHAÎNE': ['--header'],
  'use -v or -mips16 with @GPG@': ['-v', '-mips16', '@GPG@'],
  'set core.editor or max_wal_size': ['core.editor', 'max_wal_size'],
  'could not read any WAL files': ['WAL'],
  "c'est-à-dire, e.g. Set-Cookie": [],
}


@pytest.mark.parametrize('text', list(ITEMS))
def test_copy_items(text):
  assert sorted(copy_items(text).elements()) == sorted(ITEMS[text])


def test_copy_accuracy_compares_multisets_over_references_with_items():
  references = ['%s: échec %d', 'erreur %s %s', 'fichier WAL', 'bonjour']
  hypotheses = [
    '%d : échec %s',  # reordered: still a copy
    'erreur %s',  # one %s lost
    'fichier wal',  # WAL changed
    'salut',  # nothing to copy: not counted
  ]
  assert copy_accuracy(hypotheses, references) == (1 / 3, 3)
  assert copy_accuracy(['% s'], ['%s']) == (0.0, 1)  # a split placeholder is not a copy
  assert copy_accuracy(['a'], ['b']) == (0.0, 0)


def test_translation_metrics_score_raw_text_with_signatures():
  """BLEU and chrF of a perfect and an empty output, copy accuracy, and the signatures."""
  task = types.SimpleNamespace(target_vocab='sentencepiece')
  task._scorers = lambda: Translation._scorers(task)
  reference = 'Le fichier « %s » est introuvable.'
  perfect = Translation.prediction_metrics(task, [dict(hypothesis=reference, reference=reference)])
  assert perfect == dict(
    exact_match=1.0,
    bleu=pytest.approx(100.0),
    chrf=pytest.approx(100.0),
    copy_accuracy=1.0,
    copy_examples=1.0,
  )
  assert set(perfect) == set(Translation.decoded_metrics)
  wrong = Translation.prediction_metrics(task, [dict(hypothesis='Fichier', reference=reference)])
  assert wrong['bleu'] == 0.0 and 0 < wrong['chrf'] < 30 and wrong['copy_accuracy'] == 0.0
  signatures = Translation.metric_signatures(task)
  assert signatures['bleu'].startswith('nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:')
  assert signatures['chrf'].startswith('nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:')
