"""What every layer leans on: the file-system rules (replace or delete only what mlmtrain wrote), durability,
processes under torchrun, the Hub, progress lines and experiment trackers."""
