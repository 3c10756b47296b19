"""The models and what they are made of: BERT with the sparse MLM head, the one-pass head, ELECTRA, sentence
pairs, the saved pooler, AdamW and its schedules."""
