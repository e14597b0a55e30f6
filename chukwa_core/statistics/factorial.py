"""Main effects and interactions of a factorial experiment (docs/designs.md): one
regression of the worlds' values on the effect-coded factors, with standard errors clustered by
replicate (replicate i of every arm shares a seed, so the arms of one replicate are a cluster).

Coding (deviation, or "effect", coding): a factor with levels 0…L-1 (0 the base) has one column
per other level j, +1 at level j, -1 at the base, 0 elsewhere; an interaction's columns are the
products of its factors' columns. For a two-level factor the column is -1/+1 and its
coefficient is half the high-minus-low difference averaged over the other factors (``contrast``
doubles it). A full design fits every main effect and interaction (a saturated cell-means
model); a fraction fits one effect of each alias set (the lowest order one) and names the
effects it is aliased with.

Count, ordinal and continuous values: ordinary least squares (statsmodels OLS) on the values;
binary: logistic regression (statsmodels GLM, Binomial family, logit link), coefficients on the
log-odds scale. Standard errors: statsmodels' cluster-robust covariance (``cov_type="cluster"``,
groups the replicates, its small-sample correction) with t quantiles on G - 1 degrees of
freedom (``use_t=True``). Pure: no Django.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chukwa_core.factorial import FactorialDesign, Word
from chukwa_core.statistics.libraries import library
from chukwa_core.statistics.types import (
    ALPHA,
    Interval,
    IntervalStatus,
    MetricScale,
    MetricType,
)

OLS_METHOD = (
    "ordinary least squares on effect-coded factors (statsmodels OLS), standard errors "
    "clustered by replicate (cov_type='cluster'), t on G-1 degrees of freedom"
)
LOGIT_METHOD = (
    "logistic regression on effect-coded factors (statsmodels GLM, Binomial family, logit "
    "link), coefficients in log-odds, standard errors clustered by replicate "
    "(cov_type='cluster'), t on G-1 degrees of freedom"
)
METHODS = {
    MetricType.BINARY: LOGIT_METHOD,
    MetricType.COUNT: OLS_METHOD,
    MetricType.ORDINAL: OLS_METHOD,
    MetricType.CONTINUOUS: OLS_METHOD,
}
SCALES = {
    MetricType.BINARY: "log-odds",
    MetricType.COUNT: "mean",
    MetricType.ORDINAL: "mean",
    MetricType.CONTINUOUS: "mean",
}


@dataclass(frozen=True)
class Observation:
    """One world's value: its arm's label, its replicate (1…R), its value (None: missing)."""

    arm: str
    replicate: int
    value: float | None


@dataclass(frozen=True)
class Column:
    """One coefficient: the factors of its effect and, per factor, the level coded +1."""

    word: Word
    levels: tuple[int, ...]
    name: str
    two_level: bool


@dataclass(frozen=True)
class FactorialTerm:
    name: str  # "thirst", "thirst:fountain", "colour[green]" (a level named past two levels)
    factors: Word
    order: int
    coefficient: float | None
    interval: Interval
    p_value: float | None
    # the effects this one's contrast also estimates (a fraction), e.g. ("-fountain:rain",)
    aliased_with: tuple[str, ...]
    two_level: bool

    @property
    def contrast(self) -> tuple[float | None, float | None, float | None]:
        """A two-level effect as the high-minus-low difference: 2·coefficient and its interval
        (on the fit's scale); None for a column of a factor with more levels."""
        if not self.two_level or self.coefficient is None:
            return None, None, None
        low, high = self.interval.low, self.interval.high
        return (
            2 * self.coefficient,
            None if low is None else 2 * low,
            None if high is None else 2 * high,
        )


@dataclass(frozen=True)
class FactorialFit:
    metric_type: MetricType
    scale: str  # what a coefficient is on: "mean" or "log-odds"
    intercept: float | None
    terms: tuple[FactorialTerm, ...]
    n_worlds: int
    n_missing: int
    n_replicates: int
    method: str
    library: str
    aliasing: str | None  # the fraction's alias structure as text; None for a full design
    note: str | None = None


def columns(design: FactorialDesign) -> tuple[Column, ...]:
    names = design.names
    by_name = {f.name: f for f in design.factors}
    found: list[Column] = []
    for word in design.estimable_words:
        choices = [range(1, len(by_name[name].levels)) for name in word]
        for combination in _product(choices):
            two_level = all(by_name[name].two_level for name in word)
            parts = [
                name if by_name[name].two_level else f"{name}[{by_name[name].levels[j].label}]"
                for name, j in zip(word, combination, strict=True)
            ]
            found.append(Column(word, combination, ":".join(parts), two_level))
    assert all(n in names for c in found for n in c.word)
    return tuple(found)


def _product(choices: Sequence[range]) -> list[tuple[int, ...]]:
    import itertools

    return list(itertools.product(*choices))


def design_matrix(design: FactorialDesign, arms: Sequence[str]) -> np.ndarray:
    """Rows in ``arms`` order: the intercept, then every column's code."""
    index = {name: i for i, name in enumerate(design.names)}
    by_label = {arm.label: arm for arm in design.arms}
    cols = columns(design)
    matrix = np.ones((len(arms), 1 + len(cols)))
    for row, label in enumerate(arms):
        levels = by_label[label].levels
        for c, column in enumerate(cols, start=1):
            code = 1.0
            for name, level in zip(column.word, column.levels, strict=True):
                at = levels[index[name]]
                code *= 1.0 if at == level else (-1.0 if at == 0 else 0.0)
            matrix[row, c] = code
    return matrix


def _alias_names(design: FactorialDesign, word: Word) -> tuple[str, ...]:
    if design.fraction is None:
        return ()
    alias_set = design.fraction.alias_set_of(word)
    if alias_set is None:
        return ()
    return tuple(
        f"{'+' if sign > 0 else '-'}{':'.join(other) or 'intercept'}"
        for sign, other in alias_set.aliases
    )


def _unavailable(method: str, reason: str) -> Interval:
    return Interval(
        None, None, IntervalStatus.UNAVAILABLE, method, library("statsmodels"), reason=reason
    )


def fit_factorial(
    design: FactorialDesign, scale: MetricScale, observations: Sequence[Observation]
) -> FactorialFit:
    """Every estimable effect's coefficient with its 95% interval and p (two-sided)."""
    import statsmodels.api as sm
    from statsmodels.tools.sm_exceptions import PerfectSeparationWarning

    labels = {arm.label for arm in design.arms}
    for o in observations:
        if o.arm not in labels:
            raise ValueError(f"{o.arm!r} is not an arm of the design")
    present = [o for o in observations if o.value is not None]
    for o in present:
        assert o.value is not None
        scale.check(float(o.value))
    method = METHODS[scale.type]
    lib = library("statsmodels")
    cols = columns(design)
    aliasing = design.text() if design.fraction is not None else None
    y = np.array([o.value for o in present], dtype=float)
    groups = np.array([o.replicate for o in present])
    n_groups = len(set(groups.tolist()))
    x = design_matrix(design, [o.arm for o in present])

    def empty(reason: str) -> FactorialFit:
        terms = tuple(
            FactorialTerm(
                c.name, c.word, len(c.word), None, _unavailable(method, reason), None,
                _alias_names(design, c.word), c.two_level,
            )
            for c in cols
        )  # fmt: skip
        return FactorialFit(
            scale.type, SCALES[scale.type], None, terms, len(present),
            len(observations) - len(present), n_groups, method, lib, aliasing, note=reason,
        )  # fmt: skip

    if n_groups < 2:
        return empty("fewer than 2 replicates: no clustered standard error")
    if np.linalg.matrix_rank(x) < x.shape[1]:
        return empty("some arm has no value: the effects cannot all be estimated")
    if np.all(y == y[0]):
        return empty("every world has the same value: no variation to estimate from")
    model = (
        sm.GLM(y, x, family=sm.families.Binomial())
        if scale.type is MetricType.BINARY
        else sm.OLS(y, x)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = model.fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=True)
    if any(issubclass(w.category, PerfectSeparationWarning) for w in caught):
        return empty(
            "some arm's worlds are all 0 or all 1 (perfect separation): the log-odds are infinite"
        )
    params = np.asarray(fitted.params)
    bounds = np.asarray(fitted.conf_int(alpha=ALPHA))
    p_values = np.asarray(fitted.pvalues)
    note = None
    if n_groups <= x.shape[1]:
        note = (
            f"{n_groups} replicates for {x.shape[1]} coefficients: the clustered covariance "
            "has too few clusters to be reliable; add replicates"
        )
    terms = tuple(
        FactorialTerm(
            c.name,
            c.word,
            len(c.word),
            float(params[i]),
            Interval(float(bounds[i, 0]), float(bounds[i, 1]), IntervalStatus.SHOWN, method, lib),
            float(p_values[i]),
            _alias_names(design, c.word),
            c.two_level,
        )
        for i, c in enumerate(cols, start=1)
    )
    return FactorialFit(
        scale.type,
        SCALES[scale.type],
        float(params[0]),
        terms,
        len(present),
        len(observations) - len(present),
        n_groups,
        method,
        lib,
        aliasing,
        note,
    )
