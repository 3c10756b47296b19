"""Tests of mlmtrain.model: the BERT model and its heads, ELECTRA, sentence pairs."""
