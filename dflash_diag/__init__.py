"""dflash-diag: is that loss spike your data pipeline or your optimizer?"""

from __future__ import annotations

__version__ = "0.1.0"
