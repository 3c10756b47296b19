"""The report and probe sections: the health checks' thresholds and the live downstream probe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from mlmtrain.config.fields import above, at_least, health, quiet, within
from mlmtrain.probe_settings import live_default


@dataclass
class ReportConfig:
    html: bool = quiet(True, "write RUN_DIR/report.html (plots and health checks) at each checkpoint; needs matplotlib")
    data_wait_share: float = health(
        0.10, "the loop may wait for the next batch at most this share of the time", within(0, 1, "[]")
    )
    spike_factor: float = health(
        1.5,
        "a logged loss above this multiple of the median of the lines before it is a spike",
        check=at_least(1),
    )
    nonfinite_steps: int = health(0, "most steps the run may skip for a non-finite loss or gradient", at_least(0))
    divergence_factor: float = health(
        1.3,
        "a final smoothed loss above this multiple of its minimum is divergence",
        check=at_least(1),
    )
    plateau_evals: int = health(3, "evaluations without a new best validation loss that make a plateau", at_least(1))
    plateau_lr_share: float = health(
        0.5, "a plateau counts while lr is above this share of its peak", within(0, 1, "[]")
    )
    overfit_epochs: float = health(3.0, "passes over the training tokens before overfitting is looked for", at_least(0))
    overfit_gap: float = health(
        0.1,
        "growth of (validation - training loss) in nats that counts as overfitting",
        check=at_least(0),
    )
    unk_rate: float = health(
        0.005, "largest acceptable share of [UNK] tokens in the validation split", within(0, 1, "[]")
    )
    tokens_per_word: float = health(2.0, "largest acceptable WordPiece tokens per whitespace word", at_least(1))
    duplicate_share: float = health(
        0.05, "largest acceptable share of exact duplicate training documents", within(0, 1, "[]")
    )
    tokens_per_param: float = health(
        20.0, "fewest training tokens per model parameter the run should plan for", at_least(0)
    )
    warmup_share: float = health(
        0.5,
        "largest share of the run that optim.warmup_steps (one-cycle: optim.cycle_peak) may take",
        check=within(0, 1, "[]"),
    )


@dataclass
class ProbeConfig:
    """The live probe: its settings are these keys (`ProbeSettings.from_section`), whose defaults (linear, one epoch,
    capped examples) keep probing cheap during pretraining; `live_default` takes them from beside ProbeSettings."""

    task: Union[str, None] = quiet(
        None,
        "labeled task probed during pretraining (rank 0): a folder of train/valid/test .jsonl/.csv/.parquet files "
        "or hf:NAME[/CONFIG]; null: no live probe",
        path="local",
    )
    mode: Literal["linear", "finetune"] = quiet(
        live_default("mode"),
        "linear: logistic regression on frozen pooled features (seconds); finetune: a copy is fine-tuned",
    )
    every: int = quiet(
        0, "steps between probes; 0: at each evaluation (train.eval_every) and at the end", check=at_least(0)
    )
    max_train_examples: Union[int, None] = quiet(
        live_default("max_train_examples"), "train examples the probe uses (a fixed sample); null: all", at_least(1)
    )
    max_eval_examples: Union[int, None] = quiet(
        live_default("max_eval_examples"),
        "valid and test examples the probe uses (a fixed sample); null: all",
        check=at_least(1),
    )
    text_field: str = quiet("text", "field holding the text (text_a/text_b are found on their own for pairs)")
    pair_field: Union[str, None] = quiet(None, "field holding the second text of a sentence-pair task")
    label_field: str = quiet("label", "field holding the label: int or string (classes) or float (regression)")
    pooling: Literal["mean", "cls"] = quiet(
        live_default("pooling"), "linear mode: mean of the last layer over real tokens, or [CLS]"
    )
    max_length: int = quiet(live_default("max_length"), "tokens per example, longer ones are cut", at_least(8))
    epochs: int = quiet(live_default("epochs"), "finetune mode: epochs over the train examples", at_least(1))
    lr: float = quiet(live_default("lr"), "finetune mode: peak learning rate", above(0))
    batch_size: int = quiet(live_default("batch_size"), "examples per batch", at_least(1))
