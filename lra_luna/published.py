"""Published LRA test accuracies (percent) to place ours beside.

Table 1's rows belong to the models' entries in the model registry (`registry.table1_rows()`);
Table 3 (Luna's [CLS] vs mean-pooled P) is here. Each row names its source paper and table.
`head` is the sentence representation the row was trained with: 'cls' or 'mean_p' where the
paper says so, None for "as the source ran it" (LRA used [CLS] except mean pooling on
Pathfinder). Averages are as printed, not recomputed (a row's `note` says where they disagree).
"""

import dataclasses

from lra_luna import tasks

# Ma et al., "Luna: Linear Unified Nested Attention", NeurIPS 2021 (shared/paper/luna_paper.tex).
LUNA_PAPER = 'Ma et al. 2021 (Luna)'
# Tay et al., "Long Range Arena: A Benchmark for Efficient Transformers", ICLR 2021.
LRA_PAPER = 'Tay et al. 2021 (LRA)'
# Gu, Gupta, Goel and Ré, "On the Parameterization and Initialization of Diagonal State Space
# Models", NeurIPS 2022 (arXiv:2206.11893): its LRA table (S4D-LegS, S4D-Inv, S4D-Lin).
S4D_PAPER = 'Gu et al. 2022 (S4D)'
# Ma, Zhou, Kong, He, Gui, Neubig, May and Zettlemoyer, "Mega: Moving Average Equipped Gated
# Attention", ICLR 2023 (arXiv:2209.10655): its LRA table (Mega, Mega-chunk).
MEGA_PAPER = 'Ma et al. 2023 (Mega)'

# Smith, Warrington and Linderman, "Simplified State Space Layers for Sequence Modeling", ICLR
# 2023 (arXiv:2208.04933): its Table 1 (LRA).
S5_PAPER = 'Smith et al. 2023 (S5)'
# Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu and De, "Resurrecting Recurrent Neural Networks
# for Long Sequences", ICML 2023 (arXiv:2303.06349): its Table 3 (mean over 3 seeds).
LRU_PAPER = 'Orvieto et al. 2023 (LRU)'
# Amos, Berant and Gupta, "Never Train from Scratch: Fair Comparison of Long-Sequence Models
# Requires Data-Driven Priors", ICLR 2024 (arXiv:2310.02980).
SPT_PAPER = 'Amos et al. 2024 (SPT)'
# Miralles-González, Huertas-Tato, Martín and Camacho, "On the locality bias and results in the
# Long Range Arena" (arXiv:2501.14850, 2025): with rotary positions a Transformer closes LRA's gaps.
LOCALITY_PAPER = 'Miralles-González et al. 2025 (locality)'

# The five tasks of the papers' tables and averages (Path-X: every model failed, chance level).
TASKS = tasks.TABLE1_TASKS
CLS_VS_P_TASKS = tasks.TABLE3_TASKS


@dataclasses.dataclass(frozen=True)
class PublishedRow:
  label: str                      # the row's name in the paper
  model: str                      # our model name (registry.MODELS)
  head: str | None                # 'cls' | 'mean_p' | None (as the source ran it)
  paper: str
  table: str
  accuracy: dict                  # task -> test accuracy (percent)
  average: float | None           # the table's 'Avg.' over its tasks
  average_no_retrieval: float | None = None  # Luna Table 1's 'Avg. (w/o rtl)'
  note: str = ''                  # a remark printed under the table (e.g. a misprinted average)


def row(label, model, head, paper, table, values, average, average_no_retrieval=None, note=''):
  """A row from its values in the order of TASKS (or of CLS_VS_P_TASKS for Table 3)."""
  tasks = TASKS if len(values) == len(TASKS) else CLS_VS_P_TASKS
  return PublishedRow(label, model, head, paper, table, dict(zip(tasks, values)), average,
                      average_no_retrieval, note)


# Luna paper Table 3: [CLS] vs mean-pooled final P; 'Avg.' over ListOps, Text and Retrieval.
TABLE3 = (
    row('Luna-16, [CLS]', 'luna16', 'cls', LUNA_PAPER, 'Table 3', (37.43, 65.74, 79.38), 60.85),
    row('Luna-16, P', 'luna16', 'mean_p', LUNA_PAPER, 'Table 3', (38.06, 65.81, 80.22), 61.36),
    row('Luna-128, [CLS]', 'luna128', 'cls', LUNA_PAPER, 'Table 3', (38.01, 65.74, 79.55), 61.10),
    row('Luna-128, P', 'luna128', 'mean_p', LUNA_PAPER, 'Table 3', (38.27, 65.89, 80.27), 61.48),
    row('Luna-256, [CLS]', 'luna256', 'cls', LUNA_PAPER, 'Table 3', (37.98, 65.78, 79.56), 61.11),
    row('Luna-256, P', 'luna256', 'mean_p', LUNA_PAPER, 'Table 3', (38.36, 66.07, 80.25), 61.56),
)


def matching(rows, model: str, head: str) -> list[PublishedRow]:
  """The published rows of `model` trained with `head` (or with the source's own head)."""
  return [r for r in rows if r.model == model and r.head in (None, head)]



@dataclasses.dataclass(frozen=True)
class PublishedFigure:
  """One number a paper's text prints, in one column of its own (SPT_COLUMNS), not a task row."""
  label: str      # what the number is of
  paper: str
  where: str      # where in the paper
  column: str     # a key of SPT_COLUMNS
  value: float    # percent


# The SPT paper's figures that its text prints; its tables' cells are not reproduced here, and
# no per-task row is made up from them. Their columns are not our tasks (LRA's average over six
# tasks; PathX-256, Path-X at 256 x 256), so our rows leave them empty.
SPT_COLUMNS = {'lra_avg': 'LRA avg. w/o PathX-256 (paper)', 'pathx256': 'PathX-256 (paper)'}
SPT_FIGURES = (
    PublishedFigure('Transformer + rotary + masked SPT', SPT_PAPER, 'its text',
                    'lra_avg', 86.2),
    PublishedFigure('S4 (well tuned), from scratch', SPT_PAPER, 'its text', 'lra_avg',
                    86.1),
    PublishedFigure('S4, from scratch', SPT_PAPER, 'its text (best accuracy)', 'pathx256', 67.0),
    PublishedFigure('S4 + SPT', SPT_PAPER, 'its text (best accuracy)', 'pathx256', 87.0),
)
