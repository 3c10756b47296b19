"""Downstream judgement of an encoder: fine-tune it, or fit a linear probe on its frozen features, on a labeled text
task (`tasks.py`), and score the test split (accuracy, macro-F1, majority-class accuracy and a 95 % interval; Pearson
and Spearman for a regression task). Used by `mlmtrain probe` and, live, by the training loop. Prints nothing.

It runs in float32 on every device. Under bf16 autocast on an H200 (torch 2.11), fine-tuning an MLM checkpoint on
padded batches got NaN gradients at its second step while its forward stayed finite (in float32 the same steps
trained well): the attention-backward failure with padding masks that torch and transformers have open reports
of. A probe is small next to pretraining; float32 costs it little and keeps its scores sound.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
import torch.nn.functional as F

from mlmtrain.config import OptimConfig, ProbeConfig
from mlmtrain.errors import UserError, first_line
from mlmtrain.evaluate.perplexity import check_checkpoint_folder
from mlmtrain.evaluate.stats import pearson_interval, wilson_interval
from mlmtrain.evaluate.tasks import Split, Task, TaskFields, load_task
from mlmtrain.model.context import quiet_transformers
from mlmtrain.model.optim import build_optimizer, learning_rate, set_learning_rate
from mlmtrain.probe_settings import ProbeSettings
from mlmtrain.runtime.model_folder import from_pretrained, model_config
from mlmtrain.runtime.progress import progress_bar

# Linear probe: the L2 penalty is chosen on valid from these, strongest first, each fit starting from the previous
# one's weights (a weak penalty alone takes L-BFGS many more iterations).
_L2_GRID = (1.0, 1e-1, 1e-2, 1e-3)
_LBFGS_ITERATIONS = 100
_LBFGS_EVALUATIONS = 125  # loss evaluations per fit at most (torch's default: 1.25 x the iterations)
_LBFGS_HISTORY = 10  # curvature pairs kept (scipy's and liblinear's choice)
_LOGIT_CHUNK = 1 << 20  # logits of the linear probe computed at once (8 MB in float64)

# ---------------------------------------------------------------------------------------------
# Scores


def classification_scores(
    predicted: torch.Tensor, gold: torch.Tensor, majority: int, two_classes: bool = False
) -> dict[str, Any]:
    """Accuracy with its 95 % interval, macro-F1 (over the classes in gold or predicted, as scikit-learn does), the
    accuracy of always answering the training set's most frequent class and Matthews' correlation; for a task of
    `two_classes`, also the F1 of class 1 (GLUE's F1: of its label 1, "equivalent" or "duplicate")."""
    hit = predicted == gold
    correct = int(hit.sum())
    # per-class counts in one pass each (a loop over classes costs classes x examples: minutes at 10,000 classes)
    classes = int(max(predicted.max(), gold.max())) + 1
    tp = torch.bincount(gold[hit], minlength=classes).double()
    predicted_count = torch.bincount(predicted, minlength=classes).double()
    gold_count = torch.bincount(gold, minlength=classes).double()
    seen = (predicted_count + gold_count) > 0
    # 2tp / (2tp + fp + fn) = 2tp / (predicted + gold); 0 for a seen class with no true positive
    f1 = 2 * tp[seen] / (predicted_count[seen] + gold_count[seen])
    scores = {
        "accuracy": correct / len(gold),
        "macro_f1": float(f1.mean()),
        "majority_accuracy": int((gold == majority).sum()) / len(gold),
        "mcc": matthews(correct, predicted_count, gold_count),
        "ci95": list(wilson_interval(correct, len(gold))),
        "examples": len(gold),
    }
    if two_classes:
        both = float(predicted_count[1] + gold_count[1]) if classes > 1 else 0.0
        scores["f1"] = float(2 * tp[1]) / both if both > 0 else 0.0  # no class 1 anywhere: 0, as scikit-learn
    return scores


def matthews(correct: int, predicted_count: torch.Tensor, gold_count: torch.Tensor) -> float:
    """Matthews' correlation from the per-class counts (Gorodkin's form for K classes; the usual one for two):
    (c s - sum p_k t_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum t_k^2)); 0 when a side is constant, as scikit-learn."""
    total = float(gold_count.sum())
    covariance = correct * total - float((predicted_count * gold_count).sum())
    spread = (total**2 - float((predicted_count**2).sum())) * (total**2 - float((gold_count**2).sum()))
    return covariance / math.sqrt(spread) if spread > 0 else 0.0


def ranks(values: torch.Tensor) -> torch.Tensor:
    """Ranks with ties given their mean rank (what Spearman's rho needs)."""
    order = torch.argsort(values, stable=True)
    ranks = torch.empty(len(values), dtype=torch.float64)
    ranks[order] = torch.arange(len(values), dtype=torch.float64)
    # each value's mean rank over its ties, in one pass (a loop over distinct values costs values x examples)
    _, group, counts = torch.unique(values, return_inverse=True, return_counts=True)
    sums = torch.zeros(len(counts), dtype=torch.float64).index_add_(0, group, ranks)
    return (sums / counts)[group]


def pearson(x: torch.Tensor, y: torch.Tensor) -> float:
    """Pearson's r of two series (NaN when one is constant)."""
    x, y = x.double() - x.double().mean(), y.double() - y.double().mean()
    denominator = math.sqrt(float((x * x).sum()) * float((y * y).sum()))
    return float((x * y).sum()) / denominator if denominator > 0 else float("nan")


def regression_scores(predicted: torch.Tensor, gold: torch.Tensor) -> dict[str, Any]:
    """Pearson's r with its 95 % interval (Fisher z) and Spearman's rho."""
    r, n = pearson(predicted, gold), len(gold)
    interval = list(pearson_interval(r, n))
    return {"pearson": r, "spearman": pearson(ranks(predicted), ranks(gold)), "ci95": interval, "examples": n}


def headline(scores: dict[str, Any]) -> float:
    """The one figure that picks the best epoch or penalty on valid: accuracy, or Pearson's r."""
    value = scores["accuracy"] if "accuracy" in scores else scores["pearson"]
    return value if math.isfinite(value) else -math.inf


def score(task: Task, outputs: torch.Tensor, gold: torch.Tensor) -> dict[str, Any]:
    if task.regression:
        return regression_scores(outputs.reshape(-1), gold)
    return classification_scores(outputs.argmax(dim=-1), gold, *_class_facts(task))


def _class_facts(task: Task) -> tuple[int, bool]:
    """(the majority class's index, whether the task has two classes): what classification_scores needs."""
    return task.classes.index(task.majority_class), len(task.classes) == 2


# ---------------------------------------------------------------------------------------------
# Models


@dataclass
class Encoded:
    """A split as token ids (unpadded) and its targets."""

    input_ids: list[list[int]]
    token_type_ids: Optional[list[list[int]]]
    targets: torch.Tensor

    def __len__(self) -> int:
        return len(self.input_ids)


def encode(task: Task, split: Split, tokenizer: Any, max_length: int) -> Encoded:
    # a task's text is text: [MASK] or [SEP] written in it are characters, as in the pretraining corpus
    out = tokenizer(
        split.texts, split.pairs, truncation=True, max_length=max_length, padding=False, split_special_tokens=True
    )
    return Encoded(out["input_ids"], out.get("token_type_ids"), task.targets(split))


def batches(
    encoded: Encoded, order: Sequence[int], batch_size: int, pad_id: int, device: torch.device
) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """(model inputs, targets) of `order`, `batch_size` at a time, right-padded to the longest row of each batch."""
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(encoded.input_ids[i]) for i in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        types = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            length = len(encoded.input_ids[i])
            ids[r, :length] = torch.tensor(encoded.input_ids[i])
            mask[r, :length] = 1
            if encoded.token_type_ids is not None:
                types[r, :length] = torch.tensor(encoded.token_type_ids[i])
        inputs = {"input_ids": ids, "attention_mask": mask}
        if encoded.token_type_ids is not None:
            inputs["token_type_ids"] = types
        yield {k: v.to(device) for k, v in inputs.items()}, encoded.targets[list(rows)]


class ProbeDiverged(UserError):
    """Fine-tuning met a non-finite loss or gradient: the probe stops rather than score a broken classifier."""


def _is_path(name: str) -> bool:
    return Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") > 1


def encoder_config(model: str) -> Any:
    """The model's config, checked to be a BERT-family encoder (a masked-LM architecture, neither decoder nor
    encoder-decoder); a local folder is first checked for its files."""
    from transformers import AutoConfig  # transformers: heavy, loaded on use

    # transformers: heavy, loaded on use
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    if _is_path(model):
        check_checkpoint_folder(Path(model).expanduser())
        model_config(model)  # no code of the folder's, and every key read here of the right type
    with quiet_transformers():
        try:
            config = from_pretrained(AutoConfig, model)
        except Exception as error:  # bad JSON, unknown model_type, hub unreachable: one meaning for the user
            raise UserError("model", f"cannot read the config of {model}: {first_line(error)}") from error
    decoder = getattr(config, "is_decoder", False) or getattr(config, "is_encoder_decoder", False)
    if config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES or decoder:
        raise UserError(
            "model",
            f"{model} holds a {config.model_type!r} model, not a BERT-family encoder; pass an encoder checkpoint "
            "such as RUN_DIR/checkpoints/latest",
        )
    return config


def _with_labels(config: Any, task: Task) -> Any:
    config = copy.deepcopy(config)
    if task.regression:
        config.num_labels, config.problem_type = 1, "regression"
    else:
        config.num_labels, config.problem_type = len(task.classes), "single_label_classification"
        config.id2label = {i: str(label) for i, label in enumerate(task.classes)}
        config.label2id = {str(label): i for i, label in enumerate(task.classes)}
    return config


def load_weights(model: str, config: Any, head: bool) -> Any:
    """The pretrained encoder (head=False: AutoModel) or encoder + a new classification head (head=True), with a
    UserError when the checkpoint's weights miss part of the encoder (only the head and pooler may be new)."""
    from transformers import AutoModel, AutoModelForSequenceClassification  # transformers: heavy, loaded on use

    auto = AutoModelForSequenceClassification if head else AutoModel
    with quiet_transformers():
        try:
            loaded, info = from_pretrained(auto, model, config=config, output_loading_info=True)
        except UserError:  # a pickle mlmtrain does not unpickle (model_folder.from_pretrained)
            raise
        except Exception as error:  # safetensors, pickle and torch errors: a truncated or damaged file
            raise UserError("model", f"cannot load the weights of {model}: {first_line(error)}") from error
    prefix = loaded.base_model_prefix
    lost = [
        key
        for key in info["missing_keys"]
        if (key.startswith(f"{prefix}.") or not head) and "pooler" not in key and "classifier" not in key
    ]
    if lost:
        raise UserError(
            "model",
            f"the weights of {model} lack {len(lost)} encoder tensor(s) (e.g. {sorted(lost)[0]}); "
            "it is not a checkpoint of this encoder",
        )
    return loaded


def untrained(config: Any, head: bool) -> Any:
    """The same architecture from random initialisation (seed torch first): the baseline of what pretraining bought."""
    from transformers import AutoModel, AutoModelForSequenceClassification  # transformers: heavy, loaded on use

    with quiet_transformers():
        return (AutoModelForSequenceClassification if head else AutoModel).from_config(config, trust_remote_code=False)


def classifier_from(mlm: Any, task: Task) -> Any:
    """A sequence classifier whose encoder is a copy of a live masked LM's (the live fine-tuning probe)."""
    from transformers import AutoModelForSequenceClassification  # transformers: heavy, loaded on use

    with quiet_transformers():
        classifier = AutoModelForSequenceClassification.from_config(
            _with_labels(mlm.config, task), trust_remote_code=False
        )
    classifier.base_model.load_state_dict(mlm.base_model.state_dict(), strict=False)  # pooler stays new
    return classifier


# ---------------------------------------------------------------------------------------------
# Fine-tuning and the linear probe


@dataclass
class ProbeResult:
    scores: dict[str, Any]
    valid_scores: dict[str, Any]
    seconds: float
    details: dict[str, Any] = field(default_factory=dict)  # best_epoch / l2 and the like

    def as_dict(self) -> dict[str, Any]:
        return {**self.scores, "valid": self.valid_scores, "seconds": self.seconds, **self.details}


@dataclass
class PreparedTask:
    """A task cut to its caps and tokenized once (the live probe reuses it at every probe)."""

    task: Task
    train: Encoded
    valid: Encoded
    test: Encoded
    pad_id: int

    @classmethod
    def build(cls, task: Task, tokenizer: Any, settings: ProbeSettings) -> PreparedTask:
        train = task.train.subset(settings.max_train_examples)
        valid, test = (split.subset(settings.max_eval_examples) for split in (task.valid, task.test))
        return cls(
            task,
            encode(task, train, tokenizer, settings.max_length),
            encode(task, valid, tokenizer, settings.max_length),
            encode(task, test, tokenizer, settings.max_length),
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0,
        )


def _by_length(data: Encoded) -> list[int]:
    """Row indices shortest first: inference batches then pad little (the outputs are put back in order)."""
    return sorted(range(len(data)), key=lambda i: len(data.input_ids[i]))


def _in_order(chunks: list[torch.Tensor], order: list[int]) -> torch.Tensor:
    stacked = torch.cat(chunks)
    out = torch.empty_like(stacked)
    out[order] = stacked
    return out


@torch.no_grad()
def predict(model: Any, data: Encoded, prepared: PreparedTask, batch_size: int, device: torch.device) -> torch.Tensor:
    """Logits (classification) or predictions (regression) of a sequence classifier, float32 on the CPU."""
    outputs, order = [], _by_length(data)
    for inputs, _ in batches(data, order, batch_size, prepared.pad_id, device):
        outputs.append(model(**inputs).logits.float().cpu())
    return _in_order(outputs, order)


def finetune(
    model: Any, prepared: PreparedTask, settings: ProbeSettings, device: torch.device
) -> tuple[ProbeResult, Any]:
    """AdamW with warm-up and linear decay for `epochs`; the epoch best on valid is scored on test.

    Returns the result and the model holding the best epoch's weights. Seed torch before building the model: its
    new head, dropout and the batch order then all follow the seed.
    """
    started = time.perf_counter()
    task, train = prepared.task, prepared.train
    model.to(device)
    steps_per_epoch = math.ceil(len(train) / settings.batch_size)
    total = settings.epochs * steps_per_epoch
    warmup = round(settings.warmup_ratio * total)
    optim = OptimConfig(
        lr=settings.lr, weight_decay=settings.weight_decay, beta2=0.999, eps=1e-8, warmup_steps=warmup, grad_clip=1.0
    )
    optimizer = build_optimizer(model, optim, device)
    order_rng = torch.Generator().manual_seed(settings.seed)
    best, best_state, best_epoch, history = -math.inf, None, 0, []
    bar = progress_bar(total, "step", "fine-tune", disable=not settings.progress)
    step = 0
    with bar:
        for epoch in range(1, settings.epochs + 1):
            model.train()
            order = torch.randperm(len(train), generator=order_rng).tolist()
            for inputs, targets in batches(train, order, settings.batch_size, prepared.pad_id, device):
                set_learning_rate(optimizer, learning_rate(step, step / total, optim, warmup / total))
                loss = model(**inputs, labels=targets.to(device)).loss
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), optim.grad_clip)
                loss_value, norm_value = loss.item(), norm.item()
                if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
                    # one such step would make every weight NaN (clipping scales every gradient by 1 / NaN) and
                    # every prediction class 0: stop instead of scoring that
                    raise ProbeDiverged(
                        "probe",
                        f"fine-tuning diverged at step {step + 1} of {total} (loss {loss_value:.4g}, gradient norm "
                        f"{norm_value:.4g}); try a lower {settings.lr_key} than {settings.lr:g}",
                    )
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                bar.update(1)
                bar.set_postfix(epoch=epoch, loss=f"{loss_value:.3f}", refresh=False)
            model.eval()
            valid = score(
                task, predict(model, prepared.valid, prepared, settings.batch_size, device), prepared.valid.targets
            )
            history.append(headline(valid))
            if headline(valid) > best:  # the first epoch always counts, even with an undefined figure
                best, best_epoch, best_valid = headline(valid), epoch, valid
                best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    if best_state is None:
        best_epoch, best_valid = settings.epochs, valid
    else:
        model.load_state_dict(best_state)
    model.eval()
    test = score(task, predict(model, prepared.test, prepared, settings.batch_size, device), prepared.test.targets)
    details = {"best_epoch": best_epoch, "valid_by_epoch": history}
    return ProbeResult(test, best_valid, time.perf_counter() - started, details), model


@torch.no_grad()
def features(
    encoder: Any,
    data: Encoded,
    prepared: PreparedTask,
    settings: ProbeSettings,
    device: torch.device,
    bar: Optional[Any] = None,
) -> torch.Tensor:
    """Pooled last-layer features of a frozen encoder: the mean over real tokens, or the [CLS] vector."""
    out, order = [], _by_length(data)
    for inputs, _ in batches(data, order, settings.batch_size, prepared.pad_id, device):
        hidden = encoder(**inputs).last_hidden_state.float()
        if settings.pooling == "cls":
            out.append(hidden[:, 0].cpu())
        else:
            mask = inputs["attention_mask"].unsqueeze(-1).float()
            out.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1)).cpu())
        if bar is not None:
            bar.update(len(inputs["input_ids"]))
    return _in_order(out, order).double()


def _fit_logistic(
    x: torch.Tensor, y: torch.Tensor, l2: float, start: torch.Tensor, bar: Optional[Any] = None
) -> torch.Tensor:
    """Multinomial logistic regression by full-batch L-BFGS (deterministic) from `start`; weights carry a bias row.

    Memory stays near a few copies of the weights whatever the number of classes: L-BFGS keeps _LBFGS_HISTORY
    curvature pairs (torch's default of 100 is 200 copies of the weights: gigabytes at 10,000 classes), and the loss
    is summed over row chunks of at most _LOGIT_CHUNK logits, never one examples x classes matrix.
    """
    x = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)
    weights = start.clone().requires_grad_(True)
    optimizer = torch.optim.LBFGS(
        [weights],
        lr=1.0,
        max_iter=_LBFGS_ITERATIONS,
        max_eval=_LBFGS_EVALUATIONS,
        history_size=_LBFGS_HISTORY,
        tolerance_change=1e-7,
        line_search_fn="strong_wolfe",
    )
    rows = max(1, _LOGIT_CHUNK // weights.shape[1])

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = 0.5 * l2 * (weights[:-1] ** 2).sum()
        loss.backward()
        total = loss.detach()
        for begin in range(0, len(x), rows):  # gradients accumulate chunk by chunk: the mean over all rows
            part = F.cross_entropy(x[begin : begin + rows] @ weights, y[begin : begin + rows], reduction="sum")
            (part / len(x)).backward()
            total = total + part.detach() / len(x)
        if bar is not None:
            bar.update(1)
        return total

    optimizer.step(closure)
    return weights.detach()


def _fit_ridge(x: torch.Tensor, y: torch.Tensor, l2: float) -> torch.Tensor:
    """Least squares with an L2 penalty (closed form, the bias unpenalised); returns weights with the bias row."""
    x1 = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1)
    penalty = torch.eye(x1.shape[1], dtype=x.dtype) * l2 * len(x)
    penalty[-1, -1] = 0
    return torch.linalg.solve(x1.T @ x1 + penalty, x1.T @ y.double().unsqueeze(1))


def _apply(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], dim=1) @ weights


def _linear_scores(task: Task, weights: torch.Tensor, x: torch.Tensor, gold: torch.Tensor) -> dict[str, Any]:
    """Scores of a fitted linear model on features `x`; classes are picked a chunk of rows at a time, never from one
    examples x classes matrix of logits."""
    if task.regression:
        return score(task, _apply(weights, x).float(), gold)
    rows = max(1, _LOGIT_CHUNK // weights.shape[1])
    predicted = torch.cat([_apply(weights, x[begin : begin + rows]).argmax(dim=-1) for begin in range(0, len(x), rows)])
    return classification_scores(predicted, gold, *_class_facts(task))


def linear_probe(encoder: Any, prepared: PreparedTask, settings: ProbeSettings, device: torch.device) -> ProbeResult:
    """Features of the frozen encoder computed once per split, standardised on train; a logistic (or, for
    regression, ridge) model per L2 penalty of a small grid; the penalty best on valid is scored on test."""
    started = time.perf_counter()
    task = prepared.task
    was_training = encoder.training
    encoder.eval()
    splits = (prepared.train, prepared.valid, prepared.test)
    bar = _bar(sum(len(data) for data in splits), "example", "features", settings)
    try:
        with bar:
            train, valid, test = (features(encoder, data, prepared, settings, device, bar) for data in splits)
    finally:
        encoder.train(was_training)
    mean, std = train.mean(0), train.std(0).clamp(min=1e-6)
    train, valid, test = ((x - mean) / std for x in (train, valid, test))
    best = None
    weights = torch.zeros(train.shape[1] + 1, max(len(task.classes), 1), dtype=train.dtype)
    fits = len(_L2_GRID) * (1 if task.regression else _LBFGS_EVALUATIONS)  # a ridge fit is one solve
    with _bar(fits, "fit" if task.regression else "eval", "linear fit", settings) as bar:
        for number, l2 in enumerate(_L2_GRID, 1):
            bar.set_postfix(l2=f"{l2:g}", refresh=False)
            if task.regression:
                weights = _fit_ridge(train, prepared.train.targets, l2)
            else:
                weights = _fit_logistic(train, prepared.train.targets, l2, weights, bar)
            bar.update(max(0, fits * number // len(_L2_GRID) - bar.n))  # a fit that converged early: on to the next
            valid_scores = _linear_scores(task, weights, valid, prepared.valid.targets)
            if best is None or headline(valid_scores) > headline(best[1]):
                best = (l2, valid_scores, weights)
    l2, valid_scores, weights = best
    test_scores = _linear_scores(task, weights, test, prepared.test.targets)
    details = {"l2": l2, "pooling": settings.pooling, "features": train.shape[1]}
    return ProbeResult(test_scores, valid_scores, time.perf_counter() - started, details)


def _bar(total: int, unit: str, what: str, settings: ProbeSettings) -> Any:
    """A progress bar on stderr when the settings ask for one (the command), silent otherwise (the live probe)."""
    return progress_bar(total, unit, what, disable=not settings.progress, leave=False)


def probe_encoder(
    model: str, config: Any, prepared: PreparedTask, settings: ProbeSettings, device: torch.device, baseline: bool
) -> tuple[ProbeResult, Any]:
    """Fine-tune or linear-probe the checkpoint `model` (or, with `baseline`, the same architecture from random
    initialisation under the same settings); returns the result and the model it was measured on."""
    torch.manual_seed(settings.seed)
    head = settings.mode == "finetune"
    net_config = _with_labels(config, prepared.task) if head else config
    net = untrained(net_config, head) if baseline else load_weights(model, net_config, head)
    if head:
        return finetune(net, prepared, settings, device)
    return linear_probe(net.to(device), prepared, settings, device), net


# ---------------------------------------------------------------------------------------------
# Live, during pretraining


def metric_record(result: ProbeResult, prefix: str = "probe") -> dict[str, float]:
    """The metrics.jsonl fields of a probe: accuracy and macro-F1, or Pearson and Spearman; and its seconds."""
    scores = result.scores
    if "accuracy" in scores:
        record = {f"{prefix}_acc": scores["accuracy"], f"{prefix}_f1": scores["macro_f1"]}
    else:
        record = {f"{prefix}_pearson": scores["pearson"], f"{prefix}_spearman": scores["spearman"]}
    return {**record, f"{prefix}_seconds": round(result.seconds, 3)}


def live_task(cfg: ProbeConfig) -> Optional[Task]:
    """The `probe:` section's task, read and checked (None without one): called before a run writes anything."""
    if not cfg.task:
        return None
    return load_task(cfg.task, TaskFields(cfg.text_field, cfg.pair_field, cfg.label_field))


class LiveProbe:
    """The probe the training loop runs on rank 0: the task (from `live_task`) tokenized once, then `run(mlm)` on
    the live weights, leaving the run's random state and the model's train/eval mode as it found them."""

    def __init__(self, cfg: ProbeConfig, task: Task, tokenizer: Any, device: torch.device, seed: int) -> None:
        self.cfg, self.device, self.probed_step = cfg, device, -1
        self.settings = ProbeSettings.from_section(cfg, seed)
        self.prepared = PreparedTask.build(task, tokenizer, self.settings)

    def when_due(self, mlm: Any, step: int, evaluated: bool, final: bool = False) -> Optional[ProbeResult]:
        """Probe at step `step` if due: every `probe.every` steps, or (every 0) whenever the loop has just evaluated;
        `final` (the end of the run) always, unless this step was probed already."""
        due = final or (evaluated if self.cfg.every == 0 else step % self.cfg.every == 0)
        if not due or step == self.probed_step:
            return None
        self.probed_step = step
        return self.run(mlm)

    def summary(self, result: ProbeResult) -> str:
        figures = ", ".join(f"{k} {v:.4f}" for k, v in metric_record(result).items() if k != "probe_seconds")
        return f"{self.cfg.mode} probe {figures} ({result.seconds:.1f}s)"

    def run(self, mlm: Any) -> ProbeResult:
        cuda = [self.device] if self.device.type == "cuda" else []
        was_training = mlm.training
        # fine-tuning draws dropout masks and a batch order: the run's own random streams must not notice
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(self.settings.seed)
            try:
                if self.settings.mode == "linear":
                    return linear_probe(mlm.base_model, self.prepared, self.settings, self.device)
                classifier = classifier_from(mlm, self.prepared.task)
                result, _ = finetune(classifier, self.prepared, self.settings, self.device)
                return result
            finally:
                mlm.train(was_training)
