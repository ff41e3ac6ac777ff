"""Every name a package exports lazily (its ``_EXPORTS``) is really there: a module that
moved (``spikes.coverage`` became ``composition.ground``) must not leave a name that
fails only when someone imports it."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = ("dflash_diag", "dflash_diag.composition", "dflash_diag.spikes", "dflash_diag.schedule")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exported_name_resolves(package):
    mod = importlib.import_module(package)
    names = getattr(mod, "__all__", ())
    assert names
    for name in names:
        assert getattr(mod, name) is not None, f"{package}.{name}"
