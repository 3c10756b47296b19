"""ELECTRA replaced-token detection: exact discriminator labels and scored positions, one shared embedding, banned
samples, the loss, the AUC, checkpoint folders that stock transformers classes load, and the config's refusals."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from mlmtrain.config import load_config
from mlmtrain.data.masking import IGNORE_INDEX, MaskingCollator, VocabInfo
from mlmtrain.errors import UserError
from mlmtrain.model.electra import (
    GENERATOR_DIR,
    build_electra,
    discriminator_inputs,
    evaluate_electra,
    load_electra,
    roc_auc,
    sample_tokens,
    scored_positions,
)
from mlmtrain.runtime.model_folder import read_model_folder
from mlmtrain.train.objectives import objective_of

PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB = VocabInfo(vocab_size=50, mask_id=MASK, pad_id=PAD, special_ids=(PAD, CLS, SEP, MASK))
TINY = [
    "data.seq_len=16",
    "train.objective=electra",
    "model.hidden_size=32",
    "model.num_layers=2",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "model.max_position_embeddings=32",
    "model.hidden_dropout=0",
    "model.attention_dropout=0",
    "model.pad_vocab_multiple=8",
]


def pair_of(*extra: str):
    torch.manual_seed(0)
    return build_electra(load_config(None, [*TINY, *extra]), VOCAB)


def batches(count: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    collator = MaskingCollator(VOCAB, load_config(None, TINY).masking, seed=seed)
    rng = np.random.default_rng(seed)
    blocks = [np.r_[CLS, rng.integers(4, 50, 14), SEP] for _ in range(4 * count)]
    return [
        collator([{"input_ids": blocks[i], "epoch": 0, "index": i} for i in range(4 * b, 4 * b + 4)])
        for b in range(count)
    ]


def test_replaced_labels_are_exact() -> None:
    # row: [CLS] a [MASK] c d [SEP] [PAD]; positions 2 (masked, original 7) and 3 (kept, original 9) selected
    input_ids = torch.tensor([[CLS, 5, MASK, 9, 11, SEP, PAD]])
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 7, 9, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]])
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
    # the generator samples 8 at position 2 (a replacement) and 9 at position 3 (the original again)
    corrupted, replaced = discriminator_inputs(input_ids, labels, torch.tensor([8, 9]))
    assert corrupted.tolist() == [[CLS, 5, 8, 9, 11, SEP, PAD]]
    assert replaced.tolist() == [[False, False, True, False, False, False, False]]  # a sampled original: original
    is_special = VOCAB.is_special(torch.arange(VOCAB.vocab_size))
    scored = scored_positions(input_ids, labels, attention_mask, is_special)
    assert scored.tolist() == [[False, True, True, True, True, False, False]]  # never [CLS], [SEP] nor padding


def test_a_selected_position_that_kept_a_special_looking_input_is_still_scored() -> None:
    # 80/10/10 leaves [MASK] at selected positions: scored by its label, not by the special id it shows
    input_ids = torch.tensor([[CLS, MASK, MASK, SEP]])
    labels = torch.tensor([[IGNORE_INDEX, 12, 13, IGNORE_INDEX]])
    scored = scored_positions(input_ids, labels, None, VOCAB.is_special(torch.arange(VOCAB.vocab_size)))
    assert scored.tolist() == [[False, True, True, False]]


def test_generator_and_discriminator_share_one_embedding_tensor() -> None:
    pair = pair_of()
    shared = pair.discriminator.electra.embeddings
    assert pair.generator.electra.embeddings is shared
    assert pair.generator.electra.embeddings.word_embeddings.weight is shared.word_embeddings.weight
    assert pair.generator.electra.embeddings.position_embeddings.weight is shared.position_embeddings.weight
    assert pair.generator.generator_lm_head.weight is shared.word_embeddings.weight  # decoder tied to it
    # counted once: no parameter of the pair appears twice
    params = list(pair.parameters())
    assert len({id(p) for p in params}) == len(params)
    names = dict(pair.named_parameters())
    assert "generator.electra.embeddings.word_embeddings.weight" not in names
    # the narrower generator projects the shared width to its own
    assert pair.generator.config.hidden_size == 8 and pair.generator.config.embedding_size == 32
    assert hasattr(pair.generator.electra, "embeddings_project")
    assert not hasattr(pair.discriminator.electra, "embeddings_project")


def test_samples_never_banned_and_temperature_sharpens() -> None:
    banned = torch.zeros(6, dtype=torch.bool)
    banned[[0, 5]] = True
    logits = torch.zeros(2000, 6)
    logits[:, 0] = 10.0  # the most likely id is banned
    logits[:, 1] = 1.0
    draws = sample_tokens(logits, 1.0, banned, torch.Generator().manual_seed(0))
    assert not bool(banned[draws].any())
    cold = sample_tokens(logits, 0.05, banned, torch.Generator().manual_seed(0))
    assert float((cold == 1).float().mean()) > 0.99 > float((draws == 1).float().mean())
    assert sample_tokens(logits[:0], 1.0, banned).shape == (0,)


def test_samples_follow_the_tempered_softmax() -> None:
    banned = torch.tensor([True, False, False, False, True, False])
    logits = torch.tensor([[3.0, 0.5, -1.0, 2.0, 9.0, 1.0]]).repeat(40_000, 1)
    for temperature in (1.0, 2.0):
        draws = sample_tokens(logits, temperature, banned, torch.Generator().manual_seed(1))
        expected = (logits[0] / temperature).masked_fill(banned, float("-inf")).softmax(-1)
        observed = torch.bincount(draws, minlength=6).double() / len(draws)
        sigma = (expected * (1 - expected) / len(draws)).sqrt()
        assert bool(((observed - expected).abs() <= 6 * sigma + 1e-12).all()), (observed, expected)
    # the rows are independent: each row's draw follows its own logits
    rows = torch.full((4, 6), -30.0)
    rows[torch.arange(4), torch.tensor([1, 2, 3, 5])] = 30.0
    assert sample_tokens(rows, 1.0, banned).tolist() == [1, 2, 3, 5]


@pytest.mark.parametrize(("dropout", "agree"), [("0", True), ("0.1", False)])
def test_model_dropout_reaches_both_models(dropout: str, agree: bool) -> None:
    """model.dropout (the fast recipe's one key) sets the generator's and the discriminator's dropout; in train mode
    two passes with the same samples agree exactly without dropout and differ with it."""
    keys = [key for key in TINY if "_dropout" not in key]
    torch.manual_seed(0)
    pair = build_electra(load_config(None, [*keys, f"model.dropout={dropout}"]), VOCAB).train()
    for model in (pair.generator, pair.discriminator):
        assert model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == float(dropout)
    batch = batches(1)[0]
    first, second = (pair.step(**batch, sampler=torch.Generator().manual_seed(3)) for _ in range(2))
    assert torch.equal(first.discriminator_logits, second.discriminator_logits) is agree


def test_loss_sums_and_gradients_reach_both_models() -> None:
    pair = pair_of()
    objective = objective_of(load_config(None, TINY), VOCAB)
    batch = batches(1)[0]
    sums = pair(**batch)
    selected, scored = objective.counts(batch)
    assert selected == int((batch["labels"] != IGNORE_INDEX).sum()) > 0
    assert scored == 4 * 14  # every ordinary token of 4 rows of [CLS] + 14 + [SEP]
    # at init the generator is near uniform over the padded vocabulary, the discriminator near 1/2
    assert float(sums[0].detach()) / selected == pytest.approx(np.log(56), rel=0.05)
    assert float(sums[1].detach()) / scored == pytest.approx(np.log(2), rel=0.05)
    loss = objective.loss(sums, [selected, scored])
    assert float(loss.detach()) == pytest.approx(
        float(sums[0].detach()) / selected + 50 * float(sums[1].detach()) / scored
    )
    assert objective.loss_terms(sums.detach(), [selected, scored]) == {
        "generator_loss": pytest.approx(float(sums[0].detach()) / selected),
        "discriminator_loss": pytest.approx(float(sums[1].detach()) / scored),
    }
    loss.backward()
    assert all(p.grad is not None for p in pair.parameters())


def test_loss_falls() -> None:
    pair = pair_of()
    objective = objective_of(load_config(None, TINY), VOCAB)
    optimizer = torch.optim.AdamW(pair.parameters(), lr=3e-3)
    data = batches(4)
    torch.manual_seed(1)
    losses = []
    for step in range(24):
        batch = data[step % len(data)]
        loss = objective.loss(pair(**batch), objective.counts(batch))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    assert np.mean(losses[-4:]) < 0.7 * np.mean(losses[:4])


def test_roc_auc_matches_pairwise_count() -> None:
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 60).astype(float)  # many ties
    labels = rng.random(60) < 0.4
    pos, neg = scores[labels], scores[~labels]
    pairs = [(1.0 if p > n else 0.5 if p == n else 0.0) for p, n in itertools.product(pos, neg)]
    assert roc_auc(scores, labels) == pytest.approx(np.mean(pairs))
    assert roc_auc(np.arange(4.0), np.array([0, 0, 1, 1])) == 1.0
    assert np.isnan(roc_auc(np.arange(3.0), np.zeros(3)))


def test_evaluation_is_fixed_and_complete() -> None:
    pair = pair_of()
    blocks = [np.r_[CLS, np.random.default_rng(i).integers(4, 50, 14), SEP] for i in range(10)]
    masking = load_config(None, TINY).masking
    first = evaluate_electra(pair, blocks, list(range(10)), masking, 7, 4, torch.device("cpu"))
    again = evaluate_electra(pair, blocks, list(range(10)), masking, 7, 4, torch.device("cpu"))
    assert {k: v for k, v in first.as_dict().items() if k != "seconds"} == {
        k: v for k, v in again.as_dict().items() if k != "seconds"
    }
    assert first.scored_tokens == 140 and first.masked_tokens > 0
    assert 0.0 <= first.auc <= 1.0 and 0.0 <= first.discriminator_accuracy <= 1.0
    assert first.loss == pytest.approx(first.generator_loss + 50.0 * first.discriminator_loss)
    assert pair.training  # the caller's mode comes back


def test_checkpoint_folders_load_with_stock_transformers(tmp_path: Path, tiny_data: Path) -> None:
    from transformers import (
        AutoModel,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        ElectraForMaskedLM,
        ElectraModel,
        pipeline,
    )

    from mlmtrain.data.tokenizer import load_tokenizer
    from mlmtrain.train.checkpoint import save_checkpoint

    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    vocab = VocabInfo.from_tokenizer(tokenizer)
    cfg = load_config(None, [*TINY, f"train.run_dir={tmp_path / 'run'}"])
    torch.manual_seed(0)
    pair = build_electra(cfg, vocab)
    folder = save_checkpoint(tmp_path / "run", 3, pair, tokenizer, cfg, {"step": 3})
    assert isinstance(AutoModel.from_pretrained(folder), ElectraModel)
    classifier = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=3)
    assert classifier.classifier.out_proj.out_features == 3
    assert AutoModelForTokenClassification.from_pretrained(folder, num_labels=5).config.num_labels == 5
    torch.testing.assert_close(
        AutoModel.from_pretrained(folder).embeddings.word_embeddings.weight,
        pair.discriminator.electra.embeddings.word_embeddings.weight,
    )
    generator_folder = folder / GENERATOR_DIR
    assert isinstance(AutoModel.from_pretrained(generator_folder), ElectraModel)
    assert isinstance(ElectraForMaskedLM.from_pretrained(generator_folder), ElectraForMaskedLM)
    predictions = pipeline("fill-mask", model=str(generator_folder))("the quick [MASK] fox")
    assert len(predictions) == 5
    # reloaded for a resume: the same weights, the embedding shared again
    reloaded = load_electra(read_model_folder(folder), cfg, vocab, {})
    assert reloaded.generator.electra.embeddings is reloaded.discriminator.electra.embeddings
    for (name, before), after in zip(pair.state_dict().items(), reloaded.state_dict().values(), strict=True):
        torch.testing.assert_close(before, after, msg=name)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["electra.temperature=2"], "electra.temperature is set but train.objective is 'mlm'"),
        (["train.objective=electra", "electra.generator_size=1.5"], "may not be larger than the discriminator"),
        (["train.objective=electra", "electra.temperature=0"], "electra.temperature must be > 0"),
        (["train.objective=bert"], "train.objective must be one of mlm, electra, "),
    ],
)
def test_config_refusals(overrides: list[str], message: str) -> None:
    import mlmtrain

    with pytest.raises(UserError, match=message):
        mlmtrain.load_config(None, overrides)  # as the commands read a config: the objective's rules included


def test_mlm_config_saves_without_the_electra_section() -> None:
    assert "electra" not in load_config(None).to_dict()
    saved = load_config(None, ["train.objective=electra"]).to_dict()
    assert saved["electra"]["discriminator_weight"] == 50.0


def test_mlm_objective_is_the_mean_over_selected_tokens() -> None:
    objective = objective_of(load_config(None), VOCAB)
    batch = batches(1)[0]
    selected = int((batch["labels"] != IGNORE_INDEX).sum())
    assert objective.counts(batch) == [selected]
    assert float(objective.loss(torch.tensor(12.0), [selected])) == pytest.approx(12.0 / selected)
    assert objective.loss_terms(torch.tensor(12.0), [selected]) == {}


@pytest.mark.parametrize(
    "options",
    [
        ["--set", "electra.temperature=2"],
        ["--set", "train.objective=electra", "--set", "electra.generator_size=2"],
    ],
)
def test_config_refusals_are_one_line_exit_2(options: list[str], capsys: pytest.CaptureFixture) -> None:
    from ..helpers import assert_one_error_line, run_cli

    code, lines = run_cli(capsys, "config", "show", *options)
    assert code == 2
    assert_one_error_line(lines, "mlmtrain: config: electra.")


def test_the_dense_generator_head_gives_the_sparse_heads_loss() -> None:
    batch = batches(1)[0]
    sums = []
    for sparse in ("true", "false"):
        pair = pair_of(f"model.sparse_head={sparse}")
        torch.manual_seed(3)  # the same draws for the replacements
        sums.append(pair(**batch).detach())
    torch.testing.assert_close(sums[0], sums[1], rtol=1e-5, atol=1e-5)
