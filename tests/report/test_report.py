"""`mlmtrain report`: pages from real tiny runs, the health checks on crafted metrics, bad inputs, a browser."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mlmtrain.errors import UserError
from mlmtrain.report import health
from mlmtrain.report import page as report
from mlmtrain.report.rundata import load_run, read_metrics
from mlmtrain.train.loop import pretrain

# ---------------------------------------------------------------------------------------------
# Reading a page back


class Page(HTMLParser):
    """What a test needs from a report page: its figures (with their text) and all visible text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.figures: dict[str, dict[str, Any]] = {}
        self.text: list[str] = []
        self._figure: dict[str, Any] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "figure" and values.get("class") == "curve":
            self._figure = self.figures.setdefault(str(values["id"]), {"svg": 0, "text": []})
        elif tag == "svg" and self._figure is not None:
            self._figure["svg"] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "figure":
            self._figure = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._figure is not None:
            self._figure["text"].append(data)

    def says(self, *phrases: str) -> bool:
        joined = " ".join(" ".join(self.text).split())
        return all(phrase in joined for phrase in phrases)


def read_page(path: Path) -> Page:
    return Page(path.read_text(encoding="utf-8"))


def expected_curves(*run_dirs: Path) -> list[str]:
    runs = [load_run(path) for path in run_dirs]
    return [curve.slug for curve in report.curves_of(runs) if report.curve_keys(curve, runs)]


# ---------------------------------------------------------------------------------------------
# Real tiny runs


@pytest.mark.slow
def test_pretrain_writes_a_page_and_report_overlays_two_runs(tiny_config: Callable, tmp_path: Path) -> None:
    first = tmp_path / "lr-small"
    second = tmp_path / "lr-large"
    pretrain(tiny_config(**{"train.run_dir": str(first), "report.html": True}))
    pretrain(tiny_config(**{"train.run_dir": str(second), "optim.lr": 3e-3}))

    # pretrain refreshed first/report.html at its checkpoints (the last one includes the final evaluation)
    own = read_page(first / "report.html")
    assert set(own.figures) == set(expected_curves(first))
    assert own.says("lr-small", "Health checks", "step-5", "step-10")
    assert not (second / "report.html").exists()  # report.html: false

    out = tmp_path / "both.html"
    report.write_report([first, second], out=out, png_dir=tmp_path / "png")
    page = read_page(out)
    curves = expected_curves(first, second)
    logged = {"train-loss", "eval-loss", "eval-perplexity", "eval-accuracy", "learning-rate", "grad-norm", "data-wait"}
    assert logged <= set(curves)
    assert list(page.figures) == curves  # one figure per curve, in order
    for slug, figure in page.figures.items():
        assert figure["svg"] == 1, slug
        legend = " ".join(figure["text"])
        assert "lr-small" in legend and "lr-large" in legend, slug  # every run named in every plot
    assert page.says("Configuration differences", "optim.lr", "0.003")
    assert page.says("best validation loss", "tokens seen")
    pngs = sorted(p.stem for p in (tmp_path / "png").glob("*.png"))
    assert pngs == sorted(curves)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in (tmp_path / "png").glob("*.png"))

    # again, over its own files: allowed (it wrote them), and with another x axis
    report.write_report([first, second], out=out, axis="tokens", png_dir=tmp_path / "png")
    assert read_page(out).says("x axis: tokens")


@pytest.mark.slow
def test_report_command_line(tiny_config: Callable, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    pretrain(tiny_config(**{"train.run_dir": str(run_dir)}))
    command = [sys.executable, "-m", "mlmtrain", "report"]
    done = subprocess.run([*command, str(run_dir), "--x", "time"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert read_page(run_dir / "report.html").says("x axis: time")
    # a tiny run sees far fewer tokens than it has parameters: --check says so and exits 1
    done = subprocess.run([*command, "--check", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "FAIL tokens per parameter" in done.stdout and "train.max_steps" in done.stdout
    relaxed = [*command, "--check", str(run_dir), "--set", "report.tokens_per_param=0"]
    relaxed += ["--set", "report.data_wait_share=1"]  # no loader workers in tests: the wait share is high
    done = subprocess.run(relaxed, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout
    assert "FAIL" not in done.stdout


def test_skipped_nonfinite_steps_reach_the_metrics_and_the_check(tiny_config: Callable, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    absurd = {
        "train.run_dir": str(run_dir),
        "optim.lr": 1e6,
        "optim.warmup_steps": 0,
        "optim.grad_clip": 0,
        "train.max_steps": 50,
        "train.max_nonfinite": 2,
        "train.eval_every": 0,
    }
    with pytest.raises(UserError, match="non-finite"):
        pretrain(tiny_config(**absurd))
    verdicts = {v.check: v for v in health.run_checks(load_run(run_dir))}
    assert verdicts["non-finite steps"].status == health.FAIL
    assert "2 step(s) skipped" in verdicts["non-finite steps"].message


def test_tokenize_counts_exact_duplicate_documents(tiny_config: Callable, tmp_path: Path) -> None:
    from mlmtrain.data.store import tokenize_corpus

    (tmp_path / "src.txt").write_text("one two three\nfour five\none two three\none two three\nsix\n")
    cfg = tiny_config(
        **{
            "data.train": str(tmp_path / "src.txt"),
            "data.store": str(tmp_path / "store"),
            "tokenizer.path": str(tmp_path / "tok"),
            "tokenizer.vocab_size": 60,
            "tokenizer.min_frequency": 1,
        }
    )
    store = tokenize_corpus(cfg, quiet=True)
    meta = json.loads((store / "meta.json").read_text())
    assert meta["splits"]["train"]["documents"] == 5
    assert meta["splits"]["train"]["duplicates"] == 2
    assert meta["splits"]["validation"]["words"] > 0 and "unk_tokens" in meta["splits"]["validation"]


# ---------------------------------------------------------------------------------------------
# Crafted runs: every check fires on its problem and stays quiet on a healthy run


def healthy_spec() -> dict[str, Any]:
    """A run that should pass every check: smooth decay, low wait, evaluations improving, enough tokens."""
    rng = np.random.default_rng(0)
    steps = np.arange(10, 2010, 10)
    warmup, peak = 100, 1e-3
    lr = np.where(steps < warmup, peak * steps / warmup, peak * (2000 - steps) / (2000 - warmup))
    loss = 3.0 + 4.0 * np.exp(-steps / 400) + rng.normal(0, 0.02, len(steps))
    train = [
        {
            "step": int(s),
            "tokens": int(s) * 100_000,
            "loss": float(value),
            "lr": float(rate),
            "grad_norm": 1.0,
            "tokens_per_s": 50_000.0,
            "elapsed_s": float(s) * 2.0,
            "data_wait_share": 0.02,
        }
        for s, value, rate in zip(steps, loss, lr, strict=True)
    ]
    evals = [
        {"step": int(s), "tokens": int(s) * 100_000, "eval_loss": 3.1 + 4.0 * np.exp(-s / 400), "eval_acc": 0.5}
        for s in range(200, 2001, 200)
    ]
    for line in evals:
        line["eval_ppl"] = float(np.exp(line["eval_loss"]))
    return {
        "train": train,
        "evals": evals,
        "extra": [],
        "config": {"optim": {"warmup_steps": warmup}, "train": {"max_steps": 2000, "max_tokens": None}},
        "store": {
            "train": {"documents": 100_000, "tokens": 1_000_000_000, "duplicates": 100},
            "validation": {"documents": 100, "tokens": 10_000, "duplicates": 0, "words": 8_000, "unk_tokens": 3},
        },
        "parameters": 1_000_000,  # 2e8 planned tokens: 200 per parameter
    }


def write_run(folder: Path, spec: dict[str, Any]) -> Path:
    """A run folder as pretrain leaves it: metrics.jsonl, mlmtrain.yaml, a token store, a checkpoint's header."""
    folder.mkdir(parents=True)
    lines = sorted(spec["train"] + spec["evals"], key=lambda line: line["step"]) + spec["extra"]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (folder / "mlmtrain.yaml").write_text(yaml.safe_dump(spec["config"]))
    (folder / "tokens").mkdir()
    (folder / "tokens" / "meta.json").write_text(json.dumps({"format": 1, "splits": spec["store"]}))
    for step in (*spec.get("saved", ()), 2000):
        checkpoint = folder / "checkpoints" / f"step-{step}"
        checkpoint.mkdir(parents=True)
        header = json.dumps({"w": {"dtype": "F32", "shape": [spec["parameters"]], "data_offsets": [0, 0]}}).encode()
        (checkpoint / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
        (checkpoint / "COMPLETE").write_text("ok\n")
    return folder


def verdicts_of(folder: Path, **overrides: Any) -> dict[str, health.Verdict]:
    return {v.check: v for v in health.run_checks(load_run(folder), overrides)}


# The process signals itself once the page's temporary file is written, before it is renamed into place: the moment
# a real Ctrl-C can hit (a page of many curves, or PNGs, takes a while), made certain.
_CTRL_C_AMID_THE_WRITE = """
import os, pathlib, signal, sys
from mlmtrain.cli.app import main
signal.signal(signal.SIGINT, signal.default_int_handler)  # a test run started in the background ignores it
write_text = pathlib.Path.write_text
def interrupted(self, *args, **kwargs):
    written = write_text(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGINT)
    return written
pathlib.Path.write_text = interrupted
main(sys.argv[1:])
"""


@pytest.mark.slow
def test_ctrl_c_while_the_page_is_written_leaves_no_hidden_half_file(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", healthy_spec())
    before = sorted(path.name for path in run_dir.iterdir())
    command = [sys.executable, "-c", _CTRL_C_AMID_THE_WRITE, "report", str(run_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "mlmtrain: interrupted", done.stderr
    assert sorted(path.name for path in run_dir.iterdir()) == before  # no .report.html.tmp-PID, no page


def test_a_healthy_run_passes_every_check(tmp_path: Path) -> None:
    verdicts = verdicts_of(write_run(tmp_path / "run", healthy_spec()))
    assert len(verdicts) == len(health.CHECKS)
    assert {name: v.status for name, v in verdicts.items()} == {name: health.OK for name in verdicts}


def _scale_train(spec: dict[str, Any], key: str, value: Any) -> None:
    for line in spec["train"]:
        line[key] = value


def _spike(spec: dict[str, Any]) -> None:
    spec["train"][120]["loss"] *= 2.0


def _skipped(spec: dict[str, Any]) -> None:
    spec["extra"].append({"step": 2000, "tokens": 200_000_000, "nonfinite_skipped": 1})


def _nan_loss(spec: dict[str, Any]) -> None:
    spec["train"][50]["loss"] = "nan"


def _null_eval(spec: dict[str, Any]) -> None:
    spec["evals"][3]["eval_loss"] = None


def _diverge(spec: dict[str, Any]) -> None:
    for i, line in enumerate(spec["train"][150:]):
        line["loss"] = 3.5 + 0.05 * i


def _plateau(spec: dict[str, Any]) -> None:
    for line in spec["evals"][5:]:
        line["eval_loss"] = spec["evals"][4]["eval_loss"] + 0.01
    _scale_train(spec, "lr", 1e-3)  # a constant schedule: lr stays at its peak


def _overfit(spec: dict[str, Any]) -> None:
    spec["store"]["train"]["tokens"] = 20_000_000  # 10 passes over the data
    for i, line in enumerate(spec["evals"]):
        line["eval_loss"] = 3.3 + 0.1 * i


def _unk(spec: dict[str, Any]) -> None:
    spec["store"]["validation"]["unk_tokens"] = 500


def _long_words(spec: dict[str, Any]) -> None:
    spec["store"]["validation"]["words"] = 2_000


def _duplicates(spec: dict[str, Any]) -> None:
    spec["store"]["train"]["duplicates"] = 30_000


def _big_model(spec: dict[str, Any]) -> None:
    spec["parameters"] = 100_000_000


def _long_warmup(spec: dict[str, Any]) -> None:
    spec["config"]["optim"]["warmup_steps"] = 1500


PROBLEMS = {
    "data-bound": lambda spec: _scale_train(spec, "data_wait_share", 0.3),
    "loss spikes": _spike,
    "non-finite steps": _skipped,
    "non-finite loss": _nan_loss,
    "null validation loss": _null_eval,
    "divergence": _diverge,
    "plateau": _plateau,
    "overfitting": _overfit,
    "unknown tokens": _unk,
    "tokens per word": _long_words,
    "duplicate documents": _duplicates,
    "tokens per parameter": _big_model,
    "warm-up": _long_warmup,
}
CHECK_OF = {"non-finite loss": "non-finite steps", "null validation loss": "non-finite steps"}


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_each_check_fires_on_its_problem(tmp_path: Path, problem: str) -> None:
    spec = healthy_spec()
    PROBLEMS[problem](spec)
    verdicts = verdicts_of(write_run(tmp_path / "run", spec))
    check = CHECK_OF.get(problem, problem)
    assert verdicts[check].status == health.FAIL, verdicts[check]
    assert verdicts[check].fix  # a failing check names the fix
    others = {name: v.status for name, v in verdicts.items() if v.status == health.FAIL and name != check}
    assert not others  # and only that one fires


def test_a_growing_gap_while_validation_still_improves_is_not_overfitting(tmp_path: Path) -> None:
    """Ten passes over the data, training loss falling far below validation, but validation at its best at the
    last evaluation: the best checkpoint is the last, so nothing to fix (the quick start's case)."""
    spec = healthy_spec()
    spec["store"]["train"]["tokens"] = 20_000_000
    for line in spec["train"]:
        line["loss"] -= line["step"] / 1000  # the gap grows by 2 nats
    verdict = verdicts_of(write_run(tmp_path / "run", spec))["overfitting"]
    assert verdict.status == health.OK and "still at its best" in verdict.message, verdict
    spec["evals"][-1]["eval_loss"] += 0.05  # now the last evaluation is worse than the best
    verdict = verdicts_of(write_run(tmp_path / "worse", spec))["overfitting"]
    assert verdict.status == health.FAIL and "from its best, at step 1,800" in verdict.message, verdict


def _rising_at_the_end(spec: dict[str, Any], keep_best: bool, saved: tuple[int, ...]) -> None:
    """Ten passes, a growing gap, and a last evaluation worse than the best (step 1,800); `saved`: the steps whose
    checkpoints the run folder holds besides step-2000."""
    spec["store"]["train"]["tokens"] = 20_000_000
    for line in spec["train"]:
        line["loss"] -= line["step"] / 1000
    spec["evals"][-1]["eval_loss"] += 0.05
    spec["config"]["checkpoint"] = {"keep_best": keep_best}
    spec["saved"] = saved


@pytest.mark.parametrize(
    ("keep_best", "saved", "status"),
    [(True, (1800,), health.OK), (False, (1800,), health.FAIL), (True, (), health.FAIL)],
)
def test_overfitting_passes_only_when_the_run_kept_the_best_checkpoint(
    tmp_path: Path, keep_best: bool, saved: tuple[int, ...], status: str
) -> None:
    """The check's fix is to keep the best checkpoint: a run that did so (checkpoint.keep_best, and that step's
    checkpoint in its folder) passes, naming it; without it, or with the best evaluated between saves, it fails."""
    spec = healthy_spec()
    _rising_at_the_end(spec, keep_best, saved)
    verdict = verdicts_of(write_run(tmp_path / "run", spec))["overfitting"]
    assert verdict.status == status, verdict
    assert "from its best, at step 1,800" in verdict.message, verdict
    if status == health.OK:
        assert verdict.message.endswith("whose checkpoint the run kept: checkpoints/step-1800"), verdict
    elif keep_best:
        assert "checkpoint.save_every = train.eval_every" in verdict.fix, verdict
    else:
        assert "checkpoint.keep_best: true" in verdict.fix, verdict


def test_thresholds_come_from_the_run_config_and_the_command_line(tmp_path: Path) -> None:
    spec = healthy_spec()
    _scale_train(spec, "data_wait_share", 0.3)
    folder = write_run(tmp_path / "run", spec)
    assert verdicts_of(folder, data_wait_share=0.5)["data-bound"].status == health.OK
    spec["config"]["report"] = {"data_wait_share": 0.4}
    folder = write_run(tmp_path / "configured", spec)
    assert verdicts_of(folder)["data-bound"].status == health.OK
    assert verdicts_of(folder, data_wait_share=0.2)["data-bound"].status == health.FAIL  # the flag wins
    with pytest.raises(UserError, match="report.data_wait_share"):
        verdicts_of(folder, data_wait_share=2)
    with pytest.raises(UserError, match="report.KEY=VALUE"):
        health.parse_overrides(["optim.lr=1"])


def test_check_runs_prints_a_line_per_check_and_reports_failure(tmp_path: Path, capsys: Any) -> None:
    healthy = write_run(tmp_path / "good", healthy_spec())
    assert report.check_runs([healthy]) is False
    spec = healthy_spec()
    _long_warmup(spec)
    assert report.check_runs([healthy, write_run(tmp_path / "bad", spec)]) is True
    out = capsys.readouterr().out
    assert "good: 0 of 11 checks fail" in out and "bad: 1 of 11 checks fail" in out
    assert "FAIL warm-up" in out and "optim.warmup_steps" in out


# ---------------------------------------------------------------------------------------------
# Bad inputs


def test_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a run folder"):
        report.write_report([tmp_path / "empty"])
    with pytest.raises(UserError, match="not a folder"):
        report.check_runs([tmp_path / "missing"])


def test_empty_metrics_give_a_page_that_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("")
    page = read_page(report.write_report([folder]))
    assert not page.figures
    assert page.says("holds no metric lines yet", "Not logged by this run")
    assert report.check_runs([folder]) is False  # nothing to judge is not a failure


def test_truncated_and_garbled_lines_are_skipped_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    good = [json.dumps({"step": s, "tokens": s * 10, "loss": 5.0 - s * 0.1}) for s in range(1, 6)]
    path.write_text("\n".join(good[:2] + ["{garbage", '["a list"]'] + good[2:]) + '\n{"step": 6, "tokens": 6')
    series, notes = read_metrics(path)
    assert list(series["loss"].step) == [1, 2, 3, 4, 5]
    assert any("last line" in n and "incomplete" in n for n in notes)
    assert any("2 unreadable line(s)" in n and "line 3, 4" in n for n in notes)


def test_a_resumed_run_keeps_the_newer_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": s, "loss": 9.0} for s in (1, 2, 3, 4)] + [{"step": s, "loss": 1.0} for s in (3, 4, 5)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    series, _ = read_metrics(path)
    assert list(series["loss"].step) == [1, 2, 3, 4, 5]
    assert list(series["loss"].value) == [9.0, 9.0, 1.0, 1.0, 1.0]


def test_nonfinite_values_and_no_evaluation(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    values = [4.0, "nan", None, "inf", 3.0, "-inf", 2.5]
    lines = [{"step": i + 1, "tokens": 100 * (i + 1), "loss": v, "grad_norm": v} for i, v in enumerate(values)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    loss = load_run(folder).series["loss"]
    assert np.isnan(loss.value[1]) and np.isnan(loss.value[2]) and np.isinf(loss.value[3])
    page = read_page(report.write_report([folder], axis="tokens"))
    assert set(page.figures) == {"train-loss", "grad-norm"}
    assert page.says("no validation evaluation logged", "non-finite loss value")


@pytest.mark.parametrize("value", ["nan", "inf", None])
@pytest.mark.parametrize("counted_before", [False, True], ids=["alone", "after-a-count"])
def test_a_nonfinite_skipped_count_fails_the_check_without_a_traceback(
    tmp_path: Path, capsys: Any, value: str | None, counted_before: bool
) -> None:
    from ..helpers import run_cli

    spec = healthy_spec()
    if counted_before:
        spec["extra"].append({"step": 1000, "tokens": 100_000_000, "nonfinite_skipped": 2})
    spec["extra"].append({"step": 2000, "tokens": 200_000_000, "nonfinite_skipped": value})
    folder = write_run(tmp_path / "run", spec)
    verdict = verdicts_of(folder)["non-finite steps"]
    assert verdict.status == health.FAIL and "1 non-finite nonfinite_skipped value(s)" in verdict.message
    assert ("2 step(s) skipped" in verdict.message) == counted_before
    code, lines = run_cli(capsys, "report", "--check", str(folder))
    assert code == 1 and not lines
    read_page(report.write_report([folder]))


def test_a_page_replaces_only_its_own_files(tmp_path: Path, capsys: Any) -> None:
    folder = write_run(tmp_path / "run", healthy_spec())
    foreign = tmp_path / "notes.html"
    foreign.write_text("<html>my notes</html>")
    with pytest.raises(UserError, match="not written by mlmtrain report"):
        report.write_report([folder], out=foreign)
    assert foreign.read_text() == "<html>my notes</html>"
    (tmp_path / "png").mkdir()
    (tmp_path / "png" / "train-loss.png").write_bytes(b"someone's figure")
    (tmp_path / "png" / "probe.png").write_bytes(b"someone else's figure")  # a curve this run did not log
    with pytest.raises(UserError, match="not written by mlmtrain report"):
        report.write_report([folder], out=tmp_path / "page.html", png_dir=tmp_path / "png")
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["probe.png", "train-loss.png"]  # none written
    assert not (tmp_path / "page.html").exists()
    (tmp_path / "png" / "train-loss.png").unlink()
    report.write_report([folder], out=tmp_path / "page.html", png_dir=tmp_path / "png")
    assert (tmp_path / "png" / "probe.png").read_bytes() == b"someone else's figure"
    assert (tmp_path / "png" / "train-loss.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(UserError, match="--x"):
        report.write_report([folder], axis="epochs")
    (folder / "report.html").write_text("<html>mine</html>")
    live = report.LiveReport(folder)  # what pretrain calls at each checkpoint: warns once, overwrites nothing
    live.refresh()
    live.refresh()
    assert (folder / "report.html").read_text() == "<html>mine</html>"
    assert capsys.readouterr().err.count("not written by mlmtrain report") == 1


@pytest.mark.parametrize(
    "option, target, needles",
    [
        ("--png", "afile/figs", ["--png", "lies under", "which is a file"]),
        ("--out", "/proc/r.html", ["--out", "/proc", "cannot write"]),
        ("--out", "full-disk/r.html", ["r.html", "No space left on device"]),
    ],
    ids=["png-under-a-file", "out-in-proc", "out-on-a-full-disk"],
)
def test_an_out_or_png_that_cannot_be_written_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, option: str, target: str, needles: list[str]
) -> None:
    from ..helpers import assert_one_error_line, run_cli

    folder = write_run(tmp_path / "run", healthy_spec())
    (tmp_path / "afile").write_text("mine\n")
    (tmp_path / "full-disk").mkdir()
    if target.startswith("full-disk"):
        real_write_text = Path.write_text

        def full_disk(self: Path, *args: Any, **kwargs: Any) -> int:
            if self.parent.name == "full-disk" and "r.html" in self.name:  # the page, not the writability test
                real_write_text(self, "<html>half")
                raise OSError(28, "No space left on device")
            return real_write_text(self, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", full_disk)
    code, lines = run_cli(capsys, "report", str(folder), option, str(tmp_path / target))
    assert code == 2
    assert_one_error_line(lines, *needles)
    assert (tmp_path / "afile").read_text() == "mine\n"
    assert not (folder / "report.html").exists() and os.listdir(tmp_path / "full-disk") == []


def test_probe_scores_get_one_figure_and_a_row_each(tmp_path: Path) -> None:
    spec = healthy_spec()
    spec["extra"] = [
        {"step": s, "tokens": s * 100_000, "probe_acc": 0.5 + s / 10_000, "probe_f1": 0.4, "probe_seconds": 3.0}
        for s in (500, 1000, 1500, 2000)
    ]
    folder = write_run(tmp_path / "run", spec)
    page = read_page(report.write_report([folder]))
    legend = " ".join(page.figures["probe"]["text"])
    assert "probe_acc" in legend and "probe_f1" in legend and "probe_seconds" not in legend
    assert page.says("best probe_acc", "0.7000 (step 2,000)")


def test_runs_of_the_same_folder_name_are_told_apart(tmp_path: Path) -> None:
    first = write_run(tmp_path / "a" / "run", healthy_spec())
    second = write_run(tmp_path / "b" / "run", healthy_spec())
    page = read_page(report.write_report([first, second], out=tmp_path / "page.html"))
    assert " ".join(page.figures["train-loss"]["text"]).count("a/run") == 1
    assert page.says("The runs share every configuration key")


def test_without_matplotlib_report_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    folder = write_run(tmp_path / "run", healthy_spec())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(UserError, match=r"pip install 'mlmtrain\[report\]'"):
        report.write_report([folder])
    assert report.check_runs([folder]) is False  # the checks need no matplotlib
    live = report.LiveReport(folder)
    live.refresh()
    live.refresh()
    err = capsys.readouterr().err
    assert err.count("report.html not written") == 1  # said once, not at every checkpoint
    assert not (folder / "report.html").exists()


def test_a_failing_live_report_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    folder = write_run(tmp_path / "run", healthy_spec())

    def broken(*args: Any, **kwargs: Any) -> str:
        raise RuntimeError("a plotting bug")

    monkeypatch.setattr(report, "build_page", broken)
    report.LiveReport(folder).refresh()
    assert "a plotting bug" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# A real browser


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.mark.slow
@pytest.mark.skipif(_browser() is None, reason="no Chromium on this machine (apt-get install chromium to run this)")
def test_the_page_renders_in_a_headless_browser(tmp_path: Path) -> None:
    from matplotlib.image import imread

    page = report.write_report([write_run(tmp_path / "run", healthy_spec())], out=tmp_path / "page.html")
    shot = tmp_path / "shot.png"
    command = [
        str(_browser()),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1200,3000",
        f"--screenshot={shot}",
        page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert shot.is_file(), done.stderr
    pixels = imread(str(shot))[..., :3]
    drawn = (pixels.min(axis=2) < 0.9).mean()  # share of pixels that are not (near) white
    colours = len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert drawn > 0.02, f"the screenshot is almost blank ({drawn:.2%} drawn)"
    assert colours > 20  # text, tables and coloured curves, not a flat error page


def test_a_page_or_its_pngs_inside_a_checkpoint_are_refused(finished_run: Path, capsys: Any) -> None:
    """A checkpoint holds what its save recorded: a page or PNG written into one (also through a link) would make it
    the user's, kept by keep-last and refused by --overwrite. One line; outside the checkpoints, the page is written."""
    from ..helpers import assert_one_error_line, run_cli, snapshot

    checkpoints = finished_run / "checkpoints"
    before = snapshot(checkpoints)
    for option, target in (("--out", checkpoints / "latest" / "r.html"), ("--png", checkpoints / "step-2" / "figs")):
        code, lines = run_cli(capsys, "report", str(finished_run), option, str(target))
        assert code == 2, lines
        assert_one_error_line(lines, f"{option} {target}", f"lies inside the checkpoints of {finished_run}")
    assert snapshot(checkpoints) == before
    code, lines = run_cli(capsys, "report", str(finished_run), "--out", str(finished_run / "r.html"))
    assert code == 0, lines
    assert (finished_run / "r.html").is_file()


# ---------------------------------------------------------------------------------------------
# A run of phases over a data mixture, written by hand in the formats pretrain writes


def phased_spec() -> dict[str, Any]:
    """The healthy run in three phases: stable (steps 1-1200, blocks of 128, 30 % masks), long (to 1600, blocks of
    512: twice the tokens a step, its losses 1.6x higher), decay (to 2000, 15 % masks, lower losses); two sources
    drawn 70/30, then 20/80 in the decay, their cumulative tokens in each training line (`source_tokens`)."""
    spec = healthy_spec()
    per_step = {"stable": 100_000, "long": 200_000, "decay": 100_000}
    shares = {
        "stable": {"web": 0.7, "books": 0.3},
        "long": {"web": 0.7, "books": 0.3},
        "decay": {"web": 0.2, "books": 0.8},
    }
    level = {"stable": 1.0, "long": 1.6, "decay": 0.8}
    tokens, drawn = 0, {"web": 0.0, "books": 0.0}
    at_step = {}
    for line in spec["train"]:
        phase = "stable" if line["step"] <= 1200 else "long" if line["step"] <= 1600 else "decay"
        tokens += 10 * per_step[phase]  # a line every 10 steps
        for source, share in shares[phase].items():
            drawn[source] += 10 * per_step[phase] * share
        length, rate = (512 if phase == "long" else 128), (0.15 if phase == "decay" else 0.3)
        line.update(tokens=tokens, loss=line["loss"] * level[phase], phase=phase, seq_len=length, mlm_probability=rate)
        line["source_tokens"] = dict(drawn)
        at_step[line["step"]] = line
    for line in spec["evals"]:
        train = at_step[line["step"]]
        line.update(tokens=train["tokens"], phase=train["phase"], seq_len=train["seq_len"])
        line["eval_loss"] *= level[train["phase"]] if train["phase"] == "long" else 1.0  # at another length
    spec["config"]["train"]["max_steps"] = None
    spec["config"]["phases"] = [
        {"name": "stable", "max_steps": 1200},
        {"name": "long", "max_tokens": 80_000_000, "set": {"data.seq_len": 512}},
        {"name": "decay", "max_steps": 400, "set": {"data.seq_len": 128, "masking.mlm_probability": 0.15}},
    ]
    spec["mixture"] = {"": {"web": 0.7, "books": 0.3}, "decay": {"web": 0.2, "books": 0.8}}
    return spec


def test_a_run_of_phases_is_judged_phase_by_phase_and_its_page_shows_the_phases_and_the_mixture(
    tmp_path: Path, capsys: Any
) -> None:
    spec = phased_spec()
    folder = write_run(tmp_path / "run", spec)
    (folder / "run.json").write_text(json.dumps({"mixture": spec["mixture"]}))
    run = load_run(folder)
    assert run.notes == []  # the phase names and source counts are read, not skipped as numbers that are not
    assert [(p.name, p.start_step, p.end_step, p.tokens, p.seq_lens) for p in run.phases] == [
        ("stable", 0, 1200, 120_000_000, [128]),
        ("long", 1200, 1600, 80_000_000, [512]),
        ("decay", 1600, 2000, 40_000_000, [128]),
    ]
    assert report.phase_boundaries(run, "steps") == [(1200.0, "long"), (1600.0, "decay")]
    assert report.phase_boundaries(run, "tokens") == [(120_000_000.0, "long"), (200_000_000.0, "decay")]
    # a jump in the loss where a phase begins is no spike and no divergence; plateau and warm-up count by phases
    verdicts = verdicts_of(folder)
    assert {name: v.status for name, v in verdicts.items()} == {name: health.OK for name in verdicts}, verdicts
    assert verdicts["warm-up"].message == "warm-up takes 100 of 2,000 steps (5.0%)"
    assert verdicts["tokens per parameter"].message == "the run plans 240.0 tokens per parameter"
    assert report.check_runs([folder]) is False
    assert "not numbers" not in capsys.readouterr().out

    page = read_page(report.write_report([folder]))
    assert page.says("stable", "0 to 1,200", "120,000,000", "long", "1,200 to 1,600", "512", "decay", "0.15")
    rows = report.mixture_rows(run)
    assert rows[:2] == [
        ["stable", "web", "84,000,000", "70.0%", "70.0%"],
        ["stable", "books", "36,000,000", "30.0%", "30.0%"],
    ]
    assert rows[4:] == [
        ["decay", "web", "8,000,000", "20.0%", "20.0%"],
        ["decay", "books", "32,000,000", "80.0%", "80.0%"],
    ]
    assert page.says("data mixture", "tokens drawn", "target share")
    for slug in ("train-loss", "eval-loss", "learning-rate"):  # each curve marks where long and decay begin
        assert {"long", "decay"} <= set(page.figures[slug]["text"]), slug

    # the same losses judged as one phase: the jump where long begins is a spike, and the run diverged
    for line in spec["train"] + spec["evals"]:
        line.pop("phase")
    spec["config"].pop("phases")
    spec["config"]["train"]["max_steps"] = 2000
    flat = verdicts_of(write_run(tmp_path / "flat", spec))
    assert flat["loss spikes"].status == health.FAIL
