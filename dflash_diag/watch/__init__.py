"""``dflash-diag watch``: follow a growing training log and judge each spike as it comes.

- :mod:`.follow`: :class:`~.follow.Follower`, new complete lines of a file being
  written (missing, partial, truncated, replaced, gzip refused);
- :mod:`.causal`: :class:`~.causal.CausalDetector`, the robust detector decided point by
  point from the points before each one;
- :mod:`.verdict`: a spike's verdict from the points so far and a replayed (or
  recorded) composition;
- :mod:`.session`: :class:`~.session.WatchSession`, lines in, points and spike events out.

Nothing here prints: the command renders the events (:mod:`dflash_diag.render.watch`).
"""
