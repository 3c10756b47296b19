"""From text to masked batches: text sources, the WordPiece tokenizer, the token store, packed blocks, masking."""
