"""The command-line map: each Typer command parses its options and calls one typed function.

No logic lives here. User mistakes (`UserError`, bad arguments) become one line on stderr and
exit code 2; `--debug` keeps the traceback. Heavy modules are imported inside the commands so
that `--help` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import click
import typer

from mlmtrain import __version__
from mlmtrain.errors import UserError, interrupt_on_sigterm, redact, redact_library_messages
from mlmtrain.probe_settings import ProbeSettings, option_help

# What each option and argument takes, in words, for --help (Typer would otherwise show Python types: <list[str]>)
_PLACEHOLDERS = {
    "config": "FILE",
    "overrides": "KEY=VALUE",
    "tokenizer": "FOLDER|NAME",
    "resume": "auto|CHECKPOINT",
    "branch_from": "CHECKPOINT",
    "model": "FOLDER",
    "data": "SOURCE",
    "out": "FILE",
    "suite": "glue|FILE.yaml",
    "png": "FOLDER",
    "x": "steps|tokens|time|flops",
    "device": "auto|cpu|cuda[:N]",
    "save": "FOLDER",
    "repo": "NAME",
    "task": "TASK",
    "train": "FILE",
    "valid": "FILE",
    "test": "FILE",
    "run_dirs": "RUN_DIR",
    "text": "TEXT",
    "checkpoint": "CHECKPOINT",
    "checkpoints": "CHECKPOINT|RUN_DIR",
}


def _placeholder(param: click.Parameter) -> str:
    """The word --help shows for what `param` takes: the table's, else its choices, else by its type."""
    if param.name in _PLACEHOLDERS:
        return _PLACEHOLDERS[param.name]
    kind = getattr(param, "type", None) or getattr(param, "type_descriptor", None)  # click's, or Typer >= 0.20's
    choices = getattr(kind, "choices", None)
    if choices:
        return "|".join(str(choice) for choice in choices)
    named = getattr(kind, "name", None) or getattr(getattr(kind, "annotation", None), "__name__", "")
    return {"integer": "N", "int": "N", "float": "NUMBER", "path": "PATH", "Path": "PATH"}.get(named, "TEXT")


class _Command(typer.core.TyperCommand):
    """A command whose --help names what each option and argument takes in words, never in Python's types."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        for param in params:
            argument = param.param_type_name == "argument"  # click's Argument, or Typer's own copy of click's
            takes_value = argument or not getattr(param, "is_flag", False)
            if param.metavar is None and takes_value and param.name != "help":
                param.metavar = _placeholder(param) + ("..." if getattr(param, "nargs", 1) == -1 else "")
            if argument and hasattr(param, "display_type_rich"):  # Typer >= 0.20 adds both
                param.display_type_rich = lambda ctx=None: ""  # no " <list[Path]>" after the name
                shown = param.metavar if param.required else f"[{param.metavar}]"  # RUN_DIR..., not {RUN_DIR}...
                param._usage_display_name = lambda shown=shown: shown
        return params


app = typer.Typer(
    help="Pretrain small BERT encoders with masked language modeling, from a YAML config.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
config_app = typer.Typer(help="Inspect configs.", no_args_is_help=True)
app.add_typer(config_app, name="config")

_state = {"debug": False}

ConfigOption = typer.Option(None, "--config", "-c", help="YAML config file.", show_default=False)
SetOption = typer.Option(
    [], "--set", "-s", help="Override one key, e.g. --set optim.lr=1e-3 (repeatable; values are YAML scalars)."
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mlmtrain {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    _state["debug"] = debug


def _load(config: Optional[Path], overrides: list[str]):
    from mlmtrain.tools.arguments import training_config

    return training_config(config, overrides)


@app.command(cls=_Command, short_help="Train the tokenizer and encode the corpus.")
def tokenize(
    config: Optional[Path] = ConfigOption,
    overrides: list[str] = SetOption,
    tokenizer: Optional[str] = typer.Option(
        None, "--tokenizer", help="Reuse this tokenizer folder (or hub name) instead of training one."
    ),
) -> None:
    """Train the tokenizer (tokenizer.kind) on the train split and encode train and validation into the token store."""
    from mlmtrain.tools.tokens import tokenize as run_tokenize

    cfg = _load(config, overrides)
    if tokenizer is not None:
        cfg.tokenizer.pretrained = tokenizer
    run_tokenize(cfg)


@app.command(cls=_Command, short_help="Pretrain or continue an encoder; write checkpoints.")
def pretrain(
    config: Optional[Path] = ConfigOption,
    overrides: list[str] = SetOption,
    resume: Optional[str] = typer.Option(
        None,
        "--resume",
        help="Continue a run: 'auto' (the newest complete checkpoint in run_dir) or a checkpoint folder.",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Start afresh in a run_dir that holds another run."),
    branch_from: Optional[str] = typer.Option(
        None,
        "--branch-from",
        help="Start a new run (a new train.run_dir) from another run's checkpoint: its weights, optimizer, step, data "
        "position and RNG; the source run is only read.",
    ),
) -> None:
    """Pretrain an encoder with dynamic masking (MLM, or ELECTRA with train.objective=electra); writes checkpoints
    to run_dir/checkpoints."""
    cfg = _load(config, overrides)  # a bad config fails before the slow imports
    from mlmtrain.train.loop import pretrain as run_pretrain

    run_pretrain(cfg, resume=resume, overwrite=overwrite, branch_from=branch_from)


@app.command(cls=_Command, name="eval-perplexity", short_help="Masked-LM perplexity and accuracy, fixed masks.")
def eval_perplexity(
    model: Path = typer.Option(
        ...,
        "--model",
        "-m",
        help="Masked-LM folder (a checkpoint of any masked-LM family; of an ELECTRA run: its generator).",
    ),
    data: Optional[str] = typer.Option(
        None,
        "--data",
        "-d",
        help="Text source: a path, glob, 'builtin:python-docs', 'builtin:python-docstrings', 'hf:NAME[/CONFIG]:SPLIT'.",
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", help="Take the validation source and masking settings from this config."
    ),
    overrides: list[str] = SetOption,
    seq_len: Optional[int] = typer.Option(
        None,
        "--seq-len",
        help="Block length; default: data.seq_len of --config (or --set) when it states one, else the model's "
        "training seq_len, else 128.",
    ),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the fixed masks (default: masking.eval_seed)."),
    batch_size: int = typer.Option(32, "--batch-size", help="Blocks per forward pass."),
    max_blocks: Optional[int] = typer.Option(None, "--max-blocks", help="Evaluate at most this many blocks."),
    pseudo: bool = typer.Option(False, "--pseudo", help="Pseudo-log-likelihood perplexity: every token masked once."),
    max_tokens: Optional[int] = typer.Option(
        None, "--max-tokens", help="With --pseudo: score at most this many tokens."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Masked-LM perplexity of a checkpoint on a text source, with fixed (seeded) masks."""
    from mlmtrain.cli.commands import run_eval_command

    run_eval_command(
        model=model,
        data=data,
        config=config,
        overrides=overrides,
        seq_len=seq_len,
        seed=seed,
        batch_size=batch_size,
        max_blocks=max_blocks,
        pseudo=pseudo,
        max_tokens=max_tokens,
        device=device,
        as_json=as_json,
    )


@app.command(cls=_Command, name="fill-mask", short_help="Top-k completions for each mask in a text.")
def fill_mask(
    model: Path = typer.Option(..., "--model", "-m", help="Masked-LM folder (of an ELECTRA run: its generator)."),
    text: Optional[str] = typer.Argument(
        None, help="Text with [MASK] (or the model's mask token); default: lines from stdin."
    ),
    top_k: int = typer.Option(5, "--top-k", "-k", help="Completions to show per mask."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
) -> None:
    """Top-k completions for each mask in TEXT, through transformers' fill-mask pipeline."""
    from mlmtrain.cli.commands import run_fill_mask_command

    run_fill_mask_command(model=model, text=text, top_k=top_k, device=device)


@app.command(cls=_Command, name="mask-demo", short_help="Show what the masking does to one text.")
def mask_demo(
    text: str = typer.Argument(..., help="The text to mask (encoded with [CLS] and [SEP], cut to data.seq_len)."),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", help="Take the masking settings, seed and tokenizer from this config."
    ),
    overrides: list[str] = SetOption,
    tokenizer: Optional[str] = typer.Option(
        None, "--tokenizer", help="Tokenizer folder or hub name (default: the config's, once `tokenize` built it)."
    ),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the masks (default: train.seed)."),
    samples: Optional[int] = typer.Option(
        None, "--samples", help="Also draw the masks K times: the observed 80/10/10 split and how often each is picked."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Show what MLM masking does to TEXT: the training collator's selected positions, their replacements and labels."""
    from mlmtrain.cli.commands import run_mask_demo_command

    run_mask_demo_command(
        as_json, text=text, config=config, overrides=overrides, tokenizer=tokenizer, seed=seed, samples=samples
    )


@app.command(cls=_Command, short_help="A run's curves and health checks as a page.")
def report(
    run_dirs: list[Path] = typer.Argument(..., help="Run folders (train.run_dir); several are overlaid."),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        "-o",
        help="HTML file to write (default: RUN_DIR/report.html; ./report.html for several runs).",
    ),
    png: Optional[Path] = typer.Option(None, "--png", help="Also write each plot as a PNG into this folder."),
    x: str = typer.Option("steps", "--x", help="x axis of the plots: steps, tokens, time or flops."),
    check: bool = typer.Option(
        False, "--check", help="Print the health checks instead of writing a page; exit 1 when one fails."
    ),
    overrides: list[str] = typer.Option(
        [], "--set", "-s", help="Change a health threshold, e.g. --set report.data_wait_share=0.2 (repeatable)."
    ),
) -> None:
    """One self-contained HTML page per run (or several overlaid): curves, summary, config differences, health."""
    from mlmtrain.report.page import check_runs, write_report

    if check and out is None and png is None:
        if check_runs(run_dirs, overrides):
            raise typer.Exit(1)
        return
    written = write_report(run_dirs, out=out, axis=x, png_dir=png, overrides=overrides)
    print(f"report: {written}", file=sys.stderr)
    if check and check_runs(run_dirs, overrides):
        raise typer.Exit(1)


def _probe_option(name: str) -> typer.models.OptionInfo:
    """The `probe` option that sets the setting `name` (--name, dashes for underscores): its default and help are
    ProbeSettings'."""
    return typer.Option(getattr(ProbeSettings, name), "--" + name.replace("_", "-"), help=option_help(name))


@app.command(cls=_Command, short_help="Score an encoder on a labeled task.")
def probe(
    model: str = typer.Option(
        ..., "--model", "-m", help="Encoder folder (e.g. RUN_DIR/checkpoints/latest) or hub name."
    ),
    task: Optional[str] = typer.Option(
        None, "--task", "-t", help="Folder with train/valid/test .jsonl/.csv/.parquet files, or hf:NAME[/CONFIG]."
    ),
    train: Optional[str] = typer.Option(None, "--train", help="Training examples file (overrides the task folder's)."),
    valid: Optional[str] = typer.Option(None, "--valid", help="Validation file; default: 10% of train held out."),
    test: Optional[str] = typer.Option(None, "--test", help="Test file (overrides the task folder's)."),
    mode: str = _probe_option("mode"),
    text_field: str = typer.Option("text", "--text-field", help="Field holding the text."),
    pair_field: Optional[str] = typer.Option(
        None, "--pair-field", help="Field of a pair's second text (text_a/text_b are found on their own)."
    ),
    label_field: str = typer.Option(
        "label", "--label-field", help="Field of the label: int/str classes, float: regression."
    ),
    epochs: int = _probe_option("epochs"),
    lr: float = _probe_option("lr"),
    batch_size: int = _probe_option("batch_size"),
    max_length: int = _probe_option("max_length"),
    seed: int = _probe_option("seed"),
    max_train_examples: Optional[int] = _probe_option("max_train_examples"),
    max_eval_examples: Optional[int] = _probe_option("max_eval_examples"),
    pooling: str = _probe_option("pooling"),
    baseline: bool = typer.Option(
        False, "--baseline", help="Also score the same architecture untrained (random init), same settings."
    ),
    save: Optional[Path] = typer.Option(None, "--save", help="Keep the fine-tuned model here (a new HF folder)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    suite: Optional[str] = typer.Option(
        None, "--suite", help="A scorecard: glue, or a .yaml list of tasks, each fine-tuned over several seeds."
    ),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="--suite: seeds per task, from --seed on (default 5)."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="--suite: the scorecard's JSON (default: scorecard.json in an mlmtrain checkpoint)."
    ),
    resume: bool = typer.Option(False, "--resume", help="--suite: finish an interrupted scorecard."),
) -> None:
    """Judge an encoder by a labeled task: fine-tune it (or fit a linear probe) and score the test split; or, with
    --suite, by a scorecard of tasks."""
    from mlmtrain.cli.probe_command import run_probe_command, run_suite_command
    from mlmtrain.evaluate.tasks import TaskFields

    settings = ProbeSettings(
        mode=mode,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        max_length=max_length,
        seed=seed,
        pooling=pooling,
        max_train_examples=max_train_examples,
        max_eval_examples=max_eval_examples,
        progress=True,
    )
    fields = TaskFields(text_field, pair_field, label_field)
    if suite is not None:
        given = {"--task": task, "--train": train, "--valid": valid, "--test": test, "--save": save}
        given.update(
            {"--baseline": baseline or None, "--text-field/--pair-field/--label-field": fields != TaskFields()}
        )
        run_suite_command(
            [flag for flag, value in given.items() if value not in (None, False)],
            model=model,
            suite=suite,
            settings=settings,
            seeds=seeds,
            out=out,
            resume=resume,
            device=device,
            as_json=as_json,
        )
        return
    run_probe_command(
        [
            flag
            for flag, value in (("--seeds", seeds), ("--out", out), ("--resume", resume))
            if value not in (None, False)
        ],
        model=model,
        task=task,
        train=train,
        valid=valid,
        test=test,
        fields=fields,
        settings=settings,
        baseline=baseline,
        save=save,
        device=device,
        as_json=as_json,
    )


@app.command(cls=_Command, short_help="Upload a checkpoint to the Hugging Face Hub.")
def push(
    checkpoint: Path = typer.Argument(..., help="Checkpoint folder, e.g. RUN_DIR/checkpoints/latest."),
    repo: str = typer.Option(..., "--repo", help="Hub repository: NAME (under your account) or ORG/NAME."),
    private: bool = typer.Option(
        False, "--private", help="Create the repository private (an existing one keeps its visibility)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the files that would go; upload nothing."),
) -> None:
    """Upload a checkpoint's model, tokenizer and model card to the Hugging Face Hub (never its training state)."""
    from mlmtrain.cli.push import run_push_command

    run_push_command(checkpoint, repo, private=private, dry_run=dry_run)


@app.command(cls=_Command, short_help="Average checkpoints' weights into a new model folder.")
def average(
    checkpoints: list[Path] = typer.Argument(
        ..., help="Checkpoint folders (RUN_DIR/checkpoints/step-N), or with --last one run folder.", show_default=False
    ),
    out: Path = typer.Option(
        ..., "--out", metavar="FOLDER", help="The new model folder (absent, empty, or one that average wrote)."
    ),
    last: Optional[int] = typer.Option(
        None, "--last", metavar="K", help="Average the K newest complete checkpoints of the one run folder named."
    ),
) -> None:
    """Write the mean of the weights of several checkpoints of one run (same shape, family and tokenizer) as a new
    Hugging Face model folder with the newest one's config and tokenizer; the checkpoints are only read."""
    from mlmtrain.cli.commands import run_average_command

    run_average_command(checkpoints, out, last)


@config_app.command(cls=_Command, name="show")
def config_show(config: Optional[Path] = ConfigOption, overrides: list[str] = SetOption) -> None:
    """Print the resolved config (file + overrides + defaults, model.init_from's shape and tokenizer) as YAML."""
    from mlmtrain.train.init_from import resolve_init_from

    cfg = resolve_init_from(_load(config, overrides), check_weights=False).cfg
    typer.echo(cfg.to_yaml(), nl=False)


@config_app.command(cls=_Command, name="fields")
def config_fields() -> None:
    """List every config key with its default (as YAML writes it), its meaning, the rule its value must meet and
    whether a phase may set it; then `phases:` and a phase's own keys."""
    from mlmtrain.config import PHASE_KEYS, describe_fields, describe_phases

    for key, default, help_text, check in [*describe_fields(), *describe_phases()]:
        rules = "; ".join(rule for rule in (check, "a phase may set it" if key in PHASE_KEYS else "") if rule)
        typer.echo(f"{key}: {default}" + (f"    ({rules})" if rules else "") + f"\n    {help_text}")


def _normalise_argv(argv: list[str]) -> list[str]:
    """A bare `--resume` (no value, or followed by another option) means `--resume auto`."""
    out = list(argv)
    if "probe" in out:  # probe's --resume is a flag
        return out
    for i, arg in enumerate(out):
        if arg == "--resume" and (i + 1 == len(out) or out[i + 1].startswith("-")):
            out.insert(i + 1, "auto")
            break
    return out


# Typer >= 0.20 vendors click (its errors derive from typer.TyperException); older ones use click itself.
_EXIT = (typer.Exit, click.exceptions.Exit)
_ABORT = (typer.Abort, click.exceptions.Abort, KeyboardInterrupt)
_USAGE = (click.ClickException,) + ((typer.TyperException,) if hasattr(typer, "TyperException") else ())


def _usage_hint(error: Exception, args: list[str]) -> str:
    """The fix for a usage error: `--set a=1 b=2` leaves b=2 as an extra argument (one --set per KEY=VALUE)."""
    if "unexpected extra argument" in error.format_message() and "--set" in args:  # type: ignore[attr-defined]
        return "; give --set before each KEY=VALUE: --set a.b=1 --set c.d=2"
    return " (see --help)"


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: run the app, turning user mistakes into one line and exit code 2."""
    args = _normalise_argv(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    redact_library_messages()  # a library's log and warning lines may quote URLs from the environment
    try:
        with interrupt_on_sigterm():  # every command: SIGTERM reads like Ctrl-C ("interrupted", exit 130)
            code = app(args=args, prog_name="mlmtrain", standalone_mode=False)
        if code == 130:  # Typer turns Ctrl-C (KeyboardInterrupt) into a returned 130 when standalone_mode is off
            raise KeyboardInterrupt
        if isinstance(code, int) and code:  # click hands back typer.Exit(code) as a return value here
            sys.exit(code)
    except UserError as error:
        if debug:
            raise
        print(f"mlmtrain: {redact(str(error))}", file=sys.stderr)  # a message may quote a URL from the environment
        sys.exit(2)
    except _EXIT as done:
        sys.exit(done.exit_code)
    except _ABORT:
        print("mlmtrain: interrupted", file=sys.stderr)
        sys.exit(130)
    except _USAGE as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # bare `mlmtrain`: show the help
            print(error.ctx.get_help())
            sys.exit(0)
        if debug:
            raise
        print(f"mlmtrain: argument: {redact(error.format_message())}{_usage_hint(error, args)}", file=sys.stderr)
        sys.exit(getattr(error, "exit_code", 2))
