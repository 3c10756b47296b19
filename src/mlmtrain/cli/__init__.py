"""The command line: the Typer commands (`app.py`), their argument checks and printing; no training logic."""
