"""Runnable examples of the Python layer (`make run` runs train_gpt2)."""
