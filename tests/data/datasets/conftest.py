"""make.py needs the `datasets` library: it makes the fixtures, it is not a test."""

collect_ignore = ["make.py"]
