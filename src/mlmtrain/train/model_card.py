"""The model card of a checkpoint (`README.md`): Hub metadata in YAML front matter (library, pipeline, license,
datasets, language, tags, the base model a continued run started from), then the model's size, its tokenizer,
the data, how far it trained, its last validation and probe scores, how to load it and the resolved config. Files
and folders are named, never given by their paths on the machine that trained it (`published_value`).

`save_checkpoint` writes it afresh at each save, from the figures it records in checkpoint.json and the run's
metrics.jsonl. Like every file of a checkpoint it is listed in checkpoint.json with its size and time, so a card a
user edited makes the folder theirs: it is never replaced or pruned.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Optional

import yaml

from mlmtrain.config import (
    Config,
    mixture_of,
    names_hub_repository,
    phase_configs,
    published_value,
    published_yaml,
    train_specs,
)
from mlmtrain.data.sources import parse_hub_spec
from mlmtrain.model.families import family_of, shape_of
from mlmtrain.readers import load_json_text, read_json
from mlmtrain.report.rundata import scorecard_table
from mlmtrain.runtime.durable import replace_text
from mlmtrain.runtime.model_folder import weights_parameter_count
from mlmtrain.train.added_words import ADDED_WORDS, added_words
from mlmtrain.train.objectives import objective_class

CARD = "README.md"
# how the card names the validation and probe figures of metrics.jsonl (others keep their key)
_FIGURES = {
    "eval_loss": "validation loss",
    "eval_ppl": "validation perplexity",
    "eval_acc": "validation accuracy (masked tokens)",
    "eval_generator_perplexity": "generator perplexity",
    "eval_generator_accuracy": "generator accuracy",
    "eval_discriminator_accuracy": "discriminator accuracy",
    "eval_auc": "discriminator AUC",
    "probe_acc": "probe accuracy",
    "probe_f1": "probe macro-F1",
    "probe_pearson": "probe Pearson",
    "probe_spearman": "probe Spearman",
}
_NOT_FIGURES = ("eval_masked_tokens", "eval_seconds", "probe_seconds")


def write_model_card(
    folder: Path, cfg: Config, step: int, metrics: dict[str, Any], state: dict[str, Any], run_dir: Path
) -> Path:
    """Write `folder`/README.md for the model saved there at `step`; `metrics` are checkpoint.json's figures,
    `state` the training state (its elapsed time), run_dir/metrics.jsonl gives the last validation and probe."""
    folder = Path(folder)
    model = read_json(folder / "config.json")
    records = _records_up_to(Path(run_dir) / "metrics.jsonl", step)
    # checkpoint.save_ema: the folder holds the moving average of the weights, whose figures evaluations log as ema_*
    averaged = cfg.checkpoint.save_ema
    validation = ("Validation of the moving average of the weights, which this folder holds", "ema_eval_")
    probe = f"Probe: `{cfg.probe.task}`, {cfg.probe.mode}" + (
        " (of the live weights, not the average)" if averaged else ""
    )
    body = "\n".join(
        [
            _front_matter(cfg, model),
            _summary(cfg, model, folder, step),
            _model_section(model, folder),
            _tokenizer_section(cfg, folder),
            _data_section(cfg, records, state),
            _training_section(cfg, step, metrics, state),
            _scores_section(*(validation if averaged else ("Validation", "eval_")), records, step, metrics),
            _scores_section(probe, "probe_", records, step, {}),
            _loading_section(cfg),
            _config_section(cfg),
        ]
    )
    body = re.sub(r"\n{3,}", "\n\n", body)  # a section with nothing to say leaves no gap
    (folder / CARD).write_text(body, encoding="utf-8")
    return folder / CARD


def _records_up_to(path: Path, step: int) -> list[dict[str, Any]]:
    """The metrics.jsonl records of this run's history up to `step`, in file order. A run resumed from an older
    checkpoint appends after the earlier run's later steps: from its first line on, those are not its history."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeError):
        return []
    records: list[dict[str, Any]] = []
    for line in lines:
        try:
            record = load_json_text(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            continue
        if records and record["step"] < records[-1]["step"]:  # a resume from an earlier step starts here
            records = [kept for kept in records if kept["step"] < record["step"]]
        records.append(record)
    return [record for record in records if record["step"] <= step]


def hub_datasets(cfg: Config) -> list[str]:
    """The hub datasets (hf:NAME...) the model was trained or validated on (a phase's too), for the card's
    `datasets`."""
    names: list[str] = []
    phase_sources = [phase.set["data.train"] for phase in cfg.phases if "data.train" in phase.set]
    for source in (cfg.data.train, cfg.data.validation or [], *phase_sources):
        for entry in train_specs(source):
            if entry.startswith("hf:"):
                name = parse_hub_spec(entry)[0]
                names += [] if name in names else [name]
    return names


def _languages(cfg: Config) -> list[str]:
    """checkpoint.language as a list: the card claims a language only where the user stated one."""
    language = cfg.checkpoint.language
    return [] if language is None else [language] if isinstance(language, str) else list(language)


def _front_matter(cfg: Config, model: dict[str, Any]) -> str:
    objective = objective_class(cfg)
    meta: dict[str, Any] = {
        "library_name": "transformers",
        "pipeline_tag": objective.card_pipeline_tag,
        "license": cfg.checkpoint.license,
    }
    if datasets := hub_datasets(cfg):
        meta["datasets"] = datasets
    if languages := _languages(cfg):
        meta["language"] = languages
    if cfg.model.init_from and names_hub_repository(cfg.model.init_from):  # the Hub takes a repository id, never a path
        meta["base_model"] = cfg.model.init_from
    model_type = str(
        model.get("model_type", "bert")
    )  # the family's name tag (bert, roberta, ...), then the objective's
    meta["tags"] = list(dict.fromkeys(["mlmtrain", model_type, *objective.card_tags]))
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n"


def _summary(cfg: Config, model: dict[str, Any], folder: Path, step: int) -> str:
    return (
        f"# {Path(cfg.train.run_dir).name}, step {step:,}\n\n"
        f"A {shape_of(model)['num_layers']}-layer {_family_name(model)} encoder pretrained "
        f"{objective_class(cfg).card_trained} by mlmtrain, {weights_parameter_count(folder):,} parameters."
        f"{_continued(cfg)}\n"
    )


def _family_name(model: dict[str, Any]) -> str:
    family = family_of(model.get("model_type"))
    return family.name if family is not None else str(model.get("model_type", "bert")).upper()


def _continued(cfg: Config) -> str:
    """The sentences naming the base of a continued run (model.init_from) and the model the objective learns from (a
    teacher): a Hub link, or a local folder's name."""
    said = _named_model("Continued from", "model.init_from", cfg.model.init_from)
    key = objective_class(cfg).card_teacher_key
    if key is not None:
        section, setting = key.split(".")
        said += _named_model("Distilled from", key, getattr(getattr(cfg, section), setting))
    return said


def _named_model(verb: str, key: str, name: Optional[str]) -> str:
    if not name:
        return ""
    if names_hub_repository(name):
        return f" {verb} [`{name}`](https://huggingface.co/{name}) (`{key}`)."
    return f" {verb} the local model `{published_value(key, name)}` (`{key}`)."


def _table(header: tuple[str, str], rows: list[tuple[str, Any]]) -> str:
    return f"| {header[0]} | {header[1]} |\n|---|---|\n" + "".join(f"| {name} | {value} |\n" for name, value in rows)


def _model_section(model: dict[str, Any], folder: Path) -> str:
    shape = shape_of(model)  # by the config.json names of the model's family
    rows = [
        ("architecture", ", ".join(model.get("architectures") or [model.get("model_type", "?")])),
        ("layers", shape["num_layers"]),
        ("hidden size", shape["hidden_size"]),
        ("attention heads", shape["num_heads"]),
        ("feed-forward size", shape["intermediate_size"]),
        ("max positions", shape["max_position_embeddings"]),
        ("embedding rows", model.get("vocab_size")),
        ("parameters", f"{weights_parameter_count(folder):,}"),
    ]
    return "## Model\n\n" + _table(("property", "value"), rows)


def _tokenizer_section(cfg: Config, folder: Path) -> str:
    try:
        settings = read_json(folder / "tokenizer_config.json")
        vocab_file = read_json(folder / "tokenizer.json")
        vocab = vocab_file["model"]
    except (OSError, ValueError, KeyError):
        return ""
    origin = (
        f"reused from `{published_value('tokenizer.pretrained', cfg.tokenizer.pretrained)}`"
        if cfg.tokenizer.pretrained
        else "trained by mlmtrain on the training data"
    )
    lowercases = "Lowercase" in json.dumps(vocab_file.get("normalizer"))  # a BPE's normalizer, or BERT's setting
    cased = "lower-cased" if settings.get("do_lower_case") or lowercases else "cased"
    words = len(added_words(cfg))
    added = (
        f" `tokenizer.extend_vocab` added {words:,} whole word{'s' if words != 1 else ''} of the training data to "
        f"the base's vocabulary, listed in the run's `{ADDED_WORDS}`."
        if words
        else ""
    )
    return (
        f"## Tokenizer\n\n{vocab.get('type', 'WordPiece')}, {len(vocab.get('vocab') or {}):,} tokens, {cased}, "
        f"{origin}; its files are in this folder.{added}\n"
    )


def _sources(key: str, source: Any) -> str:
    source = published_value(key, source)
    if mixture := mixture_of(source):  # a mixture: each source with its weight
        named = (f"{_sources(key, entry.source)} as {entry.name} (weight {entry.weight:g})" for entry in mixture)
        return ", ".join(named)
    return ", ".join(f"`{entry}`" for entry in ([source] if isinstance(source, str) else source))


def _data_section(cfg: Config, records: list[dict[str, Any]], state: dict[str, Any]) -> str:
    validation = (
        _sources("data.validation", cfg.data.validation)
        if cfg.data.validation
        else f"{cfg.data.validation_fraction:.0%} of the training documents, held out"
    )
    packing = "packed" if cfg.data.packing else "one document each"
    phases = _phases_so_far(cfg, state)
    blocks = f"blocks of {cfg.data.seq_len} tokens"
    if phases:  # "blocks of 32 tokens in phase stable, 64 in long"
        (name, first), *later = phases
        blocks = f"blocks of {first.data.seq_len} tokens in phase {name}"
        blocks += "".join(f", {phase_cfg.data.seq_len} in {name}" for name, phase_cfg in later)
    lengths = {phase_cfg.data.seq_len for _, phase_cfg in phases} or {cfg.data.seq_len}
    lengths |= {r["seq_len"] for r in records if "loss" in r and isinstance(r.get("seq_len"), int)}  # resumed longer
    longest = f"- longest trained length: {max(lengths)} tokens\n" if phases or len(lengths) > 1 else ""
    training = _sources("data.train", cfg.data.train)
    if any(phase_cfg.data.train != cfg.data.train for _, phase_cfg in phases):  # a phase of its own training text
        training = "; ".join(f"{_sources('data.train', c.data.train)} in phase {name}" for name, c in phases)
    return f"## Data\n\n- training: {training}\n- validation: {validation}\n- {blocks}, {packing}\n{longest}"


def _phases_so_far(cfg: Config, state: dict[str, Any]) -> list[tuple[str, Config]]:
    """(name, config) of each phase the run has trained in up to the checkpoint (config phases:); [] without."""
    phase = (state.get("train_state") or {}).get("phase", 0)
    configs = phase_configs(cfg) if cfg.phases else []
    return [(p.name, c) for p, c in zip(cfg.phases, configs, strict=True)][: phase + 1]


def _training_section(cfg: Config, step: int, metrics: dict[str, Any], state: dict[str, Any]) -> str:
    elapsed = (state.get("train_state") or {}).get("elapsed_s")
    phases = _phases_so_far(cfg, state)
    current = phases[-1][1] if phases else cfg  # the config of the phase the checkpoint ends
    rows = [
        ("objective", cfg.train.objective),
        ("steps", f"{step:,}"),
        ("tokens", f"{metrics.get('tokens', 0):,}"),
        ("batch", f"{current.train.batch_size} x {current.data.seq_len} tokens"),
        ("training time", f"{elapsed:,.0f} s" if isinstance(elapsed, (int, float)) else "n/a"),
        ("seed", cfg.train.seed),
    ]
    if phases:
        rows.insert(1, ("phases", ", ".join(name for name, _ in phases)))
    return "## Training\n\n" + _table(("setting", "value"), rows)


def _figure(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if math.isfinite(value) else "n/a"
    return str(value)


def _scores_section(title: str, prefix: str, records: list[dict[str, Any]], step: int, saved: dict[str, Any]) -> str:
    """The last record with `prefix` figures; checkpoint.json's own figures (`saved`) win where both hold one."""
    found = next((record for record in reversed(records) if any(k.startswith(prefix) for k in record)), None)
    if found is None:
        return ""
    figures = {k: v for k, v in found.items() if k.startswith(prefix) and _plain(k) not in _NOT_FIGURES}
    if found["step"] == step:
        figures.update({k: v for k, v in saved.items() if k.startswith(prefix) and v is not None})
    rows = [(_FIGURES.get(_plain(key), key), _figure(value)) for key, value in figures.items()]
    where = "this step" if found["step"] == step else f"step {found['step']:,}"
    base = _base_figures(records, prefix) if found["step"] > 0 else {}
    if base:  # a continued run evaluated its base at step 0: the base's figure beside each of this checkpoint's
        rows = [(name, f"{value} (base: {_figure(base[key])})" if key in base else value)
                for (name, value), key in zip(rows, figures, strict=True)]  # fmt: skip
    return f"## {title}\n\nAt {where} (fixed evaluation masks and seeds):\n\n" + _table(("figure", "value"), rows)


def _plain(key: str) -> str:
    """A figure's key without the ema_ of the moving average's (`ema_eval_ppl`: `eval_ppl`)."""
    return key.removeprefix("ema_")


def _base_figures(records: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    """The step-0 figures with `prefix` (a continued run's evaluation of its base, before any update); {} without."""
    first = next(
        (record for record in records if record["step"] == 0 and any(k.startswith(prefix) for k in record)), {}
    )
    return {k: v for k, v in first.items() if k.startswith(prefix) and k not in _NOT_FIGURES}


_SCORECARD_START, _SCORECARD_END = "<!-- mlmtrain scorecard -->", "<!-- /mlmtrain scorecard -->"


def scorecard_section(record: dict[str, Any]) -> str:
    """The card's section of a scorecard (`probe --suite`): its protocol in a line, then its table in percent."""
    header, rows = scorecard_table(record)
    plan = record.get("protocol") or {}
    seeds = plan.get("seeds") or []
    reference = record.get("reference") or {}
    source = f" Reference: [{reference['name']}]({reference['source']}), {reference['split']}." if reference else ""
    lines = [
        f"| {' | '.join(header)} |",
        f"|{'---|' * len(header)}",
        *(f"| {' | '.join(row)} |" for row in rows),
    ]
    return (
        f"{_SCORECARD_START}\n## Scorecard: `{published_value('probe.task', record.get('suite'))}`\n\n"
        f"Fine-tuned by `mlmtrain probe --suite` for {plan.get('epochs')} epoch(s) (the best on valid), lr "
        f"{plan.get('lr')}, batch {plan.get('batch_size')}, {plan.get('max_length')} tokens, seeds "
        f"{', '.join(map(str, seeds))}; the median over seeds, in percent.{source}\n\n"
        + "\n".join(lines)
        + f"\n{_SCORECARD_END}\n"
    )


def add_scorecard(folder: Path, record: dict[str, Any]) -> None:
    """Show the scorecard in the card of the checkpoint `folder` (in place of one it showed), before "How to load"."""
    path = Path(folder) / CARD
    card = path.read_text(encoding="utf-8")
    if _SCORECARD_START in card and _SCORECARD_END in card:
        before, rest = card.split(_SCORECARD_START, 1)
        card = before + rest.split(_SCORECARD_END, 1)[1].lstrip("\n")
    section = scorecard_section(record)
    where = card.find("## How to load")
    card = card[:where] + section + "\n" + card[where:] if where >= 0 else card.rstrip("\n") + "\n\n" + section
    replace_text(path, card)


def _loading_section(cfg: Config) -> str:
    return f"## How to load\n\n```python\n{objective_class(cfg).card_usage}```\n"


def _config_section(cfg: Config) -> str:
    return (
        "## Config\n\nThe resolved config of the run (also in `mlmtrain.yaml`), its files and folders by name:\n\n"
        f"```yaml\n{published_yaml(cfg)}```\n"
    )
