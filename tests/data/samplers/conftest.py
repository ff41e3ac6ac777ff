"""make_samplers.py needs torch, transformers and accelerate: it is run in its own
environment, never imported by pytest (--doctest-modules)."""

collect_ignore = ["make_samplers.py"]
