"""A metric's agreement with reviewers' annotations (docs/measurement.md, "Calibrating a judge"),
through the API and checked against the libraries' own answers: a turn is one unit however many
reviewers labelled it; rho's p is the exact permutation p at small n; kappa only on a shared
integer scale; Krippendorff's alpha over every rater; bootstrap intervals resampled by world."""

from __future__ import annotations

from typing import Any

import krippendorff
import numpy as np
import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient
from scipy.stats import permutation_test, spearmanr
from scipy.stats import t as t_dist
from sklearn.metrics import cohen_kappa_score

from chukwa_core.agreement import fast_kappa, fast_rho
from scenarios_app.services import metric_put
from tests.worlds_app.test_measurements import buyers_world, expression
from worlds_app import measurement_selectors
from worlds_app.models import Annotation, Measurement, Turn, World

pytestmark = pytest.mark.django_db


def scored(label: str) -> dict[str, Any]:
    """A metric on the integer scale 1…5, as a judge's is (its values are set by hand here)."""
    return {**expression(label, "`3`", "mean"), "type": "ordinal", "range": {"min": 1, "max": 5}}


def annotate(turn: Turn, author: User, value: float | bool, name: str = "plausibility") -> None:
    flag = isinstance(value, bool)
    Annotation.objects.create(
        target_kind="turn",
        turn=turn,
        name=name,
        value_kind="boolean" if flag else "number",
        value_number=None if flag else value,
        value_boolean=value if flag else None,
        author=author,
    )


def measure(world: World, metric: str, values: list[float]) -> dict[int, Turn]:
    turns = {t.number: t for t in Turn.objects.filter(world=world)}
    for number, value in enumerate(values):
        Measurement.objects.create(world=world, turn_number=number, metric_id=metric, value=value)
    return turns


def exact_p(metric_side: list[float], labels: list[float]) -> float:
    """scipy's own exact permutation p of Spearman's rho (every pairing)."""
    return float(
        permutation_test(
            (metric_side,),
            lambda x: spearmanr(x, labels).statistic,
            permutation_type="pairings",
            n_resamples=np.inf,
        ).pvalue
    )


def get(client: APIClient, metric: str, name: str = "plausibility") -> dict[str, Any]:
    answer = client.get(f"/api/metrics/{metric}/agreement/?annotation={name}")
    assert answer.status_code == 200, answer.json()
    return answer.json()


def test_a_turn_is_one_unit_and_the_figures_are_scipys_sklearns_and_krippendorffs(
    reader_client: APIClient, reader_user: User, operator_user: User, toy_sources: str
) -> None:
    """Six turns scored 1…5 in two worlds, each labelled by one reviewer, the first by a second
    one too: 6 units (that turn's label the two reviewers' mean), 7 annotations."""
    worlds = [buyers_world("rated", 2), buyers_world("rated-too", 2)]
    metric = metric_put(content=scored("score"))["hash"]
    scores = [1, 2, 3, 4, 5, 3]
    first = [1, 3, 3, 5, 4, 2]
    turns = [
        *measure(worlds[0], metric, scores[:3]).values(),
        *measure(worlds[1], metric, scores[3:]).values(),
    ]
    for turn, label in zip(turns, first, strict=True):
        annotate(turn, reader_user, label)
    annotate(turns[0], operator_user, 2)  # a second reviewer of the first turn
    annotate(turns[0], reader_user, True, name="plausibility_flag")

    got = get(reader_client, metric)
    means = [1.5, *first[1:]]
    assert (got["n"], got["annotations"], got["reviewers"], got["worlds"]) == (6, 7, 2, 2)
    assert got["spearman_rho"] == pytest.approx(spearmanr(scores, means).statistic, abs=1e-12)
    assert got["spearman_p"] == pytest.approx(exact_p(scores, means), abs=1e-12)
    assert got["spearman_p_exact"] is True and got["spearman_p_monte_carlo_se"] is None
    # the reviewers split on a turn: its label (1.5) is no point of the scale, so no kappa
    assert got["cohen_kappa_quadratic"] is None and "disagree" in got["cohen_kappa_reason"]
    raters = [scores, first, [2, *[np.nan] * 5]]  # the second reviewer labelled one turn
    alpha = krippendorff.alpha(reliability_data=raters, level_of_measurement="ordinal")
    assert got["krippendorff_alpha"] == pytest.approx(alpha, abs=1e-12)
    assert got["krippendorff_alpha_level"] == "ordinal"
    for name in ("spearman_rho_ci", "krippendorff_alpha_ci"):
        interval = got[name]
        assert interval["low"] < interval["high"], (name, interval)
        assert "delete-one-world jackknife on Fisher's z scale" in interval["method"]
    # rho's interval by world, from scipy's own rho of each world left out: the jackknife's
    # standard error of atanh(rho), t on G - 1 = 1 df, back with tanh
    halves = [(scores[:3], means[:3]), (scores[3:], means[3:])]
    left_out = [spearmanr(*halves[1 - i]).statistic for i in range(2)]
    zs = np.arctanh(left_out)
    se = np.sqrt((2 - 1) / 2 * ((zs - zs.mean()) ** 2).sum())
    centre = np.arctanh(spearmanr(scores, means).statistic)
    half = t_dist.ppf(0.975, 1) * se
    assert got["spearman_rho_ci"]["low"] == pytest.approx(np.tanh(centre - half), abs=1e-12)
    assert got["spearman_rho_ci"]["high"] == pytest.approx(np.tanh(centre + half), abs=1e-12)
    assert got == get(reader_client, metric)  # seeded: the same data, the same intervals
    names = measurement_selectors.agreement_names(metric_hash=metric)
    assert names == ["plausibility", "plausibility_flag"]
    missing = reader_client.get(f"/api/metrics/{metric}/agreement/")
    assert missing.status_code == 400
    assert missing.json()["error"]["details"]["field"] == "annotation"


def test_three_agreeing_turns_have_the_exact_p_of_one_third(
    reader_client: APIClient, reader_user: User, toy_sources: str
) -> None:
    """Of the 6 pairings of 3 turns, 2 are as extreme as perfect agreement (rho = ±1): the exact
    two-sided p is 1/3, where scipy's t approximation says 0.0. Kappa is 1 on the shared scale;
    with one world there is nothing to resample by world."""
    world = buyers_world("agreeing", 2)
    metric = metric_put(content=scored("score"))["hash"]
    for turn, value in zip(measure(world, metric, [2, 4, 5]).values(), [2, 4, 5], strict=True):
        annotate(turn, reader_user, value)
    got = get(reader_client, metric)
    assert spearmanr([2, 4, 5], [2, 4, 5]).pvalue == 0.0  # what the answer used to be
    assert got["spearman_rho"] == 1 and got["spearman_p"] == pytest.approx(1 / 3, abs=1e-12)
    assert got["spearman_p"] == pytest.approx(exact_p([2, 4, 5], [2, 4, 5]), abs=1e-12)
    assert got["cohen_kappa_quadratic"] == 1 and got["cohen_kappa_reason"] is None
    assert got["spearman_rho_ci"]["low"] is None
    assert "one world" in got["spearman_rho_ci"]["reason"]


@pytest.mark.parametrize("labels", [[True, False, True], [1, 0, 1]])
def test_kappa_is_withheld_between_a_one_to_five_judge_and_zero_one_labels(
    labels: list[Any], reader_client: APIClient, reader_user: User, toy_sources: str
) -> None:
    world = buyers_world("flagged", 2)
    metric = metric_put(content=scored("score"))["hash"]
    for turn, label in zip(measure(world, metric, [5, 1, 4]).values(), labels, strict=True):
        annotate(turn, reader_user, label)
    got = get(reader_client, metric)
    assert got["n"] == 3 and got["spearman_rho"] == pytest.approx(
        spearmanr([5, 1, 4], [1, 0, 1]).statistic
    )
    assert got["cohen_kappa_quadratic"] is None and "1–5" in got["cohen_kappa_reason"]
    assert got["cohen_kappa_ci"]["low"] is None
    assert got["krippendorff_alpha_level"] == "interval"
    alpha = krippendorff.alpha(
        reliability_data=[[5, 1, 4], [1, 0, 1]], level_of_measurement="interval"
    )
    assert got["krippendorff_alpha"] == pytest.approx(alpha, abs=1e-12)


def test_the_bootstraps_formulas_are_scipys_and_scikit_learns() -> None:
    """The bootstrap asks a formula a thousand times instead of the library: the same numbers."""
    rng = np.random.default_rng(38)
    for _ in range(50):
        x = rng.integers(1, 6, 12).astype(float)
        y = rng.integers(1, 6, 12).astype(float)
        kappa = cohen_kappa_score(x, y, labels=[1, 2, 3, 4, 5], weights="quadratic")
        assert fast_kappa(x, y, (1, 5)) == pytest.approx(kappa, abs=1e-12)
        assert fast_rho(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)
