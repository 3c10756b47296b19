"""mlmtrain's speed claims, measured in one run: against the Hugging Face recipe, against the bare-step limit,
in time to a target perplexity, and in how cost grows with sequence length and model size.

1. throughput: steady-state training tokens/s of `mlmtrain pretrain` against `transformers.Trainer` +
   `DataCollatorForLanguageModeling` + `BertForMaskedLM` on text grouped into blocks as run_mlm.py does it; where
   ours masks another share than the HF recipe's 15 %, ours at 15 % too (the same objective: the judged ratio),
   and each side's own FLOPs a token and share of the limit (where a ratio comes from).
2. limit: tokens/s of the loop's own `train_step` (forward with the sparse head, backward, clip, lr, AdamW) on
   micro-batches fetched beforehand; ours / limit is what the loop and the data path leave of it.
3. quality: training seconds (evaluation excluded) each side needs to reach a target validation perplexity, from
   the same initial weights, each with its default recipe, scored by one evaluator (`evaluate_blocks`, fixed masks).
4. tuned: as quality, but the HF recipe gets our learning rate, warm-up and schedule (over its time budget), and
   the target is the perplexity it reaches in the budget.
5. recipe: both sides with OUR hyperparameters for the same steps, validation perplexity by step (per step, our
   sparse head, masking and loop must learn at least as well as the recipe).
6. precision: ours in fp32 and in bf16 for the same steps and seed: the speed-up, and perplexity within ~2 %.
7. recipes: the classic BERT recipe, the fast recipe (FAST_RECIPE) and the HF recipe given our schedule at equal wall
   time: validation perplexity on the classic 15 % masks, and the downstream probe where `mlmtrain probe` exists.
8. growth: tokens/s and peak memory of the bare step for several seq_len and model sizes.
9. electra (on request, not in the default list): MLM and ELECTRA models of the same encoder size, from the same
   tokenizer and token store, each pretrain for --downstream-budget seconds; then each, and the untrained
   encoder, is fine-tuned on --task as `mlmtrain probe` does, with identical settings over --seeds seeds: test
   accuracy mean with its 95 % interval (Student's t over seeds), and each objective's tokens/s.
10. downstream (only on request: it runs for an hour on 2 CPU cores): from the same initial weights, ours and the HF
   recipe (our lr, warm-up and schedule, stretched over the budget) each pretrain for --downstream-budget seconds;
   then both and the untrained initial model are fine-tuned alike (`mlmtrain probe`) on a labeled task for --seeds
   seeds and scored on its test split.
11. objectives (on request): MLM, MLM+NSP, MLM+SOP and ELECTRA (its recipe as in 9), the same encoder size on the
   same tokenizer and token store, from the same seed, each pretrain for --flops-budget training FLOPs
   (train.max_flops); each, and the untrained encoder, is fine-tuned over --seeds seeds on --task (single text) and on
   --pair-task (sentence pairs, scripts/make_pair_task.py): test accuracy with its 95 % interval per objective and
   task, and each objective minus MLM, paired seed by seed.

Every contestant runs in a process of its own (its own allocator and peak memory) and is timed the same way: wall
time from the end of warm-up step k to the end of the last step n, tokens/s = (tokens_n - tokens_k) / (t_n - t_k).
Rounds interleave the contestants, rotating who goes first, so slow drift of the machine hits all alike.

The modules: `main` (the run), `args` (the command line), `setup` (what every contestant shares), `contestants`
(a contestant's process), `workers` (the HF recipe and the bare step inside theirs), `stats`, `cpu_limit` (a CPU's
matrix-product limit, measured, and the MFU against it), the sections in
`speed` (1, 2, 6, 8), `quality` (3, 4, 5, 7), `downstream` (9, 10) and `objectives` (11), `verdicts` (each figure
against its target) and `report` (the Markdown, a self-contained measurement file, and the files written).
"""
