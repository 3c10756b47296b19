"""Tests of mlmtrain.data: sources, tokenizer, token store, blocks, masking."""
