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
