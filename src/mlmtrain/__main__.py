"""`python -m mlmtrain` runs the command-line tool (also under torchrun)."""

from mlmtrain.cli.app import main

main()
