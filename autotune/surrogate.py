"""A small Gaussian-process surrogate of log tok/s over the space's configs (pure; numpy only).

Used twice: in the search's last trials (``budget.refine_trials``: measure the unmeasured configs with the highest
upper confidence bound, which TPE's few samples near the top rarely hit exactly) and to rank the confirmation
candidates (one server start moves a whole measurement by ~2.5%, so the single best-measured config is a
winner's-curse pick; a config whose neighbours are also fast is the safer one).

Inputs are *effective* configs. Numeric knobs become coordinates in [0, 1] over the range the space allows (log2
when the range spans a factor of 4 or more: tree sizes, top-k); the drafter, the CUDA-graph setting and any
non-numeric knob make a config's *group*; configs of different groups are correlated by a factor ``rho``. The
kernel is a squared exponential with one length per coordinate, plus, where asked (``level_of``), a level shared
by the configs of one level group (e.g. one CUDA-graph setting); its hyperparameters (lengths, signal scale, noise
above a floor, ``rho``, the level's scale) are chosen by the log marginal likelihood over a fixed grid, evaluated in
batches, so a fit is deterministic and takes ~0.1 s at the sizes a study has (tens of observations).

Where every measured start reports its acceptance length, the search models log tok/s as log acceptance length
minus log seconds per round, one GP each (``FactoredSurrogate``, built by ``fit``): each factor is smooth and
monotone where their ratio is not, and acceptance does not depend on CUDA graphs (the same on 52 of 52 graphs
on/off twins of single-stream H200 runs, docs/gpu-runs/2026-12-03-h200-factored). With load levels it can: on an
H200 with 16 server slots a long draft's twins accepted 8.86 vs 9.29 tokens a round at one stream and 6.61 vs
10.24 at four (docs/gpu-runs/2026-12-03-h200-levels19), and the search does not factor there.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import PromptResult, TrialConfig

LENGTHS = (0.12, 0.25, 0.5, 1.0, 2.5)
NOISE_FACTORS = (1.0, 1.5, 2.5, 4.0)  # x the noise floor
SIGNAL = (0.5, 1.0, 2.0)  # x the sd of the observations
RHO = (0.0, 0.5, 0.9)
LEVEL = (0.0, 1.0, 2.0)  # x the sd of the observations: a level shared by the configs of one level group


@functools.cache
def _blas() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def one_blas_thread() -> Any:
    """A context in which BLAS runs one thread: the surrogate's matrices are a grid's size (~1,000), and BLAS's
    threads spin-waiting beside each small factorization cost more CPU than they save (scripts/bench_loop.py). In
    the process only: servers started from it keep their own threads."""
    return _blas().limit(limits=1, user_api="blas")


def _ids(keys: Sequence[Hashable], known: Mapping[Hashable, int]) -> np.ndarray:
    """Each key's id in ``known``, else a new negative id per unknown key (two unknown keys stay two)."""
    unseen: dict[Hashable, int] = {}
    return np.array([known[k] if k in known else unseen.setdefault(k, -1 - len(unseen)) for k in keys], dtype=int)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@dataclass(frozen=True)
class Encoding:
    """How configs become (group, coordinates)."""

    knobs: tuple[str, ...]
    lows: tuple[float, ...]
    highs: tuple[float, ...]
    logs: tuple[bool, ...]
    #: whether the CUDA-graph setting is part of a config's group (not for acceptance: graphs change how fast a
    #: step runs, not which tokens the drafter proposes or the target accepts)
    graph_groups: bool = True
    _hash: int = dataclasses.field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.knobs, self.lows, self.highs, self.logs, self.graph_groups)))

    def __hash__(self) -> int:  # hashed once: the caches below hash it with every config they are asked about
        return self._hash

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

    # both once per config (and equal encodings share them): every prediction over the grid asks ~1,000 configs

    @functools.lru_cache(maxsize=1 << 14)  # noqa: B019 (an encoding lives as long as a study's surrogates)
    def group(self, c: TrialConfig) -> Hashable:
        other = tuple((k, v) for k, v in c.knobs if k not in self.knobs and not _is_number(v))
        return (c.drafter, bool(c.cuda_graph) if self.graph_groups else None, other)

    @functools.lru_cache(maxsize=1 << 14)  # noqa: B019
    def coords(self, c: TrialConfig) -> tuple[float, ...]:
        out = []
        for k, lo, hi, log in zip(self.knobs, self.lows, self.highs, self.logs, strict=True):
            v = c.knob(k)
            if not _is_number(v):
                out.append(0.5)
                continue
            x = float(v)
            x = math.log2(x) if log and x > 0 else x
            out.append((x - lo) / (hi - lo))
        return tuple(out)


class Surrogate:
    """GP posterior of log tok/s given observations ``(config, log_tok_per_s)`` (repeats allowed)."""

    def __init__(
        self,
        encoding: Encoding,
        observations: Sequence[tuple[TrialConfig, float]],
        *,
        noise_floor: float = 0.025,
        level_of: Callable[[TrialConfig], Hashable] | None = None,
        prior_scale: float | None = None,
    ) -> None:
        """``noise_floor``: the smallest sd of one start's log tok/s the fit may assume. Servers differ by ~2.5%
        from one start to the next (``pruning.start_noise`` / sqrt 2); without a floor, a few points near the top
        are explained as signal and the lucky start wins again. ``prior_scale``: the signal's sd, fixed, instead of
        one the fit chooses from the observations' own spread (``MethodSurrogate``: a method with too few
        measurements of its own to say how its configs spread)."""
        if not observations:
            raise ValueError("a surrogate needs at least one observation")
        if not noise_floor > 0:
            raise ValueError(f"noise_floor must be > 0 but got {noise_floor}")
        self.noise_floor = noise_floor
        self.encoding = encoding
        self._groups: dict[Hashable, int] = {}
        self._level_of = level_of
        self._levels: dict[Hashable, int] = {}
        self.level = 0.0
        self._configs = [c for c, _ in observations]
        self.X = np.array([encoding.coords(c) for c, _ in observations], dtype=float).reshape(len(observations), -1)
        self.g = np.array([self._group_id(encoding.group(c)) for c, _ in observations])
        self.lv = np.array([self._levels.setdefault(self._level_key(c), len(self._levels)) for c, _ in observations])
        y = np.array([v for _, v in observations], dtype=float)
        self.mean = float(y.mean())
        self.y = y - self.mean
        self.scale = float(y.std()) if len(y) > 1 and y.std() > 1e-6 else 0.05
        self._signals: tuple[float, ...] = SIGNAL
        if prior_scale is not None:
            self.scale, self._signals = float(prior_scale), (1.0,)
        self.params, self.level = self._fit()
        lengths, signal, noise, rho = self.params
        K = self._cov(self.X, self.g, self.lv, self.X, self.g, self.lv) + noise**2 * np.eye(len(y))
        self._L = np.linalg.cholesky(K + 1e-10 * np.eye(len(y)))
        self._alpha = np.linalg.solve(self._L.T, np.linalg.solve(self._L, self.y))

    def _level_key(self, c: TrialConfig) -> Hashable:
        return None if self._level_of is None else self._level_of(c)

    def _level_ids(self, configs: Sequence[TrialConfig]) -> np.ndarray:
        """Each config's level group id: an observed one's, else a new negative id per unobserved level group."""
        if self._level_of is None:  # one level group, every config's
            return np.zeros(len(configs), dtype=int)
        return _ids([self._level_key(c) for c in configs], self._levels)

    def _cov(
        self, A: np.ndarray, ga: np.ndarray, la: np.ndarray, B: np.ndarray, gb: np.ndarray, lb: np.ndarray
    ) -> np.ndarray:
        """The kernel between two sets of configs (coordinates, group ids, level group ids)."""
        lengths, signal, _noise, rho = self.params
        K = self._kernel(A, ga, B, gb, lengths, signal, rho)
        if self.level:
            K = K + self.level**2 * (la[:, None] == lb[None, :])
        return K

    def _group_id(self, group: Hashable) -> int:
        return self._groups.setdefault(group, len(self._groups))

    def _group_ids(self, configs: Sequence[TrialConfig]) -> np.ndarray:
        """Each config's group id: an observed group's own, else a new negative id per unobserved group (two
        unobserved groups are correlated by ``rho`` like any other two, not treated as one)."""
        return _ids([self.encoding.group(c) for c in configs], self._groups)

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

    def _fit(self) -> tuple[tuple[tuple[float, ...], float, float, float], float]:
        """The grid's combo of the highest log marginal likelihood (the first in the grid's order among ties).

        For one (lengths, rho, level-to-signal ratio) the covariance is ``signal^2 M + (noise^2 + 1e-10) I`` with
        one matrix ``M``: a single eigendecomposition ``M = Q diag(lam) Q^T`` gives every signal and noise of that
        triple in closed form (eigenvalues ``signal^2 lam + noise^2``, ``y`` rotated once), so a fit costs one
        ``eigh`` per triple instead of one Cholesky per combo."""
        n, dims = self.X.shape
        levels = LEVEL if self._level_of is not None else (0.0,)
        rhos = RHO if len(self._groups) > 1 else (0.0,)
        noises = np.array([(f * self.noise_floor) ** 2 + 1e-10 for f in NOISE_FACTORS])
        same_level = (self.lv[:, None] == self.lv[None, :]).astype(float)
        diffs = [(self.X[:, j : j + 1] - self.X[:, j : j + 1].T) ** 2 for j in range(dims)]
        same = self.g[:, None] == self.g[None, :]
        length_grid = list(itertools.product(LENGTHS, repeat=dims))
        signals = np.array([s * self.scale for s in self._signals])
        lvs = [lv * self.scale for lv in levels]
        d2 = np.zeros((len(length_grid), n, n))
        for j in range(dims):
            d2 += diffs[j][None, :, :] / np.array([ell[j] for ell in length_grid])[:, None, None] ** 2
        e = np.exp(-0.5 * d2)
        # the log likelihood of every combo, indexed [lengths, signal, noise, rho, level] as the grid is ordered
        ll = np.empty((len(length_grid), len(signals), len(noises), len(rhos), len(lvs)))
        for r, rho in enumerate(rhos):
            base = e * np.where(same, 1.0, rho)[None, :, :]
            decomposed: dict[float, tuple[np.ndarray, np.ndarray]] = {}  # by the level's ratio to the signal
            for c, lv in enumerate(lvs):
                for b, signal in enumerate(signals):
                    ratio = float((lv / signal) ** 2)
                    if ratio not in decomposed:
                        lam, q = np.linalg.eigh(base + ratio * same_level[None, :, :] if ratio else base)
                        decomposed[ratio] = (np.maximum(lam, 0.0), np.einsum("aij,i->aj", q, self.y) ** 2)
                    lam, z2 = decomposed[ratio]
                    eig = signal**2 * lam[:, None, :] + noises[None, :, None]  # lengths x noise x eigenvalue
                    ll[:, b, :, r, c] = -0.5 * (z2[:, None, :] / eig).sum(axis=2) - 0.5 * np.log(eig).sum(axis=2)
        flat = ll.reshape(-1)
        best = int(np.flatnonzero(flat >= flat.max() - 1e-9)[0])
        a, b, k, r, c = (int(i) for i in np.unravel_index(best, ll.shape))
        return (length_grid[a], self._signals[b] * self.scale, NOISE_FACTORS[k] * self.noise_floor, rhos[r]), lvs[c]

    def predict(self, configs: Sequence[TrialConfig]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and sd of log tok/s at each config."""
        _lengths, signal, _noise, _rho = self.params
        X = np.array([self.encoding.coords(c) for c in configs], dtype=float).reshape(len(configs), -1)
        g, lv = self._group_ids(configs), self._level_ids(configs)
        Ks = self._cov(X, g, lv, self.X, self.g, self.lv)
        mean = self.mean + Ks @ self._alpha
        v = np.linalg.solve(self._L, Ks.T)
        var = np.maximum(signal**2 + self.level**2 - (v**2).sum(axis=0), 1e-12)
        return mean, np.sqrt(var)

    def loo(self) -> tuple[np.ndarray, np.ndarray]:
        """Leave-one-config-out: per measured config (in the order first observed), its observations' mean minus
        what the model predicts for it from the other configs' observations alone, and that prediction's sd (its
        noise included). Closed form for the fitted hyperparameters: leaving out the block ``B`` of a config's
        observations, the residuals are ``(K^-1)_BB^-1 (K^-1 y)_B`` and their covariance ``(K^-1)_BB^-1``."""
        keys = [c.key() for c in self._configs]
        blocks: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            blocks.setdefault(k, []).append(i)
        n = len(keys)
        kinv = np.linalg.solve(self._L.T, np.linalg.solve(self._L, np.eye(n)))
        res, sds = [], []
        for idx in blocks.values():
            if len(idx) == n:  # one config: nothing to predict it from but the prior
                res.append(0.0)
                sds.append(float(np.sqrt(self.params[1] ** 2 + self.params[2] ** 2)))
                continue
            cov = np.linalg.inv(kinv[np.ix_(idx, idx)])
            r = cov @ self._alpha[idx]
            res.append(float(np.mean(r)))
            sds.append(float(np.sqrt(max(cov.sum() / len(idx) ** 2, 1e-12))))
        return np.array(res), np.array(sds)

    def sample(self, configs: Sequence[TrialConfig], n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws (rows) of the latent log tok/s at ``configs`` (columns) from the joint posterior: what the
        model believes the true values could be together (neighbours move together), for questions about the
        maximum over many configs that per-config sds cannot answer."""
        _lengths, signal, _noise, _rho = self.params
        X = np.array([self.encoding.coords(c) for c in configs], dtype=float).reshape(len(configs), -1)
        g, lv = self._group_ids(configs), self._level_ids(configs)
        Ks = self._cov(X, g, lv, self.X, self.g, self.lv)
        mean = self.mean + Ks @ self._alpha
        v = np.linalg.solve(self._L, Ks.T)
        cov = self._cov(X, g, lv, X, g, lv) - v.T @ v
        cov = (cov + cov.T) / 2
        try:
            root = np.linalg.cholesky(cov + 1e-9 * signal**2 * np.eye(len(configs)))
        except np.linalg.LinAlgError:  # near-identical configs: a square root that tolerates rank deficiency
            w, q = np.linalg.eigh(cov)
            root = q * np.sqrt(np.clip(w, 0.0, None))
        return mean[None, :] + rng.standard_normal((n, len(configs))) @ root.T


def tokens_per_round(prompts: Sequence[PromptResult]) -> float | None:
    """Tokens a verification round yields over measured prompts (the bonus token included): their tokens over
    their rounds (a prompt's completion tokens over its acceptance length). None when a prompt has no acceptance
    length or no tokens: the server did not say, and the factored model is not used."""
    tokens, rounds = 0.0, 0.0
    for p in prompts:
        n, acc = p.completion_tokens, p.accept_length
        if not n or not acc or acc <= 0:
            return None
        tokens += float(n)
        rounds += float(n) / float(acc)
    return tokens / rounds if rounds > 0 else None


def log_round_cost(
    prompts: Sequence[PromptResult], log_tok_per_s: float, complete: Sequence[Sequence[PromptResult]]
) -> float | None:
    """Log seconds per round of a start whose log tok/s over the whole prompt set is ``log_tok_per_s`` (a
    stopped start's: its paired speedup times the baseline's) and that measured ``prompts``: its acceptance over
    them, taken to the whole set by the starts that measured every prompt (``complete``: the median ratio of
    their acceptance over the same prompts to theirs over all; code prompts accept more than chat on every
    drafter), minus the log tok/s. None without an acceptance length, or for a stopped start before any start
    measured every prompt."""
    tau = tokens_per_round(prompts)
    if tau is None or not prompts:
        return None
    mine = {p.index for p in prompts}
    ratios = []
    for ps in complete:
        if {p.index for p in ps} == mine:
            return math.log(tau) - log_tok_per_s  # every prompt measured: nothing to take over
        sub = [p for p in ps if p.index in mine]
        a, b = tokens_per_round(sub), tokens_per_round(ps)
        if len(sub) == len(mine) and a and b:
            ratios.append(a / b)
    if not ratios:
        return None
    return math.log(tau / float(np.median(ratios))) - log_tok_per_s


class FactoredSurrogate:
    """log tok/s = log(acceptance length) - log(seconds per round): one GP for each factor, added.

    Speculation's tok/s is a ratio of two smooth things: how many tokens a verification round yields (the
    acceptance length, which grows with the tree's depth and width and does not depend on CUDA graphs: one
    drafter's acceptance at a shape is the same with graphs on and off) and what a round costs (which grows about
    linearly with the steps drafted and the tokens verified, whatever the drafter proposes). Their ratio has an
    optimum inside the space that a GP of log tok/s must learn from tok/s alone; each factor alone is monotone
    and each is measured by every start (``log_round_cost``), so a few measurements pin both down further from
    themselves. The start-to-start noise of the server is in the round's cost; the acceptance of fixed prompts at
    temperature 0 hardly moves from one start to the next (``accept_floor``). ``cycle_levels``: the round's cost
    has a level per CUDA-graph setting (graphs change every step's launch overhead by about the same factor), so
    a shape measured with one setting carries over to the other.

    scripts/bench_search.py, 20 seeds beside the single GP (docs/benchmarks.md, "The study's bill"): median GPU
    time per study llama 40 vs 56 min, kimi-k2drafter 4.5 vs 5.6 h, llama-edge 25 vs 33 min, kimi 6.8 vs 6.5 h,
    moe-a3b 25 vs 21 min; 50 generated landscapes x 3 seeds: 117.5 vs 124.2 h, 145 vs 144 hits."""

    def __init__(
        self,
        encoding: Encoding,
        observations: Sequence[tuple[TrialConfig, float, float]],
        *,
        noise_floor: float = 0.025,
        accept_floor: float = 0.005,
        cycle_levels: bool = True,
    ) -> None:
        """``observations``: (config, log tok/s, log seconds per round); the acceptance length's log is their sum.
        ``noise_floor``: as ``Surrogate``'s, for the round's cost (and the baseline's sd in the settle check)."""
        if not observations:
            raise ValueError("a surrogate needs at least one observation")
        self.noise_floor = noise_floor
        self.encoding = encoding
        self.accept = Surrogate(
            dataclasses.replace(encoding, graph_groups=False),
            [(c, v + cyc) for c, v, cyc in observations],
            noise_floor=accept_floor,
        )
        self.cycle = Surrogate(
            encoding,
            [(c, cyc) for c, _, cyc in observations],
            noise_floor=noise_floor,
            level_of=(lambda c: bool(c.cuda_graph)) if cycle_levels else None,
        )

    def predict(self, configs: Sequence[TrialConfig]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and sd of log tok/s at each config (the factors' posteriors are independent)."""
        ma, sa = self.accept.predict(configs)
        mc, sc = self.cycle.predict(configs)
        return ma - mc, np.sqrt(sa**2 + sc**2)

    def loo(self) -> tuple[np.ndarray, np.ndarray]:
        """``Surrogate.loo`` of log tok/s: the acceptance's residual minus the round cost's (the same configs in the
        same order), their sds added in quadrature."""
        ra, sa = self.accept.loo()
        rc, sc = self.cycle.loo()
        return ra - rc, np.sqrt(sa**2 + sc**2)

    def predict_factors(self, configs: Sequence[TrialConfig]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior means of log acceptance length and log seconds per round (for a pending config)."""
        return self.accept.predict(configs)[0], self.cycle.predict(configs)[0]

    def sample(self, configs: Sequence[TrialConfig], n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` joint draws of log tok/s at ``configs``: a draw of each factor's joint posterior, subtracted."""
        draws: np.ndarray = self.accept.sample(configs, n, rng) - self.cycle.sample(configs, n, rng)
        return draws


class MethodSurrogate:
    """One model per speculative method of a space with ``search.methods``, independent of each other: a kernel
    that never correlates two methods. A method's numeric knobs mean different things (EAGLE-3's steps are draft
    forwards of a head, n-gram's a trie's depth, adaptive's a start the controller leaves), and the speed of one
    method says nothing of another's: a single GP over all of them, its groups correlated by ``rho``, predicted an
    n-gram config at 428 tok/s, sd a few percent, that truly ran 1,124 (#46). Each method's model has its own
    encoding (its own knobs' ranges), its own hyperparameters and, with every start's round cost, its own factors.

    A method with fewer than ``min_own`` measured configs of its own is not modelled from them alone: its model is
    one GP of log tok/s whose signal sd is fixed at ``prior_scale`` (the spread of every measurement of the study,
    every method's: how far one config can be from another here), centred on its own measurements (on every
    measurement's mean when it has none), so that the surrogate stays uncertain about it until it has its own
    evidence. ``own(config)`` says how many a config's method has."""

    def __init__(
        self,
        models: Mapping[Hashable, Model],
        key_of: Callable[[TrialConfig], Hashable],
        counts: Mapping[Hashable, int],
        *,
        prior_mean: float,
        prior_scale: float,
        noise_floor: float,
        own_obs: Mapping[Hashable, tuple[Encoding, Sequence[tuple[TrialConfig, float]]]] | None = None,
    ) -> None:
        self.models = dict(models)
        self.key_of = key_of
        self.counts = dict(counts)
        self.prior_mean = prior_mean
        self.prior_scale = prior_scale
        self.noise_floor = noise_floor
        #: per method with a model of its own: its encoding and (config, log tok/s) measurements
        self.own_obs = dict(own_obs or {})
        self._plain: dict[Hashable, Surrogate] = {}

    def own(self, config: TrialConfig) -> int:
        """How many measured configs of its own ``config``'s method has."""
        return self.counts.get(self.key_of(config), 0)

    def opinions(self, config: TrialConfig) -> list[tuple[float, float]]:
        """What a judgment of ``config`` alone (the launch gate) should rest on: (mean, sd) of log tok/s by its
        method's model and, where that model is factored, by one GP of log tok/s over the same measurements too (a
        different model of the same evidence: #46, landscape 3 seed 2, the factored model put an n-gram config truly
        0.991 of the best at 0.895, sd 2.8%, where one GP put it at 0.99). Each sd is at least the model's held-out
        error (``held_out_error``). A method without a model of its own: its prior."""
        key = self.key_of(config)
        model = self.models.get(key)
        if model is None:
            return [(self.prior_mean, self.prior_scale)]
        models: list[Surrogate | FactoredSurrogate] = [model] if not isinstance(model, MethodSurrogate) else []
        if isinstance(model, FactoredSurrogate) and key in self.own_obs:
            if key not in self._plain:
                encoding, obs = self.own_obs[key]
                self._plain[key] = Surrogate(encoding, obs, noise_floor=self.noise_floor)
            models.append(self._plain[key])
        out = []
        for m in models:
            (mu,), (sd,) = m.predict([config])
            out.append((float(mu), max(float(sd), held_out_error(m))))
        return out

    def _split(self, configs: Sequence[TrialConfig]) -> dict[Hashable, list[int]]:
        out: dict[Hashable, list[int]] = {}
        for i, c in enumerate(configs):
            out.setdefault(self.key_of(c), []).append(i)
        return out

    def predict(self, configs: Sequence[TrialConfig]) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and sd of log tok/s at each config, each by its method's model."""
        mean = np.full(len(configs), self.prior_mean)
        sd = np.full(len(configs), self.prior_scale)
        for key, idx in self._split(configs).items():
            model = self.models.get(key)
            if model is not None:
                m, v = model.predict([configs[i] for i in idx])
                mean[idx], sd[idx] = m, v
        return mean, sd

    def sample(self, configs: Sequence[TrialConfig], n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` joint draws: each method's from its own joint posterior, independent of the others' (a method
        without a model: its prior, each config on its own). A method modelled on its own evidence is shifted as a
        whole by a draw of its model's held-out error (``held_out_error``): a model that missed its own measured
        configs by 9% can be that far off everywhere at once (#46, landscape 5 seed 1: EAGLE-3 with 4 of its 949
        configs measured, its best measured 0.83 of the truly best, the settled stop came while EAGLE-3's best
        config was 3% above the pick)."""
        out = np.empty((n, len(configs)))
        for key, idx in self._split(configs).items():
            model = self.models.get(key)
            if model is not None:
                out[:, idx] = model.sample([configs[i] for i in idx], n, rng)
                if key in self.own_obs and not isinstance(model, MethodSurrogate):
                    out[:, idx] += held_out_error(model) * rng.standard_normal((n, 1))
            else:
                out[:, idx] = self.prior_mean + self.prior_scale * rng.standard_normal((n, len(idx)))
        return out


Model = Surrogate | FactoredSurrogate | MethodSurrogate


def held_out_error(model: Surrogate | FactoredSurrogate) -> float:
    """How far ``model`` has been off on its own measured configs, each left out in turn (``Surrogate.loo``), as an
    sd of log tok/s: the root-mean-square of the residuals or, where they overran the model's own sds (their ratio's
    rms above 1), the rms of those sds scaled by that ratio, whichever is larger. A prediction of the model is no
    more certain than its record on what it has measured. 0 with fewer than two configs."""
    res, sds = model.loo()
    if len(res) < 2:
        return 0.0
    rms = float(np.sqrt(np.mean(res**2)))
    overrun = float(np.sqrt(np.mean((res / np.maximum(sds, 1e-9)) ** 2)))
    return max(rms, float(np.sqrt(np.mean(sds**2))) * overrun) if overrun > 1 else rms


def fit(
    encoding: Encoding,
    observations: Sequence[tuple[TrialConfig, float, float | None]],
    *,
    noise_floor: float,
    pending: Sequence[TrialConfig] = (),
    alone: Model | None = None,
) -> Model:
    """The surrogate of ``observations`` (config, log tok/s, log seconds per round or None): factored when every
    observation has its round's cost (``FactoredSurrogate``), else one GP of log tok/s. ``pending``: configs being
    measured now (parallel workers), counted as measured at the model's mean so that two workers do not pick the
    same one. ``alone``: this function's model of the same ``observations`` without ``pending``, where the caller
    has it (it is fitted first otherwise)."""
    factored = all(cyc is not None for _, _, cyc in observations)
    if factored:
        obs3 = [(c, v, float(cyc)) for c, v, cyc in observations if cyc is not None]  # all of them
        factors = alone if isinstance(alone, FactoredSurrogate) else None
        factors = factors or FactoredSurrogate(encoding, obs3, noise_floor=noise_floor)
        if pending:
            la, lc = factors.predict_factors(pending)
            extra = [(c, float(a - b), float(b)) for c, a, b in zip(pending, la, lc, strict=True)]
            factors = FactoredSurrogate(encoding, obs3 + extra, noise_floor=noise_floor)
        return factors
    obs = [(c, v) for c, v, _ in observations]
    model = alone if isinstance(alone, Surrogate) else Surrogate(encoding, obs, noise_floor=noise_floor)
    if pending:
        mean, _sd = model.predict(pending)
        model = Surrogate(
            encoding, obs + [(c, float(m)) for c, m in zip(pending, mean, strict=True)], noise_floor=noise_floor
        )
    return model


def fit_by_method(
    grid: Sequence[TrialConfig],
    observations: Sequence[tuple[TrialConfig, float, float | None]],
    *,
    key_of: Callable[[TrialConfig], Hashable],
    noise_floor: float,
    min_own: int,
    pending: Sequence[TrialConfig] = (),
    unfactored: Collection[Hashable] = (),
) -> MethodSurrogate:
    """A ``MethodSurrogate`` over ``observations``: per method (``key_of``) of ``grid``, ``fit`` with that
    method's own encoding (its grid configs and observations) once it has ``min_own`` measured configs, else one
    GP at the study's prior scale (the sd of every observation's log tok/s, at least the noise floor).
    ``unfactored``: methods modelled by one GP of log tok/s even where every start reports its round's cost: an
    adaptive method's draft length is chosen per round from what was accepted, so its acceptance and a round's cost
    move together from one start to the next instead of being a shape's constants (#46: adaptive MTP's candidate
    steps 1,3,5,7 measured 3.5% below 2,4,6 and was ranked 4% above it by the factors, its measured acceptance
    taken as exact and its higher round cost as noise)."""
    ys = [v for _, v, _ in observations]
    prior_mean = float(np.mean(ys)) if ys else 0.0
    prior_scale = max(float(np.std(ys)) if len(ys) > 1 else 0.0, noise_floor)
    by_key: dict[Hashable, list[tuple[TrialConfig, float, float | None]]] = {}
    for o in observations:
        by_key.setdefault(key_of(o[0]), []).append(o)
    grid_of: dict[Hashable, list[TrialConfig]] = {}
    for c in grid:
        grid_of.setdefault(key_of(c), []).append(c)
    models: dict[Hashable, Model] = {}
    counts: dict[Hashable, int] = {}
    own_obs: dict[Hashable, tuple[Encoding, list[tuple[TrialConfig, float]]]] = {}
    for key, obs in by_key.items():
        counts[key] = len({c.key() for c, _, _ in obs})
        encoding = Encoding.from_configs(grid_of.get(key, []) + [c for c, _, _ in obs])
        mine = [p for p in pending if key_of(p) == key]
        if counts[key] >= min_own:
            plain = [(c, v, None) for c, v, _ in obs] if key in unfactored else obs
            models[key] = fit(encoding, plain, noise_floor=noise_floor, pending=mine)
            own_obs[key] = (encoding, [(c, v) for c, v, _ in obs])
        else:
            models[key] = Surrogate(
                encoding, [(c, v) for c, v, _ in obs], noise_floor=noise_floor, prior_scale=prior_scale
            )
    return MethodSurrogate(
        models,
        key_of,
        counts,
        prior_mean=prior_mean,
        prior_scale=prior_scale,
        noise_floor=noise_floor,
        own_obs=own_obs,
    )


__all__ = [
    "Encoding",
    "FactoredSurrogate",
    "MethodSurrogate",
    "Model",
    "Surrogate",
    "fit",
    "fit_by_method",
    "held_out_error",
    "log_round_cost",
    "tokens_per_round",
]
