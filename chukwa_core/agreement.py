"""How well a metric's values agree with people's labels of the same turns: Spearman's rho
(``scipy.stats.spearmanr``) and, on an integer scale, quadratic-weighted Cohen's kappa
(``sklearn.metrics.cohen_kappa_score``). Pure: no Django.

scikit-learn weighs a disagreement by the distance between the two labels' *positions* in
``labels``; the labels given here are every integer of the scale (and of any label outside it), so
positions are values and a 2 against a 5 weighs 3² whether or not anyone said 3 or 4.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import TypedDict


class Agreement(TypedDict):
    n: int
    spearman_rho: float | None
    spearman_p: float | None
    # quadratic-weighted Cohen's kappa; None unless both sides are whole numbers
    cohen_kappa_quadratic: float | None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _whole(values: Sequence[float]) -> bool:
    return all(float(v).is_integer() for v in values)


def agreement(
    metric_values: Sequence[float],
    labels: Sequence[float],
    *,
    integer_scale: tuple[int, int] | None,
) -> Agreement:
    """``metric_values[i]`` and ``labels[i]`` describe the same turn. ``integer_scale`` is the
    metric's (min, max) when it scores on an integer scale, else None: kappa is then computed over
    the whole numbers the values span, when every value on both sides is one."""
    n = len(metric_values)
    if n != len(labels):
        raise ValueError("metric_values and labels must pair up")
    result: Agreement = {
        "n": n,
        "spearman_rho": None,
        "spearman_p": None,
        "cohen_kappa_quadratic": None,
    }
    if n < 2:
        return result
    # Imported here: the two libraries take a second or more to load, which only this read needs
    # (not every web and worker process at start).
    from scipy.stats import spearmanr
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():
        # a constant side has no rank correlation: scipy warns and answers nan (None here)
        warnings.simplefilter("ignore")
        rho, p = spearmanr(metric_values, labels)
        result["spearman_rho"] = _finite(float(rho))
        result["spearman_p"] = _finite(float(p))
        if _whole(metric_values) and _whole(labels):
            every = [int(v) for v in (*metric_values, *labels)]
            low, high = min(every), max(every)
            if integer_scale is not None:
                low, high = min(low, integer_scale[0]), max(high, integer_scale[1])
            kappa = cohen_kappa_score(
                [int(v) for v in metric_values],
                [int(v) for v in labels],
                labels=list(range(low, high + 1)),
                weights="quadratic",
            )
            result["cohen_kappa_quadratic"] = _finite(float(kappa))
    return result
