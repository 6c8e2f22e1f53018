"""The fine-tuning phase of a self-pretrained run (spt.py): each seed's classifier starts from the
encoder of the pretraining it fine-tunes (the same arrays) and a fresh head; then the loop
(train.py) trains it as any run, and its results.json records the pretraining
(results.pretraining_record).
"""

from lra_luna import spt
from lra_luna.models import pretraining
from lra_luna.training import checkpoints as checkpoints_lib
from lra_luna.training import run_folder
from lra_luna.training import steps


def with_pretrained_encoders(config, data, runs, states) -> list:
  """Each seed's fresh classifier state with the encoder of the pretraining it fine-tunes (the
  latest checkpoint in run.pretrained_from): the same arrays; a fresh head."""
  phase = spt.phase_config(config)
  objective = steps.pretraining_objective(phase, data)
  _, template, _ = steps.init_state(steps.model_config(phase, data), 0,
                                    steps.make_optimizer(phase), objective)
  saved = {}
  for run in runs:
    if run.pretrained_from not in saved:
      folder = run.pretrained_from
      recorded = spt.finished_pretraining(folder) or {}
      if recorded.get('vocab_size') != data.vocab_size:
        raise run_folder.TrainingError(
            f'{folder} pretrained a vocabulary of {recorded.get("vocab_size")} ids, this task '
            f'has {data.vocab_size}; fine-tune from a pretraining of the same data.')
      checkpoints = checkpoints_lib.Checkpoints(folder)
      saved[run.pretrained_from] = checkpoints.restore_state('latest', template)[1]
      checkpoints.close()
  return [pretraining.transfer_encoder(state, saved[run.pretrained_from])
          for run, state in zip(runs, states)]

