"""train.objective distill: a student taught by a teacher masked LM written here by plain transformers. The KL term
is zero for a student equal to its teacher and falls as a student trains; teacher-layers copies the layers it says;
the FLOPs count the teacher's forward; a paused run resumes exactly (the projection too); the checkpoint is an
ordinary masked LM with no teacher inside, whose card names the teacher; bad settings are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mlmtrain.config import load_config
from mlmtrain.train.init_from import resolve_init_from
from mlmtrain.train.loop import pretrain

from ..helpers import (
    assert_one_error_line,
    by_step,
    finish_torchrun,
    metrics,
    run_cli,
    step_losses,
    torchrun,
    weights,
)
from .test_init_from import POSITIONS, base_tokenizer, continue_options, write_base

TEACHER = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128}


def write_teacher(folder: Path, layers: int = 2, head: str = "BertForMaskedLM") -> Path:
    """A BERT of hidden size 64 and `layers` layers (`head`: its class) with the tokenizer of test_init_from."""
    import transformers

    tokenizer = base_tokenizer()
    torch.manual_seed(11)
    shape = {**TEACHER, "num_hidden_layers": layers}
    config = transformers.BertConfig(vocab_size=len(tokenizer), max_position_embeddings=POSITIONS, **shape)
    model = getattr(transformers, head)(config)
    if head == "BertForMaskedLM":  # a decided preference among the tokens: something for a student to learn
        with torch.no_grad():
            model.cls.predictions.bias.normal_(0.0, 3.0)
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_teacher(tmp_path_factory.mktemp("teacher") / "tiny-teacher")


def distill_options(data: Path, teacher: Path, root: Path, student_shape: bool = True, **extra: object) -> list[str]:
    """--set options distilling `teacher` into the tiny student (without its model keys: `student_shape` false) on
    the tiny corpus in `data`, the tokenizer and store under `root`."""
    distill = {"model.init_from": None, "train.objective": "distill", "distill.teacher": str(teacher)}
    options = continue_options(data, teacher, root, **{**distill, **extra})
    return [o for o in options if student_shape or not o.startswith("model.") or o.split("=")[0] in extra]


def test_the_kl_term_is_zero_for_a_student_equal_to_its_teacher_at_temperature_one(teacher: Path) -> None:
    import copy

    from transformers import BertForMaskedLM

    from mlmtrain.model.distill import Distillation, DistilledStudent

    model = BertForMaskedLM.from_pretrained(str(teacher)).eval()
    vocab = model.config.vocab_size
    module = Distillation(DistilledStudent(copy.deepcopy(model)), model, vocab, temperature=1.0, hidden_weight=1.0)
    module.eval()
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, vocab, (2, 16), generator=generator)
    labels = torch.full_like(input_ids, -100)
    labels[:, ::3] = input_ids[:, ::3]
    cross_entropy, divergence, hidden = module(input_ids, labels).tolist()
    assert cross_entropy > 1.0
    assert abs(divergence) < 1e-5 and abs(hidden) < 1e-5
    other = Distillation(DistilledStudent(BertForMaskedLM(model.config)), model, vocab, 1.0, 1.0).eval()
    assert other(input_ids, labels)[1] > 1e-3  # a student of other weights is apart from the teacher


@pytest.fixture(scope="module")
def distilled(teacher: Path, tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short distillation run from scratch, its KL term weighed alone so it shows the student learning."""
    root = tmp_path_factory.mktemp("distilled")
    extra = {"train.max_steps": 16, "optim.lr": 3e-3, "distill.alpha": 0.9, "distill.temperature": 1.0}
    pretrain(load_config(None, distill_options(tiny_data, teacher, root, **extra)))
    return root / "run"


def test_the_kl_term_falls_during_a_short_run(distilled: Path) -> None:
    kl = [line["distill_loss"] for line in metrics(distilled) if "distill_loss" in line]
    assert len(kl) == 16
    assert sum(kl[-4:]) / 4 < 0.8 * sum(kl[:4]) / 4, kl


def test_the_flop_count_includes_the_teachers_forward(distilled: Path, teacher: Path, tiny_data: Path) -> None:
    from mlmtrain.data.masking import VocabInfo
    from mlmtrain.data.tokenizer import load_tokenizer
    from mlmtrain.model.bert import flops_per_token
    from mlmtrain.train.objectives import objective_of

    cfg = load_config(None, distill_options(tiny_data, teacher, distilled.parent))
    cfg = resolve_init_from(cfg).cfg
    tokenizer = load_tokenizer(teacher)
    objective = objective_of(cfg, VocabInfo.from_tokenizer(tokenizer))
    student = flops_per_token(cfg.model, len(tokenizer), 32, 0.15, True)
    teacher_model = objective.teacher_shape()
    assert (teacher_model.hidden_size, teacher_model.num_layers, teacher_model.intermediate_size) == (64, 2, 128)
    teacher_forward = flops_per_token(teacher_model, len(tokenizer), 32, 0.15, True) / 3
    assert objective.flops_per_token == round(student + teacher_forward)
    last = [line for line in metrics(distilled) if "loss" in line][-1]
    assert last["flops"] == last["tokens"] * objective.flops_per_token


def test_the_checkpoint_reloads_in_transformers_without_the_teacher(distilled: Path, teacher: Path) -> None:
    from transformers import AutoModelForMaskedLM, BertForMaskedLM

    folder = distilled / "checkpoints" / "latest"
    model = AutoModelForMaskedLM.from_pretrained(str(folder))
    assert isinstance(model, BertForMaskedLM)
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (32, 2)
    saved = weights(folder)
    assert not [name for name in saved if "teacher" in name or "projection" in name]
    fresh = BertForMaskedLM(model.config).state_dict()
    assert {name for name in saved if not name.startswith("bert.pooler")} <= set(fresh)
    assert sum(t.numel() for t in saved.values()) < 0.5 * sum(
        p.numel() for p in BertForMaskedLM.from_pretrained(str(teacher)).parameters()
    )
    card = (folder / "README.md").read_text()
    assert "Distilled from the local model `tiny-teacher` (`distill.teacher`)" in card


def test_teacher_layers_copies_every_other_layer_of_the_teacher(tiny_data: Path, tmp_path: Path) -> None:
    from transformers import BertForMaskedLM

    from mlmtrain.data.masking import VocabInfo
    from mlmtrain.data.tokenizer import load_tokenizer
    from mlmtrain.train.objectives import objective_of

    deep = write_teacher(tmp_path / "deep", layers=4)
    cfg = load_config(None, distill_options(tiny_data, deep, tmp_path, False, **{"distill.init": "teacher-layers"}))
    cfg = resolve_init_from(cfg).cfg
    assert (cfg.model.hidden_size, cfg.model.num_layers, cfg.model.intermediate_size) == (64, 2, 128)
    student = objective_of(cfg, VocabInfo.from_tokenizer(load_tokenizer(deep))).build().student
    source = BertForMaskedLM.from_pretrained(str(deep))
    assert student.config.num_hidden_layers == len(student.bert.encoder.layer) == 2
    for kept, copied in zip((0, 2), student.bert.encoder.layer, strict=True):
        for (name, value), (_, original) in zip(
            copied.state_dict().items(), source.bert.encoder.layer[kept].state_dict().items(), strict=True
        ):
            assert torch.equal(value, original), (kept, name)
    assert torch.equal(student.bert.embeddings.word_embeddings.weight, source.bert.embeddings.word_embeddings.weight)
    assert torch.equal(student.cls.predictions.transform.dense.weight, source.cls.predictions.transform.dense.weight)


def test_a_paused_distillation_resumes_exactly(teacher: Path, tiny_data: Path, tmp_path: Path) -> None:
    """With the hidden-state loss between widths 32 and 64: the projection, kept in the training state, resumes too."""
    common = {"train.max_steps": 6, "train.eval_every": 3, "checkpoint.save_every": 3, "distill.hidden_weight": 1.0}
    whole = pretrain(load_config(None, distill_options(tiny_data, teacher, tmp_path / "whole", **common)))
    paused = distill_options(tiny_data, teacher, tmp_path / "paused", **common, **{"train.pause_after": 3})
    assert pretrain(load_config(None, paused)).name == "step-3"
    resumed = pretrain(load_config(None, distill_options(tiny_data, teacher, tmp_path / "paused", **common)), "auto")
    assert "hidden_loss" in metrics(tmp_path / "paused" / "run")[-2] or any(
        "hidden_loss" in line for line in metrics(tmp_path / "paused" / "run")
    )
    assert step_losses(tmp_path / "paused" / "run") == step_losses(tmp_path / "whole" / "run")
    a, b = weights(whole), weights(resumed)
    for key in a:
        assert torch.equal(a[key], b[key]), key


BAD_SETTINGS = {
    "other-tokenizer": (
        lambda root, data: {"tokenizer.pretrained": str(data / "tokenizer")},
        "brings its own tokenizer, but tokenizer.pretrained is",
    ),
    "no-mlm-head": (
        lambda root, data: {"distill.teacher": str(write_teacher(root / "cls", head="BertForSequenceClassification"))},
        "not a masked LM",
    ),
    "temperature": (lambda root, data: {"distill.temperature": 0}, "distill.temperature must be > 0"),
    "modernbert-student": (
        lambda root, data: {"model.architecture": "modernbert"},
        "(modernbert) is not one train.objective distill builds (a student from scratch is a BERT",
    ),
    "alpha": (lambda root, data: {"distill.alpha": 1.5}, "distill.alpha must be in [0, 1]"),
    "teacher-layers-widths": (
        lambda root, data: {"distill.init": "teacher-layers", "model.hidden_size": 32},
        "but model.hidden_size is 32; drop model.hidden_size or set distill.init: scratch",
    ),
    "init-from": (
        lambda root, data: {"model.init_from": str(write_base(root / "base"))},
        "model.init_from is set with",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SETTINGS))
def test_a_bad_distillation_setting_is_refused_in_one_line_with_nothing_written(
    case: str, teacher: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    make, needle = BAD_SETTINGS[case]
    options = distill_options(
        tiny_data, teacher, tmp_path, case != "teacher-layers-widths", **make(tmp_path, tiny_data)
    )
    code, lines = run_cli(capsys, "pretrain", *[arg for pair in options for arg in ("--set", pair)])
    assert code == 2
    assert_one_error_line(lines, needle)
    assert not (tmp_path / "run").exists() and not (tmp_path / "tokens").exists()


def test_a_tokenizer_kind_beside_a_teacher_names_the_teacher_and_dropping_it_trains(
    teacher: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """tokenizer.kind bpe with train.objective distill: the teacher brings the tokenizer, and the line says so
    (not tokenizer.pretrained or model.init_from, which the user did not set); without tokenizer.kind it trains."""
    one_step = {"train.max_steps": 1, "train.eval_every": 0, "checkpoint.save_every": 1}
    options = distill_options(tiny_data, teacher, tmp_path, **one_step)
    code, lines = run_cli(
        capsys, "pretrain", *[arg for pair in [*options, "tokenizer.kind=bpe"] for arg in ("--set", pair)]
    )
    assert code == 2
    line = assert_one_error_line(lines, "tokenizer.kind (bpe)", "distill.teacher brings one; drop tokenizer.kind")
    assert "tokenizer.pretrained" not in line and "model.init_from" not in line
    assert not (tmp_path / "run").exists()
    code, lines = run_cli(capsys, "pretrain", *[arg for pair in options for arg in ("--set", pair)])
    assert code == 0, lines


def test_config_fields_shows_the_distill_section(capsys: pytest.CaptureFixture) -> None:
    from mlmtrain.cli.app import main

    main(["config", "fields"])
    shown = capsys.readouterr().out
    for key in ("distill.teacher", "distill.temperature", "distill.alpha", "distill.hidden_weight", "distill.init"):
        assert key in shown, key


@pytest.mark.slow
def test_two_processes_distil_as_one_process_with_the_whole_batch(
    teacher: Path, tiny_data: Path, tmp_path: Path
) -> None:
    """Under torchrun (2 CPU ranks, micro-batch 2, accumulation 2) each rank runs its own teacher and the student's
    gradients, the hidden-state projection's among them, are averaged: the same losses as one process."""
    exact = {"model.dropout": 0.0, "train.max_steps": 6, "checkpoint.save_every": 6, "distill.hidden_weight": 1.0}
    two = distill_options(tiny_data, teacher, tmp_path / "two", **exact, **{"train.micro_batch_size": 2})
    output = finish_torchrun(torchrun(tiny_data, tmp_path / "two" / "run", options=two))
    assert "2 process(es), global batch 8 x 32 tokens (micro-batch 2, accumulation 2)" in output
    pretrain(load_config(None, distill_options(tiny_data, teacher, tmp_path / "one", **exact)))
    for term in ("loss", "distill_loss", "hidden_loss"):
        one_run, two_runs = (by_step(tmp_path / name / "run", term) for name in ("one", "two"))
        assert sorted(two_runs) == list(range(1, 7)), term
        assert [two_runs[s] for s in sorted(two_runs)] == pytest.approx([one_run[s] for s in sorted(one_run)], rel=1e-5)
    # the checkpoint is the student alone, whichever number of processes wrote it
    assert not [name for name in weights(tmp_path / "two" / "run" / "checkpoints" / "latest") if "projection" in name]


# ---------------------------------------------------------------------------------------------
# Every distillation run resumes, whatever its teacher's family and whatever the resume changes


@pytest.mark.parametrize("family", ["roberta", "distilbert", "modernbert"])
def test_a_student_of_a_teacher_of_another_family_resumes_exactly(family: str, tiny_data: Path, tmp_path: Path) -> None:
    """distill.init teacher-layers makes a student of the teacher's family, whose checkpoint is of that family's
    class: a resume reads it as such (it was refused as "not a BERT" with a fix that was the command given)."""
    from .test_families import write_family_base

    teacher = write_family_base(tmp_path / family, family)
    common = {"train.max_steps": 4, "train.eval_every": 0, "checkpoint.save_every": 2, "distill.init": "teacher-layers"}
    positions = json.loads((teacher / "config.json").read_text())["max_position_embeddings"]  # RoBERTa's: 2 more
    common = {**common, "model.max_position_embeddings": positions}
    whole = pretrain(load_config(None, distill_options(tiny_data, teacher, tmp_path / "whole", False, **common)))
    paused = distill_options(tiny_data, teacher, tmp_path / "paused", False, **common, **{"train.pause_after": 2})
    assert pretrain(load_config(None, paused)).name == "step-2"
    options = distill_options(tiny_data, teacher, tmp_path / "paused", False, **common)
    resumed = pretrain(load_config(None, options), "auto")
    assert step_losses(tmp_path / "paused" / "run") == step_losses(tmp_path / "whole" / "run")
    a, b = weights(whole), weights(resumed)
    assert all(torch.equal(a[key], b[key]) for key in a)


def test_a_resume_that_stops_the_hidden_state_loss_carries_the_optimizer_state_by_name(
    teacher: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A run that trained the hidden-state projection, resumed (or branched) with distill.hidden_weight 0: the
    projection's moments are left behind and named; the student's go on (it was a ValueError traceback)."""
    common = {"train.max_steps": 4, "train.eval_every": 0, "checkpoint.save_every": 2, "distill.hidden_weight": 1.0}
    pretrain(load_config(None, distill_options(tiny_data, teacher, tmp_path, **common, **{"train.pause_after": 2})))
    options = distill_options(tiny_data, teacher, tmp_path, **{**common, "distill.hidden_weight": 0.0})
    code, lines = run_cli(capsys, "pretrain", *[arg for pair in options for arg in ("--set", pair)], "--resume")
    assert code == 0, lines
    (note,) = [line for line in lines if "optimizer state follows the parameters by name" in line]
    assert "left behind the moments of projection.bias, projection.weight (no longer trained)" in note, note
    assert [line["step"] for line in metrics(tmp_path / "run") if "loss" in line][-1] == 4


def test_a_resume_with_a_teacher_of_another_tokenizer_names_the_teacher_and_its_fix_works(
    teacher: Path, tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The run's tokenizer is its teacher's: a resume under a teacher of another tokenizer says so and names the
    teacher that run learned from (it blamed tokenizer.path, with a fix the teacher check then refused)."""
    from .test_families import write_family_base

    common = {"train.max_steps": 4, "train.eval_every": 0, "checkpoint.save_every": 2}
    pretrain(load_config(None, distill_options(tiny_data, teacher, tmp_path, **common, **{"train.pause_after": 2})))
    other = write_family_base(tmp_path / "other-teacher", "roberta")
    for now, code_wanted in ((other, 2), (teacher, 0)):
        options = distill_options(tiny_data, now, tmp_path, **{**common, "model.max_position_embeddings": 64})
        code, lines = run_cli(capsys, "pretrain", *[arg for pair in options for arg in ("--set", pair)], "--resume")
        assert code == code_wanted, lines
        if code:
            line = assert_one_error_line(lines, "another tokenizer than the one distill.teacher", "tiny-teacher")
            assert "tokenizer.pretrained" not in line and "tokenizer.path" not in line


def test_a_teacher_folder_that_now_holds_another_model_is_known_by_its_weights(
    tiny_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The same distill.teacher path, other weights: a resume would mix two teachers and is refused; the fix it names,
    a branch, starts a new run that says its teacher changed (it was read on --resume without a word)."""
    from safetensors.torch import load_file, save_file

    teacher = write_teacher(tmp_path / "teacher")
    common = {"train.max_steps": 4, "train.eval_every": 0, "checkpoint.save_every": 2}
    pretrain(load_config(None, distill_options(tiny_data, teacher, tmp_path, **common, **{"train.pause_after": 2})))
    tensors = load_file(str(teacher / "model.safetensors"))
    save_file({name: value * 1.5 for name, value in tensors.items()}, str(teacher / "model.safetensors"))
    options = [arg for pair in distill_options(tiny_data, teacher, tmp_path, **common) for arg in ("--set", pair)]
    code, lines = run_cli(capsys, "pretrain", *options, "--resume")
    assert code == 2
    assert_one_error_line(lines, "holds other weights than the teacher", "would mix two teachers", "--branch-from")
    branch = [
        "--branch-from",
        str(tmp_path / "run" / "checkpoints" / "step-2"),
        "--set",
        f"train.run_dir={tmp_path / 'new'}",
    ]
    code, lines = run_cli(capsys, "pretrain", *options, *branch)
    assert code == 0, lines
    assert any("holds other weights than the teacher" in line for line in lines if line.startswith("note:"))
