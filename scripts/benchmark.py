"""mlmtrain's speed claims, measured in one run: against the Hugging Face recipe, against the bare-step limit,
in time to a target perplexity, and in how cost grows with sequence length and model size.

    python scripts/benchmark.py                                   # every section: mini, seq 128, batch 32
    python scripts/benchmark.py --quick                           # a smoke test: tiny sizes, a minute or two
    python scripts/benchmark.py --sections throughput,limit --size base --batch 256 --precision bf16
    python scripts/benchmark.py --sections recipes --fast-set masking.mlm_probability=0.4
    python scripts/benchmark.py --sections tuned --report-md docs/benchmarks/2026-12-01-tuned.md

The sections and how each is timed: scripts/bench/__init__.py; the code, by concern, in scripts/bench/.
Results: results/benchmark-<time>.json and .md (and --report-md's file); docs/benchmarks/methodology.md says what
each number means.
"""

import sys

from bench.main import main

if __name__ == "__main__":
    sys.exit(main())
