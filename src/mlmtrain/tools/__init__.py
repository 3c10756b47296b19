"""What each command does, as a function that returns its result and prints nothing: `cli/` parses arguments and
prints these results, `mlmtrain.api` returns them. Above `train/`: eval-perplexity autocasts as pretrain does and
tokenize holds the run folder's lock."""
