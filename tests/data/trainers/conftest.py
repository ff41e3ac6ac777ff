"""The training scripts here need torch, transformers, lightning...: they are run by
make.py in their own environment, never imported by pytest (--doctest-modules)."""

collect_ignore_glob = ["scripts/*.py"]
