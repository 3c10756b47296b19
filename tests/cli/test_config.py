"""Config loading: defaults, overrides, every shipped config, and each kind of bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlmtrain.config import Config, describe_fields, load_config
from mlmtrain.errors import UserError

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.yaml"))


def test_defaults_are_valid_and_documented() -> None:
    cfg = load_config(None)
    assert isinstance(cfg, Config)
    rows = describe_fields()
    assert len(rows) > 40
    assert all(help_text.strip() for _, _, help_text, _ in rows)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_shipped_config_loads(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.model.hidden_size % cfg.model.num_heads == 0
    assert cfg.train.run_dir.startswith("runs/")


def test_shipped_sizes_match_turc_et_al() -> None:
    sizes = {p.stem: load_config(p).model for p in CONFIGS}
    expected = {
        "tiny": (2, 128, 2),
        "mini": (4, 256, 4),
        "small": (4, 512, 8),
        "medium": (8, 512, 8),
        "base": (12, 768, 12),
    }
    for name, (layers, hidden, heads) in expected.items():
        model = sizes[name]
        assert (model.num_layers, model.hidden_size, model.num_heads) == (layers, hidden, heads)
    assert "quickstart" in sizes


def test_overrides_are_yaml_scalars(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  lr: 0.1\n")
    cfg = load_config(path, ["optim.lr=1e-3", "train.max_time=10m", "data.validation=null", "masking.whole_word=true"])
    assert cfg.optim.lr == pytest.approx(1e-3)
    assert cfg.train.max_time_seconds == 600
    assert cfg.data.validation is None
    assert cfg.masking.whole_word is True


def test_a_set_fills_a_section_left_empty_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("optim:\ntrain:\n  max_steps: 7\n")  # `optim:` alone loads as null: an empty section
    cfg = load_config(path, ["optim.lr=2e-3"])
    assert cfg.optim.lr == pytest.approx(2e-3) and cfg.train.max_steps == 7


def test_list_sources_and_derived_paths() -> None:
    cfg = load_config(None, ["data.train=[a.txt, b.txt]", "train.run_dir=runs/x"])
    assert cfg.data.train == ["a.txt", "b.txt"]
    assert cfg.tokenizer_dir == Path("runs/x/tokenizer")
    assert cfg.store_dir == Path("runs/x/tokens")


BAD = [
    (["optim.lrr=1"], "did you mean 'optim.lr'"),
    (["optimizer.lr=1"], "did you mean 'optim'"),
    (["optim.lr=-1"], "optim.lr must be > 0"),
    (["optim.lr=0"], "optim.lr must be > 0"),
    (["masking.mlm_probability=1.5"], "masking.mlm_probability must be in (0, 1)"),
    (["masking.mlm_probability=0"], "masking.mlm_probability must be in (0, 1)"),
    (["masking.mask_replace=0.95"], "must be <= 1"),
    (["model.num_heads=3"], "divisible by model.num_heads"),
    (["data.seq_len=1024"], "model.max_position_embeddings"),
    (["train.batch_size=abc"], "train.batch_size must be int"),
    (["train.batch_size=1.5"], "train.batch_size must be int"),
    (["model.sparse_head=maybe"], "model.sparse_head must be bool"),
    (["optim.schedule=exponential"], "optim.schedule must be"),
    (["optim.schedule=one-cycle", "optim.cycle_peak=1"], "optim.cycle_peak must be in (0, 1)"),
    (["model.dropout=1.0"], "model.dropout must be in [0, 1)"),
    (["model.dropout=0", "model.hidden_dropout=0.2"], "contradicts model.dropout"),
    (["train.max_time=soon"], "train.max_time"),
    (["train.device=tpu"], "train.device"),
    (["train.max_steps=null"], "set at least one budget"),
    (["nodot=1"], "section.key"),
    (["optim.lr"], "section.key=value"),
]


@pytest.mark.parametrize("overrides,needle", BAD, ids=[b[0][0] for b in BAD])
def test_bad_values_name_the_key(overrides: list[str], needle: str) -> None:
    with pytest.raises(UserError) as info:
        load_config(None, overrides)
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_file() -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_config("no/such/config.yaml")


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("data:\n  seq_len: 128\noptim:\n  lr: [1, 2\n")
    with pytest.raises(UserError) as info:
        load_config(path)
    assert "malformed YAML at line" in str(info.value)


def test_section_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("optim: 3\n")
    with pytest.raises(UserError, match="section 'optim' must be a mapping"):
        load_config(path)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match="must hold a mapping"):
        load_config(path)


@pytest.mark.parametrize(
    "text", ["data: &a [*a]\n", "data:\n  train: &a\n    x: *a\n"], ids=["list-in-itself", "mapping-in-itself"]
)
def test_a_recursive_alias_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "rec.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=r"contains itself.*alias.*line \d") as info:
        load_config(path)
    assert str(path) in str(info.value) and "data" in str(info.value)
    with pytest.raises(UserError, match="--set data.train: .*contains itself"):
        load_config(None, ["data.train=&a [*a]"])


def test_every_key_says_what_a_resume_under_another_value_does() -> None:
    """The resume note's list of training keys is derived from the fields: a key cannot be added without saying."""
    import dataclasses

    from mlmtrain.config import RESUME_KINDS, SECTIONS, TRAINING_KEYS, section_fields, setting

    with pytest.raises(TypeError):
        setting(1, "a key that does not say")  # type: ignore[call-arg]
    kinds = {f"{s}.{f.name}": f.metadata["resume"] for s in SECTIONS for f in section_fields(s)}
    assert set(kinds.values()) <= set(RESUME_KINDS)
    assert set(TRAINING_KEYS) == {key for key, kind in kinds.items() if kind == "note"}
    for key in ("electra.discriminator_weight", "electra.temperature", "model.init_from", "tokenizer.extend_vocab"):
        assert key in TRAINING_KEYS, key
    for key in ("model.dropout", "optim.beta2"):  # each has a resume note of its own
        assert kinds[key] == "own-note"
    assert kinds["train.log_every"] == kinds["train.run_dir"] == "silent"
    assert all(isinstance(f, dataclasses.Field) for s in SECTIONS for f in section_fields(s))


@pytest.mark.parametrize(
    "overrides, stated",
    [
        ([], set()),
        (["optim.lr=5e-4", "model.dropout=0"], {"optim.lr", "model.dropout"}),  # at its default, still stated
    ],
)
def test_the_config_records_the_keys_the_user_stated(overrides: list[str], stated: set[str]) -> None:
    cfg = load_config(None, overrides)
    assert cfg.stated == stated
    assert cfg.set_by_user("optim.lr") == ("optim.lr" in stated)


def test_a_dropout_key_stated_at_its_default_contradicts_model_dropout(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"model.hidden_dropout \(0.1\) contradicts model.dropout \(0.0\)"):
        load_config(None, ["model.dropout=0", "model.hidden_dropout=0.1"])
    cfg = load_config(None, ["model.dropout=0"])  # the saved config says what the model gets, and loads again
    assert cfg.to_dict()["model"]["hidden_dropout"] == cfg.to_dict()["model"]["attention_dropout"] == 0.0
    saved = tmp_path / "mlmtrain.yaml"
    saved.write_text(cfg.to_yaml())
    assert load_config(saved).model.hidden_dropout_prob == 0.0


def test_each_key_checks_its_own_value_and_config_fields_says_the_rule() -> None:
    """The range of a key is declared beside its default; one generic pass checks every key, naming the key, the
    rule and the value, and `config fields` prints the same rule with the default in YAML's spelling."""
    from mlmtrain.config import Check, above, at_least, describe_fields, section_fields, within

    assert [within(0, 1, ends).holds(value) for ends in ("[)", "(]") for value in (0, 1)] == [True, False, False, True]
    assert at_least(8).says == "must be >= 8" and above(0).says == "must be > 0"
    for key, value, says in (
        ("probe.max_length", 4, "probe.max_length must be >= 8 (got 4)"),
        ("report.unk_rate", 1.5, "report.unk_rate must be in [0, 1] (got 1.5)"),
        ("optim.eps", 0, "optim.eps must be > 0 (got 0.0)"),
        ("checkpoint.keep_last", -1, "checkpoint.keep_last must be >= 0 (got -1)"),
    ):
        with pytest.raises(UserError, match=re.escape(says)):
            load_config(None, {key: value})
    checks = {f"{s}.{f.name}": f.metadata["check"] for s in ("data", "optim", "train") for f in section_fields(s)}
    assert all(isinstance(check, Check) for key, check in checks.items() if key in ("optim.lr", "data.seq_len"))
    rows = {key: (default, rule) for key, default, _, rule in describe_fields()}
    assert rows["optim.lr"] == ("0.0005", "must be > 0")
    assert rows["data.validation"] == ("null", "")  # YAML's null, not Python's None
    assert rows["data.text_field"][0] == "text" and rows["train.trackers"][0] == "[]"
    assert rows["optim.schedule"] == ("linear", "must be one of linear, cosine, constant, one-cycle, wsd")


def test_an_unknown_key_of_a_megabyte_is_quoted_short() -> None:
    with pytest.raises(UserError) as info:
        load_config(None, {"optim." + "x" * 1_000_000: 1})
    assert len(str(info.value)) < 400 and "(1,000,006 characters)" in str(info.value)
