"""The prompts of the IOI study (studies/ioi.py): Wang et al.'s templates in both name orders,
filled with the paper's names, places and objects (those the tokenizer makes one token after a
space, so the prompts of a template share one length), each with its ABC twin, and per template
the ABC sentences whose mean output a mean-ablated head takes.
"""

import numpy as np

# Wang et al.'s templates in their BABA form, cut before the answer, from their code
# (redwoodresearch/Easy-Transformer, easy_transformer/ioi_dataset.py, BABA_TEMPLATES; the first
# is the paper's running example, commented out there). ABBA swaps the first {A} and {B}.
TEMPLATES = (
  'When {B} and {A} went to the {place}, {B} gave a {object} to',
  'Then, {B} and {A} went to the {place}. {B} gave a {object} to',
  'Then, {B} and {A} had a lot of fun at the {place}. {B} gave a {object} to',
  'Then, {B} and {A} were working at the {place}. {B} decided to give a {object} to',
  'Then, {B} and {A} were thinking about going to the {place}. {B} wanted to give a {object} to',
  'Then, {B} and {A} had a long argument, and afterwards {B} said to',
  'After {B} and {A} went to the {place}, {B} gave a {object} to',
  'When {B} and {A} got a {object} at the {place}, {B} decided to give it to',
  'When {B} and {A} got a {object} at the {place}, {B} decided to give the {object} to',
  'While {B} and {A} were working at the {place}, {B} gave a {object} to',
  'While {B} and {A} were commuting to the {place}, {B} gave a {object} to',
  'After the lunch, {B} and {A} went to the {place}. {B} gave a {object} to',
  'Afterwards, {B} and {A} went to the {place}. {B} gave a {object} to',
  'Then, {B} and {A} had a long argument. Afterwards {B} said to',
  'The {place} {B} and {A} went to had a {object}. {B} gave it to',
  'Friends {B} and {A} found a {object} at the {place}. {B} gave it to',
)
# The same file's names (as copied into ArthurConmy/Automatic-Circuit-Discovery), places, objects.
NAMES = (
  'Michael Christopher Jessica Matthew Ashley Jennifer Joshua Amanda Daniel David James Robert '
  'John Joseph Andrew Ryan Brandon Jason Justin Sarah William Jonathan Stephanie Brian Nicole '
  'Nicholas Anthony Heather Eric Elizabeth Adam Megan Melissa Kevin Steven Thomas Timothy '
  'Christina Kyle Rachel Laura Lauren Amber Brittany Danielle Richard Kimberly Jeffrey Amy '
  'Crystal Michelle Tiffany Jeremy Benjamin Mark Emily Aaron Charles Rebecca Jacob Stephen '
  'Patrick Sean Erin Jamie Kelly Samantha Nathan Sara Dustin Paul Angela Tyler Scott Katherine '
  'Andrea Gregory Erica Mary Travis Lisa Kenneth Bryan Lindsey Kristen Jose Alexander Jesse '
  'Katie Lindsay Shannon Vanessa Courtney Christine Alicia Cody Allison Bradley Samuel'
).split()
PLACES = 'store garden restaurant school hospital office house station'.split()
OBJECTS = 'ring kiss bone basketball computer necklace drink snack'.split()


def slots(template: str) -> str:
  """`{B} and {A} ... {B}` -> `{0} and {1} ... {2}`: the three names in their order."""
  return template.replace('{B}', '{0}', 1).replace('{A}', '{1}', 1).replace('{B}', '{2}', 1)


def prompts(tokenizer, draws: int, seed: int, abc: int) -> dict:
  """`items`: per draw, template and order, the prompt's `text`, `ids`, its ABC twin `abc`, the
  `io` and `s` ids and `positions` (IO, S1, S2); `reference`: per template, `abc` ABC sentences'
  ids `[abc, T]`."""
  one = lambda words: [w for w in words if len(tokenizer.encode_pieces(' ' + w)) == 1]
  names, places, objects = one(NAMES), one(PLACES), one(OBJECTS)
  if len(names) < 5 or not places or not objects:
    raise ValueError('The tokenizer makes one token of fewer than 5 names, or of no place/object.')
  rng, token = np.random.default_rng(seed), lambda name: tokenizer.encode_pieces(' ' + name)[0]
  nouns = lambda: dict(place=rng.choice(places), object=rng.choice(objects))
  encode = lambda form, three, words: np.asarray(tokenizer.encode(form.format(*three, **words)))
  items = []
  for draw in range(draws):
    for index, form in enumerate(map(slots, TEMPLATES)):
      (io, s, *others), words = rng.choice(names, 5, replace=False), nouns()
      twin = encode(form, others, words)
      for order, three in (('ABBA', (io, s, s)), ('BABA', (s, io, s))):
        ids = encode(form, three, words)
        at_io, at_s = np.flatnonzero(ids == token(io)), np.flatnonzero(ids == token(s))
        if len(at_s) != 2 or len(at_io) != 1 or len(twin) != len(ids):
          raise ValueError(f'Template {index} with {io} and {s} does not encode name by name.')
        text, where = form.format(*three, **words), (int(at_io[0]), int(at_s[0]), int(at_s[1]))
        items.append(dict(draw=draw, template=index, order=order, text=text, positions=where))
        items[-1].update(ids=ids, abc=twin, io=token(io), s=token(s))
  sentence = lambda form: encode(form, rng.choice(names, 3, replace=False), nouns())
  forms = enumerate(map(slots, TEMPLATES))
  reference = {index: np.stack([sentence(form) for _ in range(abc)]) for index, form in forms}
  return dict(items=items, reference=reference)
