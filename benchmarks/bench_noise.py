"""False spike events on pure noise, and recall on injected spikes: the calibrated robust
detector against the fixed ``z >= 3.5`` rule it replaced, measured in the same run.

Every series is ``loss_t = trend_t x (1 + s x e_t)`` over 10,000 logged steps, with the
smooth decay ``trend_t = 2 + 2 exp(-t / 1500)`` and a noise ``e`` of unit robust scale
(1.4826 x MAD = 1, so ``s`` is the noise in the detector's own units): Gaussian at
s = 1%, 2%, 5%; AR(1) ``e_t = phi e_(t-1) + sqrt(1 - phi²) eta_t`` at phi 0.5 and 0.9
(s = 2%); Student t with 3 df and Laplace (s = 2%).

1. False events: with no spike in the series, every event is false; the table gives
   events per 10,000 points for each family and seed, the mean, and the ratio old/new,
   with the new detector's own estimate ``expected_false_events`` beside it.
2. Recall: 20 single-point spikes of 2, 3 and 5 noise scales (``x_t += k s trend_t``),
   at least 200 steps apart, per family (one seed each), and 10%-40% spikes on the 1%
   Gaussian and AR(0.5) curves; a spike is found when an event contains its step.  The
   false events of those runs (events holding no injected step) are printed too.

    python benchmarks/bench_noise.py            # 5 seeds per family
    python benchmarks/bench_noise.py --seeds 2  # quicker
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from dflash_diag.spikes.detect import LEGACY_THRESHOLD, detect_spikes

N = 10_000
#: name -> (kind, noise scale s, parameter)
FAMILIES: dict[str, tuple[str, float, float]] = {
    "gaussian 1%": ("gaussian", 0.01, 0.0),
    "gaussian 2%": ("gaussian", 0.02, 0.0),
    "gaussian 5%": ("gaussian", 0.05, 0.0),
    "AR(1) 0.5, 2%": ("ar1", 0.02, 0.5),
    "AR(1) 0.9, 2%": ("ar1", 0.02, 0.9),
    "student t3, 2%": ("t", 0.02, 3.0),
    "laplace, 2%": ("laplace", 0.02, 0.0),
}
#: Robust scale (1.4826 x MAD) of the unit laws: t with 3 df, Laplace(0, 1).
T3_MAD_SD = 1.4826 * 0.7649
LAPLACE_MAD_SD = 1.4826 * np.log(2)


def noise(kind: str, param: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of a noise of unit robust scale (see the module docstring)."""
    if kind == "gaussian":
        return rng.standard_normal(n)
    if kind == "ar1":
        eta = rng.standard_normal(n) * np.sqrt(1 - param**2)
        e = np.empty(n)
        e[0] = rng.standard_normal()
        for i in range(1, n):
            e[i] = param * e[i - 1] + eta[i]
        return e
    if kind == "t":
        return rng.standard_t(param, n) / T3_MAD_SD
    return rng.laplace(0.0, 1.0, n) / LAPLACE_MAD_SD


def series(family: str, seed: int, n: int = N) -> tuple[np.ndarray, np.ndarray, float]:
    """``(trend, loss, s)`` of one family and seed."""
    kind, s, param = FAMILIES[family]
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    trend = 2 + 2 * np.exp(-t / 1500)
    return trend, trend * (1 + s * noise(kind, param, n, rng)), s


def table(loss: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"step": np.arange(loss.shape[0]), "loss": loss})


def false_events(families: list[str], seeds: int) -> None:
    """Events per 10,000 points on pure noise, old and new, per family and seed."""
    print(f"false spike events per {N:,} points of pure noise (no spike injected)")
    print(f"{'noise':<16} {'rule':<5} " + " ".join(f"s{i:<4}" for i in range(seeds))
          + "  mean   old/new  expected (new's estimate)")  # fmt: skip
    light: list[tuple[float, float]] = []  # (old, new) means of the Gaussian and AR rows
    for fam in families:
        old, new, expect = [], [], []
        for seed in range(seeds):
            _, loss, _ = series(fam, 1000 + seed)
            old.append(len(detect_spikes(table(loss), threshold=LEGACY_THRESHOLD).events))
            d = detect_spikes(table(loss))
            new.append(len(d.events))
            expect.append(d.expected_false_events)
        m_old, m_new = float(np.mean(old)), float(np.mean(new))
        ratio = f"{m_old / m_new:6.1f}x" if m_new > 0 else "   inf" if m_old else "     -"
        cells = " ".join(f"{v:<5d}" for v in old)
        print(f"{fam:<16} old   {cells}  {m_old:5.1f}")
        cells = " ".join(f"{v:<5d}" for v in new)
        print(f"{'':<16} new   {cells}  {m_new:5.1f}  {ratio}  {np.mean(expect):7.1f}")
        if FAMILIES[fam][0] in ("gaussian", "ar1"):
            light.append((m_old, m_new))
    if light:
        old_all, new_all = np.mean(light, axis=0)
        print(
            f"Gaussian and AR(1) noise: {old_all:.1f} false events per 10,000 points before, "
            f"{new_all:.2f} now ({old_all / max(new_all, 1e-9):.0f}x fewer; the bound is 1)"
        )


def inject(loss: np.ndarray, trend: np.ndarray, heights: np.ndarray, seed: int) -> np.ndarray:
    """Steps of ``len(heights)`` spikes ``x_t += heights_i trend_t``, >= 200 steps apart."""
    rng = np.random.default_rng(seed)
    slots = rng.permutation(np.arange(200, loss.shape[0] - 200, 200))[: heights.shape[0]]
    loss[slots] += heights * trend[slots]
    return np.sort(slots)


def recall_row(fam: str, heights: np.ndarray, seed: int) -> tuple[float, float, int, int]:
    """Recall (old, new) of spikes of ``heights`` (shares of the trend) and the false
    events (old, new) beside them."""
    trend, loss, _ = series(fam, 2000 + seed)
    at = inject(loss, trend, heights, seed)
    out: list[float] = []
    false: list[int] = []
    for thr in (LEGACY_THRESHOLD, None):
        events = [e for e in detect_spikes(table(loss), threshold=thr).events]
        hit = [any(e.start_step <= a <= e.end_step for e in events) for a in at]
        out.append(float(np.mean(hit)))
        false.append(sum(not any(e.start_step <= a <= e.end_step for a in at) for e in events))
    return out[0], out[1], false[0], false[1]


def recall(families: list[str]) -> None:
    """Recall on injected single-point spikes, old and new."""
    print("\nrecall on 20 injected single-point spikes (share found); false events beside")
    print(f"{'noise':<16} {'spike':<12} {'old':>5} {'new':>5}   false old/new")
    for fam in families:
        s = FAMILIES[fam][1]
        for k in (2.0, 3.0, 5.0):
            r_old, r_new, f_old, f_new = recall_row(fam, np.full(20, k * s), 0)
            print(f"{fam:<16} {f'{k:g} x noise':<12} {r_old:5.0%} {r_new:5.0%}   {f_old}/{f_new}")
    for fam in ("gaussian 1%", "AR(1) 0.5, 2%"):
        for rise in (0.10, 0.20, 0.40):
            r_old, r_new, f_old, f_new = recall_row(fam, np.full(20, rise), 1)
            print(f"{fam:<16} {f'+{rise:.0%}':<12} {r_old:5.0%} {r_new:5.0%}   {f_old}/{f_new}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per family (default 5)")
    parser.add_argument("--family", action="append", choices=list(FAMILIES), default=None)
    args = parser.parse_args()
    families = args.family or list(FAMILIES)
    false_events(families, args.seeds)
    recall(families)


if __name__ == "__main__":
    main()
