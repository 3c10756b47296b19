"""mlmtrain: pretrain small BERT encoders with masked language modeling, from a YAML config."""

__version__ = "0.1.0"
