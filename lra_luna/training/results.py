"""What a run leaves in its folder when a phase ends: results.json (a fine-tuned or
from-scratch run's test of its last and best checkpoints; a pretraining's token loss and
accuracy beside always predicting the most frequent token) and learning_curves.png; and the
results of a run that finished before (`finished_results`).
"""

import json

import jax

from lra_luna import config_lib
from lra_luna import console
from lra_luna import learning_curves
from lra_luna import spt
from lra_luna.models.objectives import masking
from lra_luna.training import environment
from lra_luna.training import run_folder
from lra_luna.training import steps
from lra_luna.training.signals import evaluation


def finished_results(runs) -> list[dict] | None:
  """The results of every seed when each one's workdir already holds results.json of its
  config's steps (checked against config.json by seed_runs), saying so; else None. A finished
  run missing its learning curves gets them now."""
  results = []
  for run in runs:
    path = run.workdir / run_folder.RESULTS_FILE
    if not path.is_file():
      return None
    saved = json.loads(path.read_text())
    if saved.get('steps') != run.config.num_train_steps:
      return None
    results.append((run, path, saved))
  for run, path, _ in results:
    if jax.process_index() == 0:
      console.say(f'nothing to do: {run.workdir} finished {run.config.num_train_steps} steps; '
                  f'results in {path}')
    if not (run.workdir / run_folder.LEARNING_CURVES_FILE).exists():
      write_learning_curves(run)
  return [saved for _, _, saved in results]


def recorded_validation(runs, step: int | None = None) -> dict | None:
  """The validation metrics of every seed's best checkpoint as the loop measured them ({'loss',
  'accuracy'} per seed), when each has them (and, with `step`, each best is at that step)."""
  if not all('val_loss' in run.best and (step is None or run.best['step'] == step)
             for run in runs):
    return None
  return {'loss': [run.best['val_loss'] for run in runs],
          'accuracy': [run.best['val_accuracy'] for run in runs]}


def final_results(config, runs, state, data, evaluate, label, num_params, monitor, is_writer,
                  last_val, stop) -> list:
  """Tests the last and the best-on-validation checkpoint of every seed, each distinct checkpoint
  once (best = last: one evaluation for both sections; validation metrics the loop measured are
  reused); writes results.json and learning_curves.png."""
  total = config.num_train_steps
  val_split, test_split = data.splits['validation'], data.splits['test']

  def run_eval(section_state, arrays, desc):
    return evaluation(evaluate, section_state, arrays, monitor, stop, desc)

  last_val = (last_val or recorded_validation(runs, total)
              or run_eval(state, val_split, f'validation of step {total}'))
  sections = {'last': (last_val, run_eval(state, test_split, f'test of step {total}'))}
  if all(run.best['step'] == total for run in runs):
    sections['best'] = sections['last']  # the same checkpoint
  else:
    best_state = steps.stack_trees([run.checkpoints.restore_best(steps.unstack_tree(state, i))
                                    for i, run in enumerate(runs)])
    sections['best'] = (recorded_validation(runs)
                        or run_eval(best_state, val_split, 'validation of the best checkpoint'),
                        run_eval(best_state, test_split, 'test of the best checkpoint'))
  all_results = []
  for i, run in enumerate(runs):
    results = {'task': config.task, 'model': label, 'head': config.model.head,
               'protocol': config.protocol,
               'seed': int(run.seed), 'num_params': num_params, 'steps': total,
               'test_majority_rate': steps.majority_rate(
                   data.splits['train']['targets'], data.splits['test']['targets']),
               'data': data_record(config, data), 'run': config_lib.run_record(config),
               'precision': steps.precision_record(config),
               'environment': environment.environment_record()}
    for name, (val, test) in sections.items():
      results[name] = steps.checkpoint_metrics(
          total if name == 'last' else run.best['step'], val, test, i)
    # The flat keys report the last checkpoint, as LRA did; `best` is beside it.
    results.update({k: results['last'][k]
                    for k in ('val_accuracy', 'val_loss', 'test_accuracy', 'test_loss')})
    if run.pretrained_from is not None:
      results['pretraining'] = pretraining_record(run.pretrained_from)
    if config.model.get('predict') == 'queries':  # MQAR: recall nothing, guess among N values
      results['test_chance_rate'] = 1.0 / data.splits['test']['targets'].shape[1]
      results['causal'] = bool(config.model.causal)
    monitor.write(total, i, {'test_accuracy': results['test_accuracy'],
                             'test_loss': results['test_loss']})
    close_run(run, results, is_writer)
    all_results.append(results)
  return all_results


def pretraining_results(config, runs, state, data, evaluate, label, num_params, monitor,
                        is_writer, last_val, stop) -> list:
  """The end of a pretraining phase: each seed's token loss and accuracy of its last step on the
  held-in training inputs (training_inputs_only), beside the accuracy of always predicting the
  most frequent token there (masking.most_frequent_token), written to its
  pretraining/results.json."""
  total = config.num_train_steps
  val = (last_val or recorded_validation(runs, total)
         or evaluation(evaluate, state, data.splits['validation'], monitor, stop,
                       f'token check of step {total}'))
  objective = steps.pretraining_objective(config, data)
  held_in = data.splits['validation']
  majority_token, majority_accuracy = masking.most_frequent_token(
      [held_in[key] for key in ('inputs', 'inputs1', 'inputs2') if key in held_in],
      objective.mask_padding, objective.eos_id)
  all_results = []
  for i, run in enumerate(runs):
    results = {'task': config.task, 'model': label, 'phase': 'pretraining',
               'objective': config.pretraining.objective,
               'mask_rate': (config.pretraining.mask_rate
                             if config.pretraining.objective == 'masked' else None),
               'loss_function': config.pretraining.get('loss', 'ce'),
               'seed': int(run.seed), 'num_params': num_params, 'steps': total,
               'vocab_size': data.vocab_size, 'loss': float(val['loss'][i]),
               'accuracy': float(val['accuracy'][i]), 'predicted_tokens': val['count'],
               # The reference point of `accuracy`: always predicting the most frequent token.
               'majority_token': majority_token, 'majority_accuracy': majority_accuracy,
               'inputs': f'training split only: {len(data.splits["train"]["targets"])} '
                         f'examples, the first {len(data.splits["validation"]["targets"])} '
                         'for the token loss and accuracy',
               'data': data_record(config, data), 'run': config_lib.run_record(config),
               'environment': environment.environment_record()}
    monitor.write(total, i, {'token_loss': results['loss'], 'token_accuracy': results['accuracy']})
    if is_writer:
      console.say(f'seed {run.seed} pretraining: token accuracy {results["accuracy"]:.4f}; '
                  f'always predicting the most frequent token ({majority_token}): '
                  f'{majority_accuracy:.4f}.')
    close_run(run, results, is_writer)
    all_results.append(results)
  return all_results


def closing_line(results: dict) -> str:
  """The run's test accuracy (last and best checkpoints) beside what guessing gives: chance (1/N)
  for MQAR, else always the training set's majority class."""
  best = results.get('best') or {}
  best_words = (f", {100 * best['test_accuracy']:.2f}% at the best validation checkpoint "
                f"(step {best['step']})" if 'test_accuracy' in best else '')
  if results.get('test_chance_rate') is not None:
    baseline = f"chance {100 * results['test_chance_rate']:.2f}% (1/N)"
  else:
    baseline = f"the majority class {100 * results['test_majority_rate']:.2f}%"
  return (f"{results['task']} / {results['model']}, seed {results['seed']}: test accuracy "
          f"{100 * results['test_accuracy']:.2f}% at step {results['steps']}{best_words}; "
          f'{baseline}.')


def close_run(run, results: dict, is_writer: bool) -> None:
  """A seed's phase is over: its results.json and learning curves written (by the writing
  process), its checkpoint manager closed."""
  if is_writer:
    run_folder.write_json_atomically(run.workdir / run_folder.RESULTS_FILE, results)
    write_learning_curves(run)
  run.checkpoints.close()


def pretraining_record(folder) -> dict:
  """results.json's `pretraining` of a fine-tuned run: what its pretraining (in `folder`, the
  pretraining's own folder) recorded."""
  recorded = spt.finished_pretraining(folder) or {}
  keys = ('objective', 'mask_rate', 'loss_function', 'seed', 'steps', 'loss', 'accuracy',
          'majority_token', 'majority_accuracy', 'predicted_tokens', 'inputs', 'data')
  return {'folder': str(folder), **{key: recorded.get(key) for key in keys}}


def describe_pretraining(recorded: dict) -> str:
  """A pretraining's results.json in words: objective, rate, steps, its token accuracy beside
  that of always predicting the most frequent token."""
  rate = f" at rate {recorded['mask_rate']}" if recorded.get('mask_rate') else ''
  text = (f"{recorded.get('objective')}{rate}, {recorded.get('steps')} steps, seed "
          f"{recorded.get('seed')}")
  if recorded.get('accuracy') is not None:
    text += f", token accuracy {recorded['accuracy']:.4f}"
  if recorded.get('majority_accuracy') is not None:
    text += (f" (always the most frequent token: {recorded['majority_accuracy']:.4f})")
  return text


def data_record(config, data) -> dict:
  """results.json's `data`: where the arrays came from; a smoke test's data is marked as such
  (a generated smoke set holds only the examples the test reads)."""
  if not config.get('smoke'):
    return data.source
  return {**data.source, 'smoke': f'a smoke test ({config.num_train_steps} steps, '
          f'{config.max_eval_batches} batches per evaluation): not the full set'}


def write_learning_curves(run) -> None:
  """<workdir>/learning_curves.png from its metrics.jsonl; a failure to plot is a warning."""
  title = f'{run.config.task} / {config_lib.model_label(run.config)}, seed {run.seed}'
  try:
    learning_curves.plot([run.workdir], run.workdir / run_folder.LEARNING_CURVES_FILE, title)
  except Exception as e:  # pylint: disable=broad-except  (a plot never costs the results)
    console.say(f'warning: {run.workdir / run_folder.LEARNING_CURVES_FILE} not written: '
                f'{type(e).__name__}: {e}', err=True)

