"""Shuffle conventions, reproduced exactly, and how they are seeded across epochs.

Every strategy shuffles through one primitive, :meth:`Shuffler.permutation`: ``perm =
permutation(n)`` and the shuffled list is ``[x[p] for p in perm]``.  For each convention
this is exactly what the library's own in-place shuffle of a length-``n`` list does,
because those shuffles move positions without looking at the values:

========================= ===========================================================
``--rng``                 equals
========================= ===========================================================
``python``                ``random.Random(seed).shuffle(x)`` (CPython's ``Lib/random.py``,
                          stable for int seeds across 3.6-3.13; ``Random(-s) == Random(s)``)
``numpy``                 ``numpy.random.default_rng(seed).permutation(n)`` (PCG64;
                          ``shuffle`` of a list is the same permutation)
``numpy-legacy``          ``numpy.random.RandomState(seed).permutation(n)`` (MT19937, the
                          frozen legacy stream that ``np.random.seed`` + ``np.random.shuffle``
                          use, as fairseq does)
``torch``                 ``torch.randperm(n, generator=torch.Generator().manual_seed(seed))``
                          on the CPU, replicated without torch (see :class:`TorchShuffler`)
========================= ===========================================================

Seeding (``--seeding``): ``once`` makes one shuffler for the whole run (its state carries
from one epoch's shuffles to the next, like ``random.seed(seed)`` before the epoch loop);
``per-epoch`` makes a fresh one seeded with ``seed + epoch`` every epoch (epochs counted
from 0, like ``DistributedSampler.set_epoch``); ``global`` (``--rng torch`` only) is torch's
global generator: one generator seeded by ``torch.manual_seed(seed)`` (the HF Trainer's
``set_seed``) for the whole run, from which each epoch's DataLoader iterator first draws its
64-bit base seed (``_BaseDataLoaderIter.__init__``, two 32-bit outputs; also with
``num_workers=0``) before the sampler draws.  A sampler without a generator of its own
draws from it: transformers' ``LengthGroupedSampler`` one ``randperm(n)``, torch's
``RandomSampler`` (and ``DataLoader(shuffle=True)``) a 64-bit seed for a fresh generator
(:meth:`TorchShuffler.random64`).  Checked against torch 2.13 (``tests/data/samplers``,
``num_workers=0``; worker processes seed from the base seed and do not draw from the main
process's generator).  Not modelled: ``persistent_workers=True``, whose iterator is made
once, so later epochs draw no base seed.

``loader`` (``--rng torch``, ``--strategy random``) is a DataLoader given a generator of
its own, ``DataLoader(shuffle=True, generator=torch.Generator().manual_seed(seed))``:
each epoch its iterator draws the base seed from that generator, then its
``RandomSampler`` draws ``randperm(n)`` from it and one more ``randperm(n)`` it keeps
nothing of (``RandomSampler.__iter__``'s tail, ``randperm(n)[:num_samples % n]``).
Nothing else draws from that generator, so every epoch follows from the seed, dropout
or not.  Checked against torch 2.13 (``tests/schedule/test_loader_generator.py``).
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Protocol

from ..errors import InputError

if TYPE_CHECKING:
    import numpy as np

_MASK32 = 0xFFFFFFFF


class Shuffler(Protocol):
    """A seeded source of permutations (one convention, one stream)."""

    def permutation(self, n: int) -> np.ndarray:
        """An int64 permutation of ``range(n)``, advancing the stream as the library does."""
        ...


class PythonShuffler:
    """``random.Random(seed)``: ``shuffle`` of ``list(range(n))``.

    >>> PythonShuffler(0).permutation(10).tolist()
    [7, 8, 1, 5, 3, 4, 2, 0, 9, 6]
    """

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def permutation(self, n: int) -> np.ndarray:
        import numpy as np

        from .pyshuffle import MAX_N, is_exact, shuffled_range

        # The same list and the same state as random.shuffle, bit for bit, vectorised
        # (:mod:`.pyshuffle`: about 3x faster), wherever that is checked to hold.
        if 1 < n <= MAX_N and is_exact():
            return shuffled_range(self.random, n)
        order = list(range(n))
        self.random.shuffle(order)
        return np.fromiter(order, dtype=np.int64, count=n)


class NumpyShuffler:
    """``numpy.random.default_rng(seed).permutation(n)``.

    >>> NumpyShuffler(0).permutation(10).tolist()
    [4, 6, 2, 7, 3, 5, 9, 0, 8, 1]
    """

    def __init__(self, seed: int) -> None:
        import numpy as np

        if seed < 0:
            raise InputError("--seed", f"numpy needs a seed of 0 or more, got {seed}", "")
        self.generator = np.random.default_rng(seed)

    def permutation(self, n: int) -> np.ndarray:
        import numpy as np

        return self.generator.permutation(n).astype(np.int64, copy=False)

    def shuffle(self, values: np.ndarray) -> None:
        """``values[:] = values[self.permutation(len(values))]``, in place: numpy's
        ``permutation(n)`` is ``shuffle`` of ``arange(n)``, and a shuffle moves
        positions whatever they hold, so the same draws and the same order (no index
        array, no gather)."""
        self.generator.shuffle(values)


class LegacyNumpyShuffler:
    """``numpy.random.RandomState(seed).permutation(n)`` (= ``np.random.seed(seed)`` then
    ``np.random.shuffle``).

    >>> LegacyNumpyShuffler(0).permutation(10).tolist()
    [2, 8, 4, 9, 1, 6, 7, 3, 0, 5]
    """

    def __init__(self, seed: int) -> None:
        import numpy as np

        if not 0 <= seed <= _MASK32:
            raise InputError("--seed", f"numpy-legacy needs a seed in 0..2**32-1, got {seed}", "")
        self.state = np.random.RandomState(seed)

    def permutation(self, n: int) -> np.ndarray:
        import numpy as np

        return self.state.permutation(n).astype(np.int64, copy=False)


def mt19937_init_genrand(seed: int) -> list[int]:
    """The 624-word MT19937 state of ``init_genrand(seed & 0xffffffff)`` (Matsumoto and
    Nishimura's reference seeding: ``mt[i] = 1812433253 * (mt[i-1] ^ (mt[i-1] >> 30)) + i``
    mod 2**32), which is how torch's CPU generator and ``RandomState(int)`` seed."""
    mt = [seed & _MASK32]
    for i in range(1, 624):
        prev = mt[-1]
        mt.append((1812433253 * (prev ^ (prev >> 30)) + i) & _MASK32)
    return mt


class TorchShuffler:
    """``torch.randperm(n, generator=torch.Generator().manual_seed(seed))`` on the CPU.

    torch's CPU generator is MT19937 seeded by ``init_genrand(seed & 0xffffffff)``;
    ``randperm_cpu`` (``aten/src/ATen/native/TensorFactories.cpp``, the path for
    ``n < 2**32 / 20``) is a forward Fisher-Yates drawing one raw 32-bit output per
    position: ``for i in 0..n-2: z = random() % (n - i); swap(r[i], r[i + z])``.  The raw
    stream comes from numpy's MT19937 bit generator loaded with that state, so the state
    carries across calls exactly as a reused torch generator's does.

    >>> TorchShuffler(0).permutation(10).tolist()
    [4, 1, 7, 5, 3, 9, 0, 8, 6, 2]
    """

    #: above this torch switches to a different algorithm (PR #143682, 2025)
    MAX_N = _MASK32 // 20

    def __init__(self, seed: int) -> None:
        import numpy as np

        self.bitgen = np.random.MT19937()
        self.bitgen.state = {
            "bit_generator": "MT19937",
            "state": {"key": np.array(mt19937_init_genrand(seed), dtype=np.uint32), "pos": 624},
        }

    def random64(self) -> int:
        """``torch.empty((), dtype=torch.int64).random_()`` on this generator: two 32-bit
        outputs ``hi, lo`` (``random64``, high word first), ``((hi << 32) | lo) % 2**63``.

        >>> TorchShuffler(0).random64()
        900450186894289455
        """
        hi, lo = (int(x) for x in self.bitgen.random_raw(2))
        return ((hi << 32) | lo) % (1 << 63)

    def skip_permutation(self, n: int) -> None:
        """Advance the stream as :meth:`permutation` of ``n`` does, keeping nothing."""
        if n > 1:
            self.bitgen.random_raw(n - 1)

    def permutation(self, n: int) -> np.ndarray:
        import numpy as np

        if n >= self.MAX_N:
            raise InputError(
                "--rng", f"torch's randperm for n >= {self.MAX_N} is not replicated (n={n})", ""
            )
        if n <= 1:
            return np.arange(n, dtype=np.int64)
        raw = self.bitgen.random_raw(n - 1)
        # z_i = raw_i % (n - i) is vectorised; the swaps depend on each other, so they
        # run in a plain loop over Python ints (faster than numpy scalar indexing).
        z = (raw % np.arange(n, 1, -1, dtype=np.uint64)).astype(np.int64)
        z += np.arange(n - 1, dtype=np.int64)
        r = list(range(n))
        for i, j in enumerate(z.tolist()):
            r[i], r[j] = r[j], r[i]
        return np.fromiter(r, dtype=np.int64, count=n)


_SHUFFLERS: dict[str, type] = {
    "python": PythonShuffler,
    "numpy": NumpyShuffler,
    "numpy-legacy": LegacyNumpyShuffler,
    "torch": TorchShuffler,
}


def shuffle_in_place(shuffler: Shuffler, values: np.ndarray) -> None:
    """``values[:] = values[shuffler.permutation(len(values))]`` (a 1-D array), by the
    shuffler's own in-place shuffle where it has one (:meth:`NumpyShuffler.shuffle`).

    >>> import numpy as np
    >>> a = np.array([10, 20, 30, 40])
    >>> shuffle_in_place(NumpyShuffler(0), a)
    >>> a.tolist() == np.array([10, 20, 30, 40])[NumpyShuffler(0).permutation(4)].tolist()
    True
    """
    own = getattr(shuffler, "shuffle", None)
    if own is not None:
        own(values)
    else:
        values[:] = values[shuffler.permutation(len(values))]


def make_shuffler(rng: str, seed: int) -> Shuffler:
    """A fresh shuffler of convention ``rng`` seeded with ``seed``.

    >>> make_shuffler("torch", 2**32 + 1).permutation(10).tolist()
    [5, 6, 1, 2, 0, 8, 9, 3, 7, 4]
    """
    cls = _SHUFFLERS.get(rng)
    if cls is None:
        raise InputError("--rng", f"unknown value {rng!r}", f"choose from {', '.join(_SHUFFLERS)}")
    shuffler: Shuffler = cls(seed)
    return shuffler


class EpochShufflers:
    """The shuffler each epoch uses under a seeding rule.

    ``once``: one shuffler seeded with ``seed``; ``for_epoch`` must then be asked for
    epochs 0, 1, 2, ... in order (the state carries).  ``per-epoch``: a new shuffler
    seeded with ``seed + epoch`` for each epoch, any order.  ``global`` and ``loader``: as
    ``once`` with torch's generator, after the DataLoader's base-seed draw of each epoch.

    >>> s = EpochShufflers("python", 0, "per-epoch")
    >>> s.for_epoch(1).permutation(4).tolist() == make_shuffler("python", 1).permutation(4).tolist()
    True
    """

    def __init__(self, rng: str, seed: int, seeding: str) -> None:
        if seeding not in ("once", "per-epoch", "global", "loader"):
            raise InputError(
                "--seeding",
                f"unknown value {seeding!r}",
                "choose from once, per-epoch, global, loader",
            )
        if seeding in ("global", "loader") and rng != "torch":
            what = "global generator" if seeding == "global" else "DataLoader's own generator"
            raise InputError("--seeding", f"'{seeding}' is torch's {what}", "use --rng torch")
        self.rng = rng
        self.seed = seed
        self.seeding = seeding
        self._once: Shuffler | None = make_shuffler(rng, seed) if seeding != "per-epoch" else None
        self._next_epoch = 0

    def for_epoch(self, epoch: int) -> Shuffler:
        if self._once is None:
            return make_shuffler(self.rng, self.seed + epoch)
        if epoch != self._next_epoch:
            # With one seed for the run, epoch e's order depends on every earlier shuffle.
            raise ValueError(f"seeding 'once' needs epochs in order; got {epoch}")
        self._next_epoch += 1
        if self.seeding in ("global", "loader") and isinstance(self._once, TorchShuffler):
            self._once.random64()  # the epoch's DataLoader iterator draws its base seed
        return self._once
