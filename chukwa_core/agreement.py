"""How well a metric's values agree with people's labels of the same turns (docs/measurement.md,
"Calibrating a judge"). Pure: no Django.

The **unit** is a turn: the metric's value there against the mean of the reviewers who labelled
it (several reviewers of one turn are one unit, never several pairs, so ``n`` counts turns).
On the units:

- Spearman's rho (``scipy.stats.spearmanr``) with a two-sided **permutation** p
  (``scipy.stats.permutation_test``, the labels' pairing with the values permuted): exact — every
  pairing enumerated — up to ``EXACT_UNITS`` units, beyond that Monte Carlo with its standard
  error. (At 3 perfectly agreeing turns the exact p is 1/3: 2 of the 6 pairings are as extreme.)
- quadratic-weighted Cohen's kappa (``sklearn.metrics.cohen_kappa_score``), only when the metric and
  the labels share an integer scale (a judge's 1-5 and reviewers' whole numbers in 1-5, or a 0/1
  metric and flags) and every turn's label is one point of it; otherwise null with the reason.
  scikit-learn weighs a disagreement by the distance between the labels' *positions* in
  ``labels``; every integer of the scale is given, so a 2 against a 5 weighs 3² whether or not
  anyone said 3 or 4.
- Krippendorff's alpha (the ``krippendorff`` package) over **every rater**: the metric and each
  reviewer, a reviewer's missing turns missing; ordinal on a shared integer scale, else interval.

Each carries a 95% interval **by world** (turns of one world are not independent): the
delete-one-world jackknife on Fisher's z scale (``atanh``) with a t quantile on G - 1 degrees of
freedom (G worlds), back-transformed with ``tanh``. A percentile bootstrap resampling worlds was
used before: ``bench/agreement_coverage.py`` measured it covering 76-81% at 3 worlds and 83-91% at
5; the jackknife covers 93-97% from 3 worlds on (docs/measurement.md has the table).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import numpy as np

from chukwa_core.experiment_results_types import doc
from chukwa_core.ids import Hash, Label
from chukwa_core.statistics.libraries import library

EXACT_UNITS = 9  # 9! = 362,880 pairings: enumerated in about a second; 10! would be ten times that
MONTE_CARLO_PAIRINGS = 99_999
LEVEL = 0.95
# a coefficient of ±1 exactly has no z: it is taken as this close to it
Z_EDGE = 1 - 1e-12
Level = Literal["ordinal", "interval"]  # alpha: ordinal on a shared integer scale, else interval


@dataclass(frozen=True)
class Unit:
    """One turn: the world it is in, the metric's value, and each reviewer's label (a reviewer
    who labelled the turn more than once: the mean of their labels)."""

    world: str
    metric_value: float
    ratings: Mapping[str, float]

    @property
    def label(self) -> float:
        return float(np.mean(list(self.ratings.values())))


@dataclass(frozen=True)
class AgreementInterval:
    """A 95% interval by world (delete-one-world jackknife, Fisher's z, t on G - 1 df); null
    ends: ``reason`` says why."""

    low: float | None
    high: float | None
    method: str
    reason: str | None = field(metadata=doc("why there is no interval; null when there is one"))


@dataclass(frozen=True)
class Agreement:
    n: int = field(metadata=doc("units: turns with the metric's value and at least one label"))
    annotations: int = field(metadata=doc("labels counted (several reviewers of a turn: one unit)"))
    reviewers: int
    worlds: int
    spearman_rho: float | None = field(
        metadata=doc("Spearman's rank correlation of the metric and the turns' mean labels")
    )
    spearman_rho_ci: AgreementInterval
    spearman_p: float | None = field(metadata=doc("two-sided permutation p of rho"))
    spearman_p_exact: bool = field(
        metadata=doc("true: every pairing enumerated; false: Monte Carlo (see its se)")
    )
    spearman_p_monte_carlo_se: float | None
    spearman_method: str
    cohen_kappa_quadratic: float | None = field(
        metadata=doc("null unless the metric and the labels share an integer scale")
    )
    cohen_kappa_reason: str | None = field(metadata=doc("why kappa is null"))
    cohen_kappa_ci: AgreementInterval
    cohen_kappa_method: str
    krippendorff_alpha: float | None = field(
        metadata=doc("over every rater: the metric and each reviewer")
    )
    krippendorff_alpha_level: str = field(metadata=doc("ordinal or interval"))
    krippendorff_alpha_reason: str | None = field(metadata=doc("why alpha is null"))
    krippendorff_alpha_ci: AgreementInterval
    krippendorff_alpha_method: str
    permutation_seed: int = field(
        metadata=doc("the seed of the Monte Carlo permutation p (unused when exact)")
    )


def _finite(value: Any) -> float | None:
    return float(value) if value is not None and math.isfinite(float(value)) else None


def _rho(x: np.ndarray, y: np.ndarray) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _finite(spearmanr(x, y).statistic)


def fast_rho(x: np.ndarray, y: np.ndarray) -> float | None:
    """Spearman's rho as the Pearson correlation of midranks (what ``scipy.stats.spearmanr``
    computes, a tenth of its time: the interval asks it once per world left out)."""
    from scipy.stats import rankdata

    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return None
    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return _finite(float(rx @ ry) / math.sqrt(float(rx @ rx) * float(ry @ ry)))


def fast_kappa(x: np.ndarray, y: np.ndarray, scale: tuple[int, int]) -> float | None:
    """Quadratic-weighted kappa by its formula (what ``sklearn.metrics.cohen_kappa_score`` with
    ``weights="quadratic"`` computes, a hundredth of its time: for the interval by world)."""
    size = scale[1] - scale[0] + 1
    observed = np.zeros((size, size))
    np.add.at(observed, (x.astype(int) - scale[0], y.astype(int) - scale[0]), 1)
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
    points = np.arange(size)
    weights = (points[:, None] - points[None, :]) ** 2
    chance = float((weights * expected).sum())
    if chance == 0:
        return None
    return _finite(1 - float((weights * observed).sum()) / chance)


def _permutation_p(x: np.ndarray, y: np.ndarray, seed: int) -> tuple[float, bool, float | None]:
    """The two-sided permutation p of Spearman's rho: the labels' pairing with the values
    permuted (ranks, midranks for ties, fixed; the correlation of ranks is rho)."""
    from scipy.stats import permutation_test, rankdata

    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    scale = math.sqrt(float(rx @ rx) * float(ry @ ry))

    def statistic(permuted: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray((permuted * ry).sum(axis=axis) / scale)

    exact = len(x) <= EXACT_UNITS
    found = permutation_test(
        (rx,),
        statistic,
        permutation_type="pairings",
        vectorized=True,
        n_resamples=np.inf if exact else MONTE_CARLO_PAIRINGS,
        batch=50_000,
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    p = min(1.0, float(found.pvalue))
    se = None if exact else math.sqrt(p * (1 - p) / MONTE_CARLO_PAIRINGS)
    return p, exact, se


def scale_problem(
    units: Sequence[Unit], scale: tuple[int, int] | None, flags: bool, turn_type: str
) -> str | None:
    """Why the metric and the labels share no integer scale, or None when they do."""
    if scale is None:
        return f"the metric's values are {turn_type}, on no integer scale: kappa needs one"
    low, high = scale
    if flags and scale != (0, 1):
        return f"the labels are flags (0 or 1) and the metric scores {low}–{high}: no shared scale"
    for unit in units:
        for value in unit.ratings.values():
            if not (float(value).is_integer() and low <= value <= high):
                return f"a label {value:g} is not a whole number of the metric's {low}–{high} scale"
    return None


def kappa_problem(
    units: Sequence[Unit], scale: tuple[int, int] | None, flags: bool, turn_type: str
) -> str | None:
    """Why quadratic-weighted kappa is not computed, or None when it is: the metric and the
    labels share an integer scale and every turn's (mean) label is a point of it."""
    shared = scale_problem(units, scale, flags, turn_type)
    if shared is not None:
        return shared
    split = sum(1 for unit in units if not float(unit.label).is_integer())
    if split:
        return (
            f"reviewers' mean label of {split} turn{'s' if split > 1 else ''} is no point of the "
            "scale (they disagree): read Krippendorff's alpha, over every rater"
        )
    if len(units) < 2:
        return "fewer than 2 turns"
    return None


def _kappa(x: np.ndarray, y: np.ndarray, scale: tuple[int, int]) -> float | None:
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kappa = cohen_kappa_score(
            x.astype(int),
            y.astype(int),
            labels=list(range(scale[0], scale[1] + 1)),
            weights="quadratic",
        )
    return _finite(kappa)


def _alpha(units: Sequence[Unit], reviewers: Sequence[str], level: Level) -> float | None:
    import krippendorff

    matrix = np.full((1 + len(reviewers), len(units)), np.nan)
    for j, unit in enumerate(units):
        matrix[0, j] = unit.metric_value
        for i, reviewer in enumerate(reviewers, start=1):
            if reviewer in unit.ratings:
                matrix[i, j] = unit.ratings[reviewer]
    present = matrix[~np.isnan(matrix)]
    if len(np.unique(present)) < 2:
        return None
    return _finite(krippendorff.alpha(reliability_data=matrix, level_of_measurement=level))


def _z(value: float) -> float:
    return math.atanh(max(-Z_EDGE, min(Z_EDGE, value)))


def jackknife_interval(
    full: float, left_out: Sequence[float | None], method: str
) -> AgreementInterval:
    """The 95% interval of a coefficient from its values with each world left out in turn
    (``left_out``, one per world): the jackknife's standard error on Fisher's z scale, a t
    quantile on G - 1 degrees of freedom, back to the coefficient's scale with ``tanh``."""
    from scipy.stats import t

    worlds = len(left_out)
    if worlds < 2:
        reason = "the turns are from one world: an interval by world needs two or more"
        return AgreementInterval(None, None, method, reason)
    if any(v is None for v in left_out):
        reason = "leaving one world out leaves a side without variation: no interval"
        return AgreementInterval(None, None, method, reason)
    zs = np.array([_z(float(v)) for v in left_out if v is not None])
    se = math.sqrt((worlds - 1) / worlds * float(((zs - zs.mean()) ** 2).sum()))
    if se == 0:
        # e.g. perfect agreement in every world: a zero-width interval would claim a certainty
        # the sample cannot give
        reason = "leaving out any world gives the same value: too few worlds to say how uncertain"
        return AgreementInterval(None, None, method, reason)
    half = float(t.ppf(0.5 + LEVEL / 2, worlds - 1)) * se
    centre = _z(full)
    return AgreementInterval(math.tanh(centre - half), math.tanh(centre + half), method, None)


def agreement(
    units: Sequence[Unit],
    *,
    scale: tuple[int, int] | None,
    flags: bool,
    turn_type: str,
    seed: int,
) -> Agreement:
    """The agreement of the metric with the labels of ``units``. ``scale``: the metric's integer
    scale (a judge's 1-5, a 0/1 metric's (0, 1)), None otherwise; ``flags``: the labels are
    booleans (read as 0/1); ``turn_type``: the metric's turn type, named in a reason."""
    reviewers = sorted({r for unit in units for r in unit.ratings})
    worlds = sorted({unit.world for unit in units})
    x = np.array([u.metric_value for u in units], dtype=float)
    y = np.array([u.label for u in units], dtype=float)
    rho = _rho(x, y)
    p, exact, se = (None, len(units) <= EXACT_UNITS, None)
    if rho is not None:
        p, exact, se = _permutation_p(x, y, seed)
    problem = kappa_problem(units, scale, flags, turn_type)
    kappa = _kappa(x, y, scale) if problem is None and scale is not None else None
    level: Level = (
        "ordinal" if scale_problem(units, scale, flags, turn_type) is None else "interval"
    )
    alpha = _alpha(units, reviewers, level) if units else None
    alpha_reason = None
    if alpha is None:
        alpha_reason = "no units" if not units else "every rating is the same value: no variation"
    # each world left out in turn, for the intervals by world
    left_out: dict[str, list[float | None]] = {"rho": [], "kappa": [], "alpha": []}
    if len(worlds) >= 2:
        for world in worlds:
            sample = [u for u in units if u.world != world]
            sx = np.array([u.metric_value for u in sample], dtype=float)
            sy = np.array([u.label for u in sample], dtype=float)
            if rho is not None:
                left_out["rho"].append(fast_rho(sx, sy))
            if kappa is not None and scale is not None:
                left_out["kappa"].append(fast_kappa(sx, sy, scale) if len(sample) else None)
            if alpha is not None:
                left_out["alpha"].append(_alpha(sample, reviewers, level))
    by_world = (
        "95% interval by world: delete-one-world jackknife on Fisher's z scale, t quantile on "
        f"{len(worlds) - 1} df ({len(worlds)} worlds), back-transformed; {library('scipy')}"
    )

    def interval(name: str, value: float | None, reason: str | None) -> AgreementInterval:
        if value is None:
            return AgreementInterval(None, None, by_world, reason or "no estimate")
        if len(worlds) < 2:
            return jackknife_interval(value, [], by_world)
        return jackknife_interval(value, left_out[name], by_world)

    pairings = (
        "exact: every pairing enumerated"
        if exact
        else f"Monte Carlo: {MONTE_CARLO_PAIRINGS} random pairings, seed {seed}"
    )
    return Agreement(
        n=len(units),
        annotations=sum(len(u.ratings) for u in units),
        reviewers=len(reviewers),
        worlds=len(worlds),
        spearman_rho=rho,
        spearman_rho_ci=interval("rho", rho, "fewer than 2 turns, or a side without variation"),
        spearman_p=p,
        spearman_p_exact=exact,
        spearman_p_monte_carlo_se=se,
        spearman_method=(
            "Spearman's rho (scipy.stats.spearmanr) of the metric and each turn's mean label; "
            "two-sided permutation p (scipy.stats.permutation_test, pairings; "
            f"{pairings}); {library('scipy')}"
        ),
        cohen_kappa_quadratic=kappa,
        cohen_kappa_reason=problem,
        cohen_kappa_ci=interval("kappa", kappa, problem),
        cohen_kappa_method=(
            "quadratic-weighted Cohen's kappa (sklearn.metrics.cohen_kappa_score, every "
            f"integer of the scale a label); {library('scikit-learn')}"
        ),
        krippendorff_alpha=alpha,
        krippendorff_alpha_level=level,
        krippendorff_alpha_reason=alpha_reason,
        krippendorff_alpha_ci=interval("alpha", alpha, alpha_reason),
        krippendorff_alpha_method=(
            f"Krippendorff's alpha, {level} level, over {1 + len(reviewers)} raters (the "
            f"metric and each reviewer; krippendorff.alpha); {library('krippendorff')}"
        ),
        permutation_seed=seed,
    )


@dataclass(frozen=True)
class AgreementMetric:
    hash: Hash
    label: Label
    kind: str


@dataclass(frozen=True)
class MetricAgreement(Agreement):
    """A metric's agreement with reviewers' annotations of one name (the API's answer)."""

    metric: AgreementMetric
    annotation: Label
    integer_scale: tuple[int, ...] | None = field(
        metadata=doc("[min, max] of the metric's integer scale (a judge's, or 0/1); else null")
    )

    @classmethod
    def of(
        cls,
        found: Agreement,
        *,
        metric: AgreementMetric,
        annotation: str,
        scale: tuple[int, int] | None,
    ) -> MetricAgreement:
        shared = {f.name: getattr(found, f.name) for f in fields(found)}
        return cls(**shared, metric=metric, annotation=annotation, integer_scale=scale)
