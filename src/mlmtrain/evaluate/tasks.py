"""Labeled text tasks for the downstream probe: a folder of train/valid/test files (.jsonl .csv .parquet),
explicit files, or a datasets hub name (`hf:NAME[/CONFIG]`), read whole into typed splits. Integer or string labels
make a classification task, float labels a regression one; every label of valid and test is checked against train.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch

from mlmtrain.data.records import Reading, Record, read_records
from mlmtrain.errors import UserError, first_line
from mlmtrain.runtime.hub import hub_unreachable, libraries_offline, offline_mode

TASK_SUFFIXES = (".jsonl", ".csv", ".parquet")
SPLIT_NAMES = {"train": ("train",), "valid": ("valid", "validation", "dev"), "test": ("test",)}
SUBSET_SEED = 0  # example caps keep the same examples whatever --seed says: seeds vary training, not data
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
# a task file is refused, not repaired: undecodable bytes and rows wider than the header are errors
_READING = Reading("task", wide_rows=False)


@dataclass
class TaskFields:
    """Which record fields hold the text, the optional second text of a pair, and the label."""

    text: str = "text"
    pair: Optional[str] = None
    label: str = "label"


@dataclass
class Split:
    texts: list[str]
    pairs: Optional[list[str]]
    labels: list[Any]
    source: str

    def __len__(self) -> int:
        return len(self.texts)

    def subset(self, count: Optional[int]) -> Split:
        """`count` examples drawn with a fixed seed (all of them when count is None or not smaller)."""
        if count is None or count >= len(self):
            return self
        keep = sorted(random.Random(SUBSET_SEED).sample(range(len(self)), count))
        pairs = [self.pairs[i] for i in keep] if self.pairs is not None else None
        return Split([self.texts[i] for i in keep], pairs, [self.labels[i] for i in keep], self.source)


@dataclass
class Task:
    name: str
    train: Split
    valid: Split
    test: Split
    regression: bool
    classes: list[Any]  # sorted class labels (classification); empty for regression
    fields: TaskFields

    def targets(self, split: Split) -> torch.Tensor:
        """Class ids (long) or float targets of a split."""
        if self.regression:
            return torch.tensor([float(label) for label in split.labels], dtype=torch.float32)
        index = {label: i for i, label in enumerate(self.classes)}
        return torch.tensor([index[label] for label in split.labels], dtype=torch.long)

    @property
    def majority_class(self) -> Any:
        return Counter(self.train.labels).most_common(1)[0][0] if not self.regression else None

    def fingerprint(self) -> str:
        """What identifies the task by its examples, not by where they were read: "sha256:" and the digest of every
        split's texts, pairs and labels, in order."""
        splits = [[split.texts, split.pairs, split.labels] for split in (self.train, self.valid, self.test)]
        return "sha256:" + hashlib.sha256(json.dumps(splits, default=repr).encode("utf-8")).hexdigest()


def _task_error(message: str) -> UserError:
    return UserError("task", message)


def _csv_value(value: Optional[str]) -> Any:
    """CSV holds only text: numbers are read back as int or float so labels have their real type."""
    if value is None:
        return None
    if _INT.match(value.strip()):
        return int(value)
    if _FLOAT.match(value.strip()):
        return float(value)
    return value


def task_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a .jsonl, .csv or .parquet file (labeled tasks are small: they are read whole); the numbers
    of a CSV come back as int or float."""
    kind = path.suffix.lower().removeprefix(".")
    if f".{kind}" not in TASK_SUFFIXES:
        raise _task_error(f"{path} has an unsupported extension; use one of {', '.join(TASK_SUFFIXES)}")
    found = [record for record in read_records(path, kind, _READING) if record.fields is not None]
    return [_csv_fields(record) for record in found] if kind == "csv" else [record.fields for record in found]


def _csv_fields(record: Record) -> dict[str, Any]:
    try:
        return {name: _csv_value(value) for name, value in record.fields.items()}
    except ValueError as error:  # an integer of more digits than Python converts
        raise _task_error(f"cannot read {record.where}: {first_line(error)}; check the file") from None


def _field_fix(name: str) -> str:
    return {"text": "--text-field", "pair": "--pair-field", "label": "--label-field"}[name]


def _split_from_records(records: Sequence[dict[str, Any]], fields: TaskFields, source: str) -> Split:
    """A Split from records; a UserError naming the record, the field and the option that fixes it."""
    texts, pairs, labels = [], [] if fields.pair else None, []
    for number, record in enumerate(records, 1):
        where = f"{source} record {number}"
        for role in ("text", "pair", "label"):
            name = getattr(fields, role)
            if name is not None and name not in record:
                known = ", ".join(map(str, record)) or "none"
                raise _task_error(f"{where} has no field '{name}' (fields: {known}); pass {_field_fix(role)} NAME")
        for role in ("text", "pair"):
            name = getattr(fields, role)
            if name is not None and not isinstance(record[name], str):
                raise _task_error(
                    f"{where}: field '{name}' holds {type(record[name]).__name__}, not text; pass {_field_fix(role)}"
                )
        label = record[fields.label]
        if label is None or isinstance(label, (list, dict)) or isinstance(label, str) and not label.strip():
            raise _task_error(f"{where} has no usable label in '{fields.label}' (got {label!r}); fix or remove it")
        texts.append(record[fields.text])
        if pairs is not None:
            pairs.append(record[fields.pair])
        labels.append(int(label) if isinstance(label, bool) else label)
    return Split(texts, pairs, labels, source)


def _resolve_fields(first: dict[str, Any], fields: TaskFields) -> TaskFields:
    """GLUE-style pairs: with the default text field absent and text_a / text_b present, use those two."""
    if fields.text == "text" and fields.pair is None and "text" not in first and {"text_a", "text_b"} <= set(first):
        return TaskFields("text_a", "text_b", fields.label)
    return fields


def _split_file(folder: Path, split: str, names: Optional[Sequence[str]] = None) -> Path:
    """The one file of `split` in a task folder, under one of `names` (the split's usual names by default)."""
    names = names or SPLIT_NAMES[split]
    found = [
        folder / f"{name}{suffix}"
        for name in names
        for suffix in TASK_SUFFIXES
        if (folder / f"{name}{suffix}").is_file()
    ]
    if not found:
        wanted = " or ".join(f"{name}.jsonl/.csv/.parquet" for name in names)
        raise _task_error(f"{folder} has no {split} file ({wanted}); add it or pass --{split} FILE")
    if len(found) > 1:
        raise _task_error(f"{folder} has {len(found)} {split} files ({', '.join(p.name for p in found)}); keep one")
    return found[0]


def _held_out(split: Split, share: float) -> tuple[Split, Split]:
    """(rest, held out): a fixed-seed share of a split, for a task given without a validation split."""
    order = list(range(len(split)))
    random.Random(SUBSET_SEED).shuffle(order)
    cut = max(1, round(len(order) * share))
    held, rest = sorted(order[:cut]), sorted(order[cut:])

    def pick(indices: list[int], source: str) -> Split:
        pairs = [split.pairs[i] for i in indices] if split.pairs is not None else None
        return Split([split.texts[i] for i in indices], pairs, [split.labels[i] for i in indices], source)

    return pick(rest, split.source), pick(held, f"{len(held)} examples held out of {split.source}")


def _hub_records(spec: str, test_split: Optional[str] = None) -> dict[str, tuple[list[dict[str, Any]], str]]:
    """{split: (records, source)} of `hf:NAME[/CONFIG]` (three parts read as ORG/NAME/CONFIG), loaded whole; the test
    split is the hub's split named `test_split` when one is named."""
    parts = spec.removeprefix("hf:").split("/")
    if not all(parts) or len(parts) > 3:
        raise _task_error(f"--task {spec!r} must look like hf:NAME, hf:NAME/CONFIG or hf:ORG/NAME/CONFIG")
    name, config = ("/".join(parts[:2]), parts[2]) if len(parts) == 3 else (parts[0], parts[1] if parts[1:] else None)
    import datasets  # datasets: heavy, loaded for a Hub task alone

    # offline mode reads the datasets cache; otherwise an unreachable Hub fails at once, not after half a minute
    offline = offline_mode() is not None
    unreachable = None if offline else hub_unreachable()
    if unreachable:
        raise _task_error(
            f"cannot load hub dataset {spec}: the Hugging Face Hub is unreachable ({unreachable}); a task folder in "
            "its column layout works offline (or HF_DATASETS_OFFLINE=1 reads what the datasets cache holds)"
        )
    try:
        with libraries_offline(offline):
            loaded = datasets.load_dataset(name, config)
    except Exception as error:  # not found, offline, gated: many types, one meaning for the user
        raise _task_error(
            f"cannot load hub dataset {spec}: {first_line(error)}; a task folder in its column layout works offline"
        ) from error
    if test_split is not None and test_split not in loaded:
        raise _task_error(f"{spec} has no split '{test_split}' (it has {', '.join(loaded)}); name one of those")
    out = {}
    for split, names in {**SPLIT_NAMES, **({"test": (test_split,)} if test_split else {})}.items():
        for hub_name in names:
            if hub_name in loaded:
                out[split] = (list(loaded[hub_name]), f"{spec}:{hub_name}")
                break
    return out


def load_task(
    task: Optional[str],
    fields: TaskFields,
    train: Optional[str] = None,
    valid: Optional[str] = None,
    test: Optional[str] = None,
    test_split: Optional[str] = None,
) -> Task:
    """A labeled task from a folder, explicit files (--train/--valid/--test override the folder's), or the hub.

    Without a validation split, 10 % of train (fixed seed) is held out for choosing the epoch or the penalty.
    A test split without labels (GLUE's are -1, on the hub and in a folder of its layout) is replaced by the
    validation split, valid then held out. `test_split` names another split to test on (MNLI's
    validation_matched: a folder's file of that name, or the hub's split).
    """
    records: dict[str, tuple[list[dict[str, Any]], str]] = {}
    if task is not None and task.startswith("hf:"):
        records = _hub_records(task, test_split)
    elif task is not None:
        folder = Path(task)
        if not folder.is_dir():
            what = "is a file" if folder.exists() else "does not exist"
            raise _task_error(f"{folder} {what}; pass a folder holding train/valid/test files (or hf:NAME)")
        explicit = {"train": train, "valid": valid, "test": test}
        for split in SPLIT_NAMES:
            if explicit[split] is None and (split != "valid" or _has_split(folder, "valid")):
                path = _split_file(folder, split, (test_split,) if split == "test" and test_split else None)
                records[split] = (task_records(path), str(path))
    for split, path in (("train", train), ("valid", valid), ("test", test)):
        if path is not None:
            if Path(path).is_dir():
                raise _task_error(
                    f"--{split} {path} is a folder; pass a .jsonl, .csv or .parquet file (or the folder as --task)"
                )
            if not Path(path).is_file():
                raise _task_error(f"--{split} {path} does not exist; pass an existing .jsonl, .csv or .parquet file")
            records[split] = (task_records(Path(path)), path)
    test_labels = [record.get(fields.label) for record in records.get("test", ([], ""))[0]]
    if test_split is None and test_labels and all(label == -1 for label in test_labels):
        records["test"] = records.pop("valid") if "valid" in records else records.pop("test")
    for split in ("train", "test"):
        if split not in records:
            raise _task_error(f"no {split} split: pass --task FOLDER_OR_HF_NAME or --{split} FILE")
    for split, (rows, source) in records.items():
        if not rows:
            raise _task_error(f"the {split} split ({source}) holds no examples; add labeled examples to it")
    fields = _resolve_fields(records["train"][0][0], fields)
    splits = {split: _split_from_records(rows, fields, source) for split, (rows, source) in records.items()}
    if "valid" not in splits:
        if len(splits["train"]) < 2:  # the hold-out takes at least one example: train would be left empty
            raise _task_error(
                f"the train split ({splits['train'].source}) has {len(splits['train'])} example, too few to hold out "
                "a validation split from; add a valid file (valid.jsonl/.csv/.parquet) or pass --valid FILE"
            )
        splits["train"], splits["valid"] = _held_out(splits["train"], 0.1)
    name = task or str(Path(splits["train"].source).parent)
    return _typed_task(name, splits["train"], splits["valid"], splits["test"], fields)


def _has_split(folder: Path, split: str) -> bool:
    return any((folder / f"{name}{suffix}").is_file() for name in SPLIT_NAMES[split] for suffix in TASK_SUFFIXES)


def _finite_float(label: Any) -> Optional[float]:
    """A regression label as a float; None for text, or a number no float holds (nan, inf, a 400-digit integer)."""
    if isinstance(label, bool) or not isinstance(label, (int, float)):
        return None
    try:
        value = float(label)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _shown(label: Any) -> str:
    text = repr(label)
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def _check_one_label_type(split: Split) -> None:
    """A UserError naming the first record whose label's type differs from most of the split's labels."""
    kinds = Counter(type(label) for label in split.labels)
    if len(kinds) < 2:
        return
    usual = kinds.most_common(1)[0][0]
    number, label = next((n, label) for n, label in enumerate(split.labels, 1) if type(label) is not usual)
    raise _task_error(
        f"{split.source} record {number}: label {_shown(label)} is {type(label).__name__} while most labels are "
        f"{usual.__name__} (the split mixes {', '.join(sorted(k.__name__ for k in kinds))}); "
        "write every label the same way"
    )


def _typed_task(name: str, train: Split, valid: Split, test: Split, fields: TaskFields) -> Task:
    """Classification (int or str labels) or regression (float labels), with every label checked against train."""
    regression = any(isinstance(label, float) for label in train.labels)
    if regression:
        for split in (train, valid, test):
            for number, label in enumerate(split.labels, 1):
                if _finite_float(label) is None:
                    raise _task_error(
                        f"{split.source} record {number}: label {_shown(label)} is not a finite number a float can "
                        "hold, which a regression task (float labels in train) needs; fix the label"
                    )
        return Task(name, train, valid, test, True, [], fields)
    _check_one_label_type(train)
    classes = sorted(set(train.labels))
    if len(classes) < 2:
        raise _task_error(
            f"{train.source} has one class only ({classes[0]!r}); a classifier needs two or more: "
            f"check --label-field (now '{fields.label}') or the data"
        )
    typed = Task(name, train, valid, test, False, classes, fields)
    for split_name, split in (("valid", valid), ("test", test)):
        check_labels(typed, split_name, split)
    return typed


def check_labels(task: Task, split_name: str, split: Split) -> None:
    """A UserError naming the first label of a classification task's `split` that its train split never shows."""
    known = set(task.classes)
    for number, label in enumerate(split.labels, 1):
        if label not in known:
            raise _task_error(
                f"the {split_name} split ({split.source}) has label {label!r} (record {number}), which the "
                "train split never shows; add training examples of it or remove it"
            )


def named_split(task: Task, spec: str, split_name: str) -> Split:
    """Another split of the task `spec` (a folder or an hf: name) by its name, read with the task's fields and its
    labels checked against the task's: a second test set for the model fine-tuned on `task` (MNLI's mismatched)."""
    if spec.startswith("hf:"):
        rows, source = _hub_records(spec, split_name)["test"]
    else:
        path = _split_file(Path(spec), split_name, (split_name,))
        rows, source = task_records(path), str(path)
    if not rows:
        raise _task_error(f"the {split_name} split ({source}) holds no examples; add labeled examples to it")
    split = _split_from_records(rows, task.fields, source)
    if task.regression:
        for number, label in enumerate(split.labels, 1):
            if _finite_float(label) is None:
                raise _task_error(f"{source} record {number}: label {_shown(label)} is not a finite number; fix it")
    else:
        check_labels(task, split_name, split)
    return split
