"""GLUE as a suite: each task's hub name, fields and standard metrics, and the published scores of the BERT
miniatures (Turc et al. 2019) that mlmtrain's configs reproduce in size, for the scorecard to print beside a model's.

GLUE's test labels are hidden (-1 on the hub), so the scorecard tests on each task's validation split and holds
10 % of train out to choose the epoch; the published figures are from GLUE's test server: another split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# The figures below are copied from the table "GLUE scores on the test set" in this README (commit eedf571,
# 2020-03-11, "Smaller BERT Models"); tests/evaluate/test_suite.py keeps the source rows and checks them.
REFERENCE_SOURCE = "https://github.com/google-research/bert/blob/eedf5716ce1268e56f0a50264a88cafad334ac61/README.md"
REFERENCE_SPLIT = "GLUE test server"
REFERENCE_PAPER = "Turc et al. 2019, Well-Read Students Learn Better (BERT miniatures, 4 epochs, tuned per task)"


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task: its hub config, its text fields, the metrics GLUE reports for it (each of `figures` scored on
    the test split, or on `splits`' other split of the same fine-tuned model: MNLI's mismatched)."""

    name: str
    config: str
    text_field: str
    pair_field: Optional[str]
    metrics: tuple[str, ...]
    test_split: Optional[str] = None  # the split tested on, when not the usual (validation, as GLUE's test is hidden)
    other_split: Optional[str] = None  # a second test set, scored with the last metric by the same fine-tuned model


GLUE_TASKS = (
    GlueTask("cola", "cola", "sentence", None, ("mcc",)),
    GlueTask("sst2", "sst2", "sentence", None, ("accuracy",)),
    GlueTask("mrpc", "mrpc", "sentence1", "sentence2", ("f1", "accuracy")),
    GlueTask("stsb", "stsb", "sentence1", "sentence2", ("pearson", "spearman")),
    GlueTask("qqp", "qqp", "question1", "question2", ("f1", "accuracy")),
    GlueTask(
        "mnli", "mnli", "premise", "hypothesis", ("accuracy", "accuracy"), "validation_matched", "validation_mismatched"
    ),
    GlueTask("qnli", "qnli", "question", "sentence", ("accuracy",)),
    GlueTask("rte", "rte", "sentence1", "sentence2", ("accuracy",)),
    GlueTask("wnli", "wnli", "sentence1", "sentence2", ("accuracy",)),
)

# name: (layers, hidden), {task: figures in GLUE_TASKS' metric order (MNLI: matched, mismatched)}, the GLUE score
REFERENCE: dict[str, tuple[tuple[int, int], dict[str, tuple[float, ...]], float]] = {
    "BERT-Tiny": (
        (2, 128),
        {
            "cola": (0.0,),
            "sst2": (83.2,),
            "mrpc": (81.1, 71.1),
            "stsb": (74.3, 73.6),
            "qqp": (62.2, 83.4),
            "mnli": (70.2, 70.3),
            "qnli": (81.5,),
            "rte": (57.2,),
            "wnli": (62.3,),
        },
        64.2,
    ),
    "BERT-Mini": (
        (4, 256),
        {
            "cola": (0.0,),
            "sst2": (85.9,),
            "mrpc": (81.1, 71.8),
            "stsb": (75.4, 73.3),
            "qqp": (66.4, 86.2),
            "mnli": (74.8, 74.3),
            "qnli": (84.1,),
            "rte": (57.9,),
            "wnli": (62.3,),
        },
        65.8,
    ),
    "BERT-Small": (
        (4, 512),
        {
            "cola": (27.8,),
            "sst2": (89.7,),
            "mrpc": (83.4, 76.2),
            "stsb": (78.8, 77.0),
            "qqp": (68.1, 87.0),
            "mnli": (77.6, 77.0),
            "qnli": (86.4,),
            "rte": (61.8,),
            "wnli": (62.3,),
        },
        71.2,
    ),
    "BERT-Medium": (
        (8, 512),
        {
            "cola": (38.0,),
            "sst2": (89.6,),
            "mrpc": (86.6, 81.6),
            "stsb": (80.4, 78.4),
            "qqp": (69.6, 87.9),
            "mnli": (80.0, 79.1),
            "qnli": (87.7,),
            "rte": (62.2,),
            "wnli": (62.3,),
        },
        73.5,
    ),
}


def reference_for(layers: object, hidden: object) -> Optional[str]:
    """The name of the published miniature of this shape (BERT-Tiny for 2 layers of 128), None for another."""
    return next((name for name, (shape, _, _) in REFERENCE.items() if shape == (layers, hidden)), None)
