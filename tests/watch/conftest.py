"""The ``slow`` mark: tests that run real processes for seconds (``-m "not slow"`` skips
them while working; CI runs them)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: runs subprocesses for several seconds")
