"""Class probabilities of a trained run for new inputs, through the training's tokenisation.

  python -m lra_luna.predict runs/listops_luna16_quick "[MAX 2 9 [MIN 4 7 ] 0 ]" "[SM 3 4 ]"
  python -m lra_luna.predict runs/text_luna16 "A film I will watch again."
  python -m lra_luna.predict runs/retrieval_luna16 "text of paper A" "text of paper B"
  python -m lra_luna.predict runs/image_luna16 cat.png [--checkpoint last]

In Python:

  predictor = predict.load_predictor('runs/listops_luna16_quick')
  predictor.predict_proba(['[MAX 2 9 [MIN 4 7 ] 0 ]'])  # float32 [1, 10]; each row sums to 1

An input per task, tokenised by its reader's own function (lra_luna/datasets):
- listops: an expression as the data prints it, parentheses optional (listops.token_ids);
- text: a string, its UTF-8 bytes + 1 (text.byte_ids);
- retrieval: a pair of texts (retrieval.encode_text: the first 10000 bytes, + 1); on the command
  line INPUTs go two by two;
- image: an image file of 32 x 32 pixels, read as RGB and made gray by image.grayscale (LRA's);
- pathfinder, pathx: a grayscale PNG of the task's resolution (pathfinder.read_image).
An empty input, an unbalanced ListOps expression, or one longer than config.max_length is
refused in one line (by how much); Text and Retrieval inputs, which training cut by design, are
cut to max_length as in training, with a note on stderr. Sequences are padded with 0. The model
is the best checkpoint (highest validation accuracy) by default, or the last. No task imports
TensorFlow.
"""

import dataclasses
import functools
import json
import sys
import types

import jax
import ml_collections
import numpy as np
from absl import logging
from flax import nnx
from PIL import Image

from lra_luna import cli
from lra_luna import datasets
from lra_luna import evaluate
from lra_luna.datasets import base
from lra_luna.datasets import image
from lra_luna.datasets import listops
from lra_luna.datasets import pathfinder
from lra_luna.datasets import retrieval
from lra_luna.datasets import text
from lra_luna.training import run_folder


# ----------------------------------------------------------------------------------------------
# Tokenisation: one input -> token ids (Retrieval: a pair of them), as the task's reader does it.
# ----------------------------------------------------------------------------------------------
def shown(item, limit: int = 60) -> str:
  """An input as an error names it: its repr, shortened."""
  text = repr(item)
  return text if len(text) <= limit else text[:limit - 5] + '...' + text[-2:]


def checked_length(ids, config, what: str):
  """The ids of one input, refused when empty or longer than config.max_length (cutting would
  change the input, e.g. a ListOps expression, silently), except where training cut such inputs
  by design (max_truncated_fraction 1.0: Text, Retrieval): cut as training cut, with a note."""
  if len(ids) == 0:
    raise ValueError(f'{what} is empty: there is nothing to classify.')
  excess = len(ids) - config.max_length
  if excess > 0:
    if config.max_truncated_fraction >= 1.0:
      print(f'note: {what}: {len(ids)} tokens, cut to the model\'s max_length '
            f'{config.max_length}, as training cut its inputs.', file=sys.stderr)
      return ids[:config.max_length]
    raise ValueError(f'{what} has {len(ids)} tokens, {excess} more than this model\'s '
                     f'max_length {config.max_length}; it would be cut, and this model never '
                     'saw a cut input. Shorten it, or train with a larger --config.max_length.')
  return ids


def listops_ids(expression: str, config) -> list[int]:
  what = f'ListOps input {shown(expression)}'
  try:
    ids = listops.token_ids(expression)
  except KeyError as e:
    raise ValueError(f'{what}: unknown token {e.args[0]!r} (known: '
                     f'{" ".join(listops.VOCAB[1:])} and parentheses).') from None
  depth = 0
  for token in expression.split():
    depth += (token in listops.OPERATORS) - (token == listops.CLOSE)
    if depth < 0:
      break
  if depth:
    problem = 'a ] closes nothing' if depth < 0 else f'{depth} operator(s) not closed by ]'
    raise ValueError(f'{what}: brackets do not match ({problem}).')
  return checked_length(ids, config, what)


def text_ids(review: str, config) -> np.ndarray:
  ids = text.byte_ids(review.encode('utf-8'), len(review.encode('utf-8')))
  return checked_length(ids, config, f'Text input {shown(review)}')


def retrieval_ids(pair, config) -> tuple:
  if isinstance(pair, str) or len(pair) != 2:
    raise ValueError(f'Retrieval input {pair!r}: expected a pair of texts (text1, text2).')
  # encode_text keeps LRA's first MAX_TEXT_BYTES bytes of a paper, as training did.
  return tuple(checked_length(retrieval.encode_text(document, retrieval.MAX_TEXT_BYTES)[0],
                              config, f'Retrieval text {shown(document)}')
               for document in pair)


def image_ids(path, config) -> np.ndarray:
  """An image file's pixels, RGB -> gray as the Image reader makes CIFAR-10 gray."""
  try:
    with Image.open(path) as picture:
      rgb = np.asarray(picture.convert('RGB'), np.uint8)
  except (OSError, ValueError, Image.DecompressionBombError) as e:
    raise ValueError(f'{path}: cannot read this image ({e}).') from None
  side = int(config.max_length**0.5)
  if rgb.shape[:2] != (side, side):
    raise ValueError(f'{path}: image is {rgb.shape[1]}x{rgb.shape[0]}, expected {side}x{side}.')
  return image.grayscale(rgb).reshape(-1)


def pathfinder_ids(path, config) -> np.ndarray:
  return pathfinder.read_image(path, config.pathfinder.resolution)


TOKENIZERS = {'listops': listops_ids, 'text': text_ids, 'retrieval': retrieval_ids,
              'image': image_ids, 'pathfinder': pathfinder_ids, 'pathx': pathfinder_ids}


def padded(rows, length: int) -> np.ndarray:
  """Rows of ids -> int32 [N, length], padded with 0 (the pad id)."""
  ids = np.zeros((len(rows), length), np.int32)
  for i, row in enumerate(rows):
    ids[i, :len(row)] = row
  return ids


def encode_inputs(config, inputs) -> dict:
  """The model's batch for a list of inputs: {'inputs': int32 [N, max_length]} (Retrieval:
  'inputs1' and 'inputs2'). ValueError naming the input that cannot be tokenised."""
  if isinstance(inputs, (str, bytes)) or not len(inputs):
    raise ValueError(f'Expected a non-empty list of inputs, got {inputs!r}.')
  rows = [TOKENIZERS[config.task](item, config) for item in inputs]

  def batch(rows):
    if not config.get('append_eos', False):
      return padded(rows, config.max_length)
    # As datasets.load_task does for training: the EOS after each row, then the cut.
    eos_id = datasets.task_sizes(config.task)[0]
    return base.append_eos(padded(rows, max(len(r) for r in rows)), [len(r) for r in rows],
                           eos_id, config.max_length).astype(np.int32)

  if config.task == 'retrieval':
    return {'inputs1': batch([a for a, _ in rows]), 'inputs2': batch([b for _, b in rows])}
  return {'inputs': batch(rows)}


# ----------------------------------------------------------------------------------------------
# The predictor.
# ----------------------------------------------------------------------------------------------
def logits_of(params, constants, batch, *, graphdef):
  return nnx.merge(graphdef, params, constants)(batch, deterministic=True)


@dataclasses.dataclass
class Predictor:
  """A trained run's model at one checkpoint; `predict_proba(inputs)` gives class probabilities."""
  config: ml_collections.ConfigDict  # the run's config.json
  checkpoint: str                    # 'best' or 'last'
  step: int                          # the training step of that checkpoint
  graphdef: object                   # the model's structure (nnx.split)
  state: dict                        # its train state: params, constants, ...

  @functools.cached_property
  def _logits(self):
    return jax.jit(functools.partial(logits_of, graphdef=self.graphdef))

  def encode(self, inputs) -> dict:
    """The batch the model reads for `inputs` (see the module docstring for each task's)."""
    return encode_inputs(self.config, inputs)

  def predict_proba(self, inputs) -> np.ndarray:
    """float32 [len(inputs), num_classes]: softmax of the logits, in batches of eval_batch_size."""
    batch = self.encode(inputs)
    size = self.config.eval_batch_size
    chunks = [self._logits(self.state['params'], self.state['constants'],
                           {k: v[start:start + size] for k, v in batch.items()})
              for start in range(0, len(inputs), size)]
    return np.asarray(jax.nn.softmax(np.concatenate(chunks), axis=-1), np.float32)


def load_predictor(workdir, checkpoint: str = 'best') -> Predictor:
  """The model of the run in `workdir` at its 'best' or 'last' checkpoint. Reads no data."""
  config = evaluate.load_run_config(workdir)
  evaluate.saved_checkpoints(workdir, [checkpoint])
  vocab_size, num_classes = datasets.task_sizes(config.task, config.get('append_eos', False))
  sizes = types.SimpleNamespace(vocab_size=vocab_size, num_classes=num_classes)
  graphdef, state, step = evaluate.restore_model(workdir, config, sizes, checkpoint)
  return Predictor(config, checkpoint, step, graphdef, state)


def main(argv=None) -> int:
  parser = cli.ArgumentParser(prog='python -m lra_luna.predict', description=__doc__)
  parser.add_argument('workdir', help='a run_lra.py workdir')
  parser.add_argument('inputs', nargs='+', metavar='INPUT',
                      help='expressions, texts, text pairs (two INPUTs each) or image files')
  parser.add_argument('--checkpoint', choices=list(run_folder.CHECKPOINT_FOLDERS), default='best')
  args = parser.parse_args(argv)
  logging.set_verbosity(logging.WARNING)  # As run_lra: orbax logs every restore at INFO.
  try:
    predictor = load_predictor(args.workdir, args.checkpoint)
    inputs = args.inputs
    if predictor.config.task == 'retrieval':
      if len(inputs) % 2:
        raise ValueError(f'Retrieval takes INPUTs two by two (text1 text2), got {len(inputs)}.')
      inputs = list(zip(inputs[::2], inputs[1::2]))
    probabilities = predictor.predict_proba(inputs)
  except (ValueError, FileNotFoundError) as e:  # Bad input: one line, no traceback.
    print(f'error: {e}', file=sys.stderr)
    return 1
  for item, row in zip(inputs, probabilities):
    print(json.dumps({'input': item, 'class': int(np.argmax(row)),
                      'probabilities': [round(float(p), 4) for p in row]}))
  return 0


if __name__ == '__main__':
  sys.exit(main())
