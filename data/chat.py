"""An instruct model's chat template: a user's prompt framed as the model was trained to read it.

A chat template is Jinja text shipped with the checkpoint (a GGUF's `tokenizer.chat_template`,
a folder's chat_template.jinja or tokenizer_config.json). It is rendered as transformers'
`apply_chat_template` renders it: a sandboxed environment with `trim_blocks` and `lstrip_blocks`
and the loop controls, the messages, `add_generation_prompt`, and the special tokens' text as
`bos_token` / `eos_token`, so that the same template gives the same text. The rendered text holds
its special tokens as text (`<|im_start|>`), and is encoded without adding any more.
"""

from typing import Any

from data.pretrained_tokenizer import PretrainedTokenizer


def _jinja():
  try:
    import jinja2  # pylint: disable=import-outside-toplevel
    import jinja2.ext  # pylint: disable=import-outside-toplevel
    import jinja2.sandbox  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ValueError(
      "A chat template needs the jinja2 package: make llm (or pip install '.[gguf]')."
    ) from None
  return jinja2


def render(template: str, messages: list[dict[str, str]], **variables: Any) -> str:
  """The text of `messages` (`[{'role': 'user', 'content': ...}]`) under `template`, ready for
  the model's reply (`add_generation_prompt`); `variables`: `bos_token`, `eos_token`, ...

  Raises:
    ValueError: the template is not valid Jinja, or refuses the messages (its own message).
  """
  jinja2 = _jinja()

  def raise_exception(message: str):
    raise ValueError(f'The chat template refuses these messages: {message}')

  environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
  )
  environment.globals['raise_exception'] = raise_exception
  try:
    compiled = environment.from_string(template)
  except jinja2.TemplateSyntaxError as error:
    raise ValueError(f'The chat template is not valid Jinja: {error}.') from None
  return compiled.render(messages=messages, add_generation_prompt=True, **variables)


def chat_ids(tokenizer: PretrainedTokenizer, prompt: str) -> list[int]:
  """The ids of one user turn `prompt` under the tokenizer's chat template, the model's turn
  opened (ValueError when the checkpoint has no template)."""
  if not getattr(tokenizer, 'chat_template', ''):
    raise ValueError(
      "--chat: this workdir's tokenizer has no chat template (a base model, or a checkpoint "
      'that ships none); give the prompt without --chat.'
    )
  return tokenizer.encode_pieces(chat_text(tokenizer, prompt))


def chat_text(tokenizer: PretrainedTokenizer, prompt: str) -> str:
  """One user turn `prompt` rendered by the tokenizer's chat template, the model's turn opened,
  with the tokenizer's own BOS and EOS pieces (the template must exist)."""
  # Only the tokens the tokenizer has: a missing one stays undefined, and renders as ''.
  tokens = dict(bos_token=tokenizer.bos_id, eos_token=tokenizer.eos_id)
  named = {name: tokenizer.tokens([i])[0] for name, i in tokens.items() if i is not None}
  return render(tokenizer.chat_template, [{'role': 'user', 'content': prompt}], **named)
