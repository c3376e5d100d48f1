"""A small Gaussian-process surrogate of log tok/s over the space's configs (pure; numpy only).

Used twice: in the search's last trials (``budget.refine_trials``: measure the unmeasured configs with the highest
upper confidence bound, which TPE's few samples near the top rarely hit exactly) and to rank the confirmation
candidates (one server start moves a whole measurement by ~2.5%, so the single best-measured config is a
winner's-curse pick; a config whose neighbours are also fast is the safer one).

Inputs are *effective* configs. Numeric knobs become coordinates in [0, 1] over the range the space allows (log2
when the range spans a factor of 4 or more: tree sizes, top-k); the drafter, the CUDA-graph setting and any
non-numeric knob make a config's *group*; configs of different groups are correlated by a factor ``rho``. The
kernel is a squared exponential with one length per coordinate; its hyperparameters (lengths, signal scale, noise
above a floor, ``rho``) are chosen by the log marginal likelihood over a fixed grid, evaluated in batches, so a fit
is deterministic and takes ~0.1 s at the sizes a study has (tens of observations).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from .config import TrialConfig

LENGTHS = (0.12, 0.25, 0.5, 1.0, 2.5)
NOISE_FACTORS = (1.0, 1.5, 2.5, 4.0)  # x the noise floor
SIGNAL = (0.5, 1.0, 2.0)  # x the sd of the observations
RHO = (0.0, 0.5, 0.9)
MAX_COMBOS_PER_BATCH = 256


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class Encoding:
    """How configs become (group, coordinates)."""

    knobs: tuple[str, ...]
    lows: tuple[float, ...]
    highs: tuple[float, ...]
    logs: tuple[bool, ...]

    @staticmethod
    def from_configs(configs: Sequence[TrialConfig]) -> Encoding:
        values: dict[str, list[float]] = {}
        for c in configs:
            for k, v in c.knobs:
                if _is_number(v):
                    values.setdefault(k, []).append(float(v))
        knobs, lows, highs, logs = [], [], [], []
        for k in sorted(values):
            lo, hi = min(values[k]), max(values[k])
            if hi <= lo:
                continue  # one value: not a coordinate
            log = lo > 0 and hi / lo >= 4
            knobs.append(k)
            lows.append(math.log2(lo) if log else lo)
            highs.append(math.log2(hi) if log else hi)
            logs.append(log)
        return Encoding(tuple(knobs), tuple(lows), tuple(highs), tuple(logs))

    def group(self, c: TrialConfig) -> Hashable:
        other = tuple((k, v) for k, v in c.knobs if k not in self.knobs and not _is_number(v))
        return (c.drafter, bool(c.cuda_graph), other)

    def coords(self, c: TrialConfig) -> list[float]:
        out = []
        for k, lo, hi, log in zip(self.knobs, self.lows, self.highs, self.logs, strict=True):
            v = c.knob(k)
            if not _is_number(v):
                out.append(0.5)
                continue
            x = float(v)
            x = math.log2(x) if log and x > 0 else x
            out.append((x - lo) / (hi - lo))
        return out


class Surrogate:
    """GP posterior of log tok/s given observations ``(config, log_tok_per_s)`` (repeats allowed)."""

    def __init__(
        self, encoding: Encoding, observations: Sequence[tuple[TrialConfig, float]], *, noise_floor: float = 0.025
    ) -> None:
        """``noise_floor``: the smallest sd of one start's log tok/s the fit may assume. Servers differ by ~2.5%
        from one start to the next (``pruning.start_noise`` / sqrt 2); without a floor, a few points near the top
        are explained as signal and the lucky start wins again."""
        if not observations:
            raise ValueError("a surrogate needs at least one observation")
        if not noise_floor > 0:
            raise ValueError(f"noise_floor must be > 0 but got {noise_floor}")
        self.noise_floor = noise_floor
        self.encoding = encoding
        self._groups: dict[Hashable, int] = {}
        self.X = np.array([encoding.coords(c) for c, _ in observations], dtype=float).reshape(len(observations), -1)
        self.g = np.array([self._group_id(encoding.group(c)) for c, _ in observations])
        y = np.array([v for _, v in observations], dtype=float)
        self.mean = float(y.mean())
        self.y = y - self.mean
        self.scale = float(y.std()) if len(y) > 1 and y.std() > 1e-6 else 0.05
        self.params = self._fit()
        lengths, signal, noise, rho = self.params
        K = self._kernel(self.X, self.g, self.X, self.g, lengths, signal, rho) + noise**2 * np.eye(len(y))
        self._L = np.linalg.cholesky(K + 1e-10 * np.eye(len(y)))
        self._alpha = np.linalg.solve(self._L.T, np.linalg.solve(self._L, self.y))

    def _group_id(self, group: Hashable) -> int:
        return self._groups.setdefault(group, len(self._groups))

    def _group_ids(self, configs: Sequence[TrialConfig]) -> np.ndarray:
        """Each config's group id: an observed group's own, else a new negative id per unobserved group (two
        unobserved groups are correlated by ``rho`` like any other two, not treated as one)."""
        unseen: dict[Hashable, int] = {}
        out = []
        for c in configs:
            group = self.encoding.group(c)
            gid = self._groups.get(group)
            out.append(gid if gid is not None else unseen.setdefault(group, -1 - len(unseen)))
        return np.array(out, dtype=int)

    @staticmethod
    def _kernel(
        A: np.ndarray,
        ga: np.ndarray,
        B: np.ndarray,
        gb: np.ndarray,
        lengths: Sequence[float],
        signal: float,
        rho: float,
    ) -> np.ndarray:
        d2 = np.zeros((len(A), len(B)))
        for j, ell in enumerate(lengths):
            d2 += ((A[:, j : j + 1] - B[:, j : j + 1].T) / ell) ** 2
        same = ga[:, None] == gb[None, :]
        return signal**2 * np.exp(-0.5 * d2) * np.where(same, 1.0, rho)

    def _fit(self) -> tuple[tuple[float, ...], float, float, float]:
        n, dims = self.X.shape
        combos = [
            (lengths, s * self.scale, noise, rho)
            for lengths in itertools.product(LENGTHS, repeat=dims)
            for s in SIGNAL
            for noise in (f * self.noise_floor for f in NOISE_FACTORS)
            for rho in (RHO if len(self._groups) > 1 else (0.0,))
        ]
        # the squared distances per coordinate, shared by every combo
        diffs = [(self.X[:, j : j + 1] - self.X[:, j : j + 1].T) ** 2 for j in range(dims)]
        same = self.g[:, None] == self.g[None, :]
        best, best_ll = combos[0], -math.inf
        for start in range(0, len(combos), MAX_COMBOS_PER_BATCH):
            batch = combos[start : start + MAX_COMBOS_PER_BATCH]
            K = np.empty((len(batch), n, n))
            for i, (lengths, signal, noise, rho) in enumerate(batch):
                d2 = sum((diffs[j] / ell**2 for j, ell in enumerate(lengths)), np.zeros((n, n)))
                K[i] = signal**2 * np.exp(-0.5 * d2) * np.where(same, 1.0, rho) + (noise**2 + 1e-10) * np.eye(n)
            L = np.linalg.cholesky(K)
            # log marginal likelihood: -0.5 y^T K^-1 y - sum(log diag L) - n/2 log(2 pi)
            z = np.linalg.solve(L, np.broadcast_to(self.y[:, None], (len(batch), n, 1)))[..., 0]
            ll = -0.5 * (z**2).sum(axis=1) - np.log(np.diagonal(L, axis1=1, axis2=2)).sum(axis=1)
            i = int(np.argmax(ll))
            if ll[i] > best_ll:
                best, best_ll = batch[i], float(ll[i])
        return best

    def predict(self, configs: Sequence[TrialConfig]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and sd of log tok/s at each config."""
        lengths, signal, _noise, rho = self.params
        X = np.array([self.encoding.coords(c) for c in configs], dtype=float).reshape(len(configs), -1)
        g = self._group_ids(configs)
        Ks = self._kernel(X, g, self.X, self.g, lengths, signal, rho)
        mean = self.mean + Ks @ self._alpha
        v = np.linalg.solve(self._L, Ks.T)
        var = np.maximum(signal**2 - (v**2).sum(axis=0), 1e-12)
        return mean, np.sqrt(var)

    def sample(self, configs: Sequence[TrialConfig], n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws (rows) of the latent log tok/s at ``configs`` (columns) from the joint posterior: what the
        model believes the true values could be together (neighbours move together), for questions about the
        maximum over many configs that per-config sds cannot answer."""
        lengths, signal, _noise, rho = self.params
        X = np.array([self.encoding.coords(c) for c in configs], dtype=float).reshape(len(configs), -1)
        g = self._group_ids(configs)
        Ks = self._kernel(X, g, self.X, self.g, lengths, signal, rho)
        mean = self.mean + Ks @ self._alpha
        v = np.linalg.solve(self._L, Ks.T)
        cov = self._kernel(X, g, X, g, lengths, signal, rho) - v.T @ v
        cov = (cov + cov.T) / 2
        try:
            root = np.linalg.cholesky(cov + 1e-9 * signal**2 * np.eye(len(configs)))
        except np.linalg.LinAlgError:  # near-identical configs: a square root that tolerates rank deficiency
            w, q = np.linalg.eigh(cov)
            root = q * np.sqrt(np.clip(w, 0.0, None))
        return mean[None, :] + rng.standard_normal((n, len(configs))) @ root.T


__all__ = ["Encoding", "Surrogate"]
