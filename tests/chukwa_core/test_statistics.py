"""The statistics layer (chukwa_core/statistics), checked against scipy's and statsmodels' own
answers on the same data, at the edges the issue lists: 20/20, 0/20, 1/20, one to three pairs,
no variation, ties, missing sides, the exact/Monte Carlo boundary (19 vs 20 non-zero pairs), the
demo's exact McNemar, and replicate-order invariance. Where the old module
(the experiment_stats module these replace) gave the wrong answer, the test's name says so."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.rates import confint_poisson

from chukwa_core.statistics import (
    IntervalStatus,
    MetricScale,
    MetricType,
    compare_pairs,
    statistics_for,
    summarize_arm,
)
from chukwa_core.statistics.binary import newcombe_paired
from chukwa_core.statistics.ordinal import rank_biserial, signed_rank_exact_p
from chukwa_core.statistics.pairs import RESAMPLES, sign_flip_exact_p
from chukwa_core.statistics.registry import register

BINARY, COUNT, CONTINUOUS = MetricScale.binary(), MetricScale.count(), MetricScale.continuous()
LIKERT = MetricScale.ordinal(1, 5)


def _scipy_sign_flip(differences: np.ndarray) -> float:
    return float(
        stats.permutation_test(
            (differences,),
            lambda x, axis=-1: np.mean(x, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=np.inf,
        ).pvalue
    )


# --- binary ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("successes", "n"), [(20, 20), (0, 20), (1, 20), (7, 13), (1, 1)])
def test_a_binary_arm_has_statsmodels_wilson_interval(successes: int, n: int) -> None:
    summary = summarize_arm(BINARY, [1.0] * successes + [0.0] * (n - successes) + [None])
    low, high = proportion_confint(successes, n, alpha=0.05, method="wilson")
    assert (summary.n, summary.n_missing, summary.mean) == (n, 1, successes / n)
    assert summary.interval.shown
    assert (summary.interval.low, summary.interval.high) == (
        pytest.approx(low),
        pytest.approx(high),
    )
    assert 0 <= summary.interval.low < summary.interval.high <= 1  # type: ignore[operator]


def test_twenty_of_twenty_is_about_084_to_1_where_the_old_code_said_1_to_1() -> None:
    interval = summarize_arm(BINARY, [1.0] * 20).interval
    assert interval.low == pytest.approx(0.8389, abs=1e-4) and interval.high == 1.0


def test_no_binary_values_have_no_interval() -> None:
    summary = summarize_arm(BINARY, [None, None])
    assert (summary.n, summary.n_missing, summary.mean) == (0, 2, None)
    assert summary.interval.status is IntervalStatus.UNAVAILABLE


def test_the_demo_gives_the_exact_mcnemar_p_where_the_old_code_floored_a_monte_carlo_p() -> None:
    # 20 pairs, 12 discordant all one way (control 0, treatment 1), 8 concordant
    control = [0.0] * 12 + [1.0] * 4 + [0.0] * 4
    treatment = [1.0] * 12 + [1.0] * 4 + [0.0] * 4
    effect = compare_pairs(BINARY, control, treatment, seed=7)
    assert effect.test.exact and effect.test.p_value == pytest.approx(0.000488, abs=1e-6)
    assert effect.test.p_value == mcnemar([[4, 0], [12, 4]], exact=True).pvalue
    assert effect.test.p_value == pytest.approx(stats.binomtest(0, 12, 0.5).pvalue)
    assert effect.difference == pytest.approx(0.6) and effect.interval.shown
    assert [e.value for e in effect.effect_sizes] == [
        pytest.approx(16 / 4)
    ]  # risk ratio: 0.8 / 0.2


def test_newcombe_method_10_matches_the_published_paired_example() -> None:
    # 161 pairs: 59 both, 6 first only, 16 second only, 80 neither → -0.0621 (-0.1186 to -0.0046)
    low, high = newcombe_paired(59, 6, 16, 80)
    assert (round(low, 4), round(high, 4)) == (-0.1186, -0.0046)


def test_three_agreeing_binary_pairs_cannot_be_significant_and_their_interval_is_withheld() -> None:
    effect = compare_pairs(BINARY, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], seed=1)
    assert effect.test.p_value == 0.25 and not effect.test.can_reach_alpha
    assert "6 pairs are needed" in (effect.test.note or "")
    assert effect.interval.status is IntervalStatus.WITHHELD and effect.interval.low is None
    assert "excludes 0" in (effect.interval.reason or "")


def test_a_shown_binary_interval_never_contradicts_the_exact_mcnemar_p() -> None:
    withheld = 0
    for n in range(1, 13):
        for both, only_t, only_c in itertools.product(range(n + 1), repeat=3):
            if both + only_t + only_c > n:
                continue
            neither = n - both - only_t - only_c
            control = [1.0] * both + [0.0] * only_t + [1.0] * only_c + [0.0] * neither
            treatment = [1.0] * both + [1.0] * only_t + [0.0] * only_c + [0.0] * neither
            effect = compare_pairs(BINARY, control, treatment, seed=0)
            p, interval = effect.test.p_value, effect.interval
            assert p is not None
            if interval.shown:
                assert interval.low is not None and interval.high is not None
                assert -1 <= interval.low < interval.high <= 1  # never zero-width
                assert (interval.low > 0 or interval.high < 0) == (p < 0.05)
            else:
                withheld += 1
    assert withheld > 0


def test_every_binary_pair_concordant_gives_p_1_and_an_interval_around_0() -> None:
    effect = compare_pairs(BINARY, [1.0] * 20, [1.0] * 20, seed=0)
    assert effect.test.p_value == 1.0 and effect.difference == 0
    assert effect.interval.shown and effect.interval.low < 0 < effect.interval.high  # type: ignore[operator]


# --- count and continuous: paired t interval, sign-flip test, d_z ----------------------------


@pytest.mark.parametrize("n", [2, 3, 10])
def test_the_paired_interval_is_scipys_t_interval(n: int) -> None:
    rng = np.random.default_rng(n)
    control = rng.normal(size=n)
    treatment = control + 2.0 + rng.normal(size=n)
    effect = compare_pairs(CONTINUOUS, list(control), list(treatment), seed=0)
    d = treatment - control
    assert effect.difference == pytest.approx(d.mean())
    assert effect.effect_sizes[0].value == pytest.approx(d.mean() / d.std(ddof=1))
    own = stats.ttest_rel(treatment, control).confidence_interval(0.95)
    if effect.interval.shown:
        assert (effect.interval.low, effect.interval.high) == (
            pytest.approx(own.low),
            pytest.approx(own.high),
        )
    else:  # at 2-3 pairs the sign-flip p cannot be < 0.05: an interval excluding 0 is withheld
        assert effect.interval.status is IntervalStatus.WITHHELD and own.low > 0


@pytest.mark.parametrize(
    "differences",
    [
        [1.0, 2.0, 3.0],
        [0.5, -0.25, 1.5, 0.0, 2.0, 2.0, -1.0, 0.75],  # a zero and a tie
        list(np.random.default_rng(4).normal(0.3, 1, 12)),
    ],
)
def test_the_exact_sign_flip_p_is_scipys_exact_permutation_p(differences: list[float]) -> None:
    d = np.array(differences)
    effect = compare_pairs(CONTINUOUS, [0.0] * len(d), list(d), seed=0)
    assert effect.test.exact
    assert effect.test.p_value == pytest.approx(_scipy_sign_flip(d), rel=1e-12)


def test_19_non_zero_pairs_are_exact_and_20_are_monte_carlo_near_the_exact_p() -> None:
    rng = np.random.default_rng(19)
    d19 = rng.normal(0.4, 1, 19)
    at_19 = compare_pairs(CONTINUOUS, [0.0] * 19, list(d19), seed=3).test
    assert at_19.exact and at_19.monte_carlo_se is None
    assert at_19.p_value == pytest.approx(_scipy_sign_flip(d19), rel=1e-12)
    d20 = np.append(d19, 0.3)
    at_20 = compare_pairs(CONTINUOUS, [0.0] * 20, list(d20), seed=3).test
    assert not at_20.exact and at_20.resamples == RESAMPLES and at_20.seed == 3
    exact_20 = sign_flip_exact_p(d20)  # all 2^20 patterns, for the check
    assert at_20.monte_carlo_se is not None and at_20.p_value is not None
    assert abs(at_20.p_value - exact_20) < 4 * at_20.monte_carlo_se + 1 / RESAMPLES
    # zeros do not count toward the patterns: 19 non-zero of 25 pairs is still exact
    padded = compare_pairs(CONTINUOUS, [0.0] * 25, [*d19, *[0.0] * 6], seed=3).test
    assert padded.exact and padded.p_value == at_19.p_value


def test_a_monte_carlo_p_at_its_floor_is_shown_as_below_one_over_b_plus_1() -> None:
    d = [1.0 + i / 10 for i in range(25)]
    test = compare_pairs(CONTINUOUS, [0.0] * 25, d, seed=5).test
    assert test.at_floor and test.p_value == pytest.approx(1 / (RESAMPLES + 1))
    assert test.display == "< 0.0001"


@pytest.mark.parametrize("n", [8, 25])
def test_the_same_pairs_in_another_replicate_order_give_the_same_numbers(n: int) -> None:
    rng = np.random.default_rng(n)
    control = list(rng.normal(size=n))
    treatment = [c + 0.2 + e for c, e in zip(control, rng.normal(size=n), strict=True)]
    order = rng.permutation(n)
    first = compare_pairs(CONTINUOUS, control, treatment, seed=11)
    again = compare_pairs(
        CONTINUOUS, [control[i] for i in order], [treatment[i] for i in order], seed=11
    )
    assert first.test.p_value == again.test.p_value
    assert first.interval.low == pytest.approx(again.interval.low)
    scores = [float(v) for v in rng.integers(1, 6, size=n)]
    judged = [float(v) for v in rng.integers(1, 6, size=n)]
    ranked = compare_pairs(LIKERT, scores, judged, seed=2).test.p_value
    reordered = [scores[i] for i in order], [judged[i] for i in order]
    assert compare_pairs(LIKERT, *reordered, seed=2).test.p_value == ranked


def test_a_pair_with_a_missing_side_is_dropped_and_counted() -> None:
    effect = compare_pairs(COUNT, [1.0, None, 2.0, 3.0, 0.0], [2.0, 5.0, None, 4.0, 1.0], seed=1)
    assert (effect.n_pairs, effect.n_dropped) == (3, 2)
    assert (effect.control_mean, effect.treatment_mean) == (pytest.approx(4 / 3), 7 / 3)
    with pytest.raises(ValueError, match="same replicates"):
        compare_pairs(COUNT, [1.0], [1.0, 2.0], seed=1)
    empty = compare_pairs(COUNT, [None], [1.0], seed=1)
    assert (empty.n_pairs, empty.difference, empty.test.p_value) == (0, None, None)


def test_three_agreeing_pairs_are_uninformative_where_the_old_code_showed_ci_1_1() -> None:
    effect = compare_pairs(CONTINUOUS, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], seed=7)
    assert effect.test.p_value == 0.25 and not effect.test.can_reach_alpha
    assert effect.interval.status is IntervalStatus.UNINFORMATIVE
    assert effect.effect_sizes[0].value is None  # d_z of no variation


def test_one_pair_has_no_interval_and_cannot_be_significant() -> None:
    effect = compare_pairs(CONTINUOUS, [0.0], [1.0], seed=1)
    assert effect.interval.status is IntervalStatus.UNAVAILABLE
    assert effect.test.p_value == 1.0 and not effect.test.can_reach_alpha


def test_a_t_interval_contradicting_the_exact_p_is_withheld_with_its_reason() -> None:
    effect = compare_pairs(CONTINUOUS, [0.0, 0.0, 0.0], [1.0, 1.5, 1.2], seed=1)
    assert effect.interval.status is IntervalStatus.WITHHELD
    assert effect.interval.low is None and effect.interval.high is None
    assert "excludes 0" in (effect.interval.reason or "") and "0.25" in (
        effect.interval.reason or ""
    )


# --- per-arm intervals of counts, scales and continuous values -------------------------------


def test_count_intervals_never_go_below_zero_where_the_old_t_interval_did() -> None:
    values = [0.0, 0.0, 1.0, 0.0, 2.0]
    interval = summarize_arm(COUNT, values).interval
    assert interval.shown and 0 < interval.low < 0.6 < interval.high  # type: ignore[operator]


def test_a_count_sample_not_over_dispersed_gets_the_exact_poisson_interval() -> None:
    for values in ([0.0] * 5, [3.0, 3.0, 3.0], [1.0, 2.0, 1.0, 2.0]):
        interval = summarize_arm(COUNT, values).interval
        low, high = confint_poisson(int(sum(values)), len(values), method="exact-c")
        assert (interval.low, interval.high) == (pytest.approx(low), pytest.approx(high))
        assert interval.low < interval.high  # all zeros and all-equal included: never zero-width


def test_an_over_dispersed_count_sample_gets_the_quasi_poisson_glm_interval() -> None:
    import statsmodels.api as sm

    values = np.array([0.0, 7.0, 1.0, 12.0, 3.0, 0.0])
    interval = summarize_arm(COUNT, list(values)).interval
    fit = sm.GLM(values, np.ones((6, 1)), family=sm.families.Poisson()).fit(scale="X2", use_t=True)
    low, high = np.exp(fit.conf_int(alpha=0.05)[0])
    assert (interval.low, interval.high) == (pytest.approx(low), pytest.approx(high))


def test_a_judges_5_5_4_stays_on_its_1_to_5_scale_where_the_old_interval_reached_6_1() -> None:
    summary = summarize_arm(LIKERT, [5.0, 5.0, 4.0])
    interval = summary.interval
    assert interval.shown and 1 <= interval.low < summary.mean < interval.high <= 5  # type: ignore[operator]
    # statsmodels' Wilson interval on the rescaled mean with the effective n and t for z
    u = (np.array([5.0, 5.0, 4.0]) - 1) / 4
    n_eff = u.mean() * (1 - u.mean()) * 3 / u.var(ddof=1)
    alpha = 2 * stats.norm.sf(stats.t.ppf(0.975, 2))
    low, high = proportion_confint(u.mean() * n_eff, n_eff, alpha=alpha, method="wilson")
    assert (interval.low, interval.high) == (
        pytest.approx(1 + 4 * low),
        pytest.approx(1 + 4 * high),
    )


def test_a_scale_without_spread_still_gets_a_non_zero_interval_inside_it() -> None:
    interval = summarize_arm(LIKERT, [5.0, 5.0, 5.0]).interval
    assert interval.shown and 1 <= interval.low < interval.high == 5  # type: ignore[operator]


def test_continuous_arms_by_range() -> None:
    values = [2.0, None, 3.5, 1.0, 4.0]
    interval = summarize_arm(CONTINUOUS, values).interval
    own = stats.ttest_1samp([2.0, 3.5, 1.0, 4.0], 0.0).confidence_interval(0.95)
    assert (interval.low, interval.high) == (pytest.approx(own.low), pytest.approx(own.high))
    positive = summarize_arm(MetricScale.continuous(low=0), [0.1, 0.2, 3.0]).interval
    assert positive.shown and 0 < positive.low  # type: ignore[operator]
    same = summarize_arm(CONTINUOUS, [1.5, 1.5, 1.5]).interval
    assert same.status is IntervalStatus.UNINFORMATIVE and same.low is None
    assert summarize_arm(CONTINUOUS, [1.5]).interval.status is IntervalStatus.UNAVAILABLE


# --- ordinal: Wilcoxon signed-rank, rank-biserial ---------------------------------------------


def test_the_signed_rank_p_is_scipys_exact_p_without_ties() -> None:
    control = [1.0, 2.0, 1.0, 3.0, 2.0, 1.0, 1.0]
    treatment = [2.0, 5.0, 4.0, 2.0, 5.0, 5.0, 3.0]
    d = np.array(treatment) - np.array(control)
    effect = compare_pairs(LIKERT, control, treatment, seed=0)
    own = stats.wilcoxon(d, method=stats.PermutationMethod(n_resamples=np.inf)).pvalue
    assert effect.test.exact and effect.test.p_value == pytest.approx(own)
    distinct = np.array([1.0, -2.0, 3.0, 4.0, 5.0, -6.0, 7.0, 8.0])
    assert signed_rank_exact_p(distinct) == pytest.approx(
        stats.wilcoxon(distinct, method="exact").pvalue
    )


def test_ties_and_zeros_match_scipys_permutation_wilcoxon() -> None:
    d = np.array([1.0, 1.0, -1.0, 2.0, 0.0, 2.0, 2.0, -2.0, 0.0, 1.0])
    effect = compare_pairs(LIKERT, [3.0] * 10, list(3.0 + d), seed=0)
    own = stats.wilcoxon(
        d, zero_method="wilcox", method=stats.PermutationMethod(n_resamples=np.inf)
    )
    assert effect.test.p_value == pytest.approx(own.pvalue)
    # rank-biserial: (R+ - R-)/(R+ + R-) over the non-zero differences' average ranks
    nonzero = d[d != 0]
    ranks = stats.rankdata(np.abs(nonzero))
    expected = (ranks[nonzero > 0].sum() - ranks[nonzero < 0].sum()) / ranks.sum()
    assert effect.effect_sizes[0].value == pytest.approx(expected)
    assert rank_biserial(np.array([1.0, 2.0])) == 1.0
    assert effect.interval.shown is False or -4 <= effect.interval.low  # type: ignore[operator]


def test_an_ordinal_difference_interval_stays_within_the_scales_width() -> None:
    effect = compare_pairs(LIKERT, [1.0, 1.0, 1.0, 5.0], [5.0, 5.0, 5.0, 1.0], seed=0)
    assert effect.interval.status is not IntervalStatus.SHOWN or (
        -4 <= effect.interval.low and effect.interval.high <= 4  # type: ignore[operator]
    )
    many = compare_pairs(LIKERT, [1.0] * 30, [2.0] * 29 + [3.0], seed=0)
    assert many.test.exact and many.test.p_value == pytest.approx(2 / 2**30)


# --- validation and the registry ---------------------------------------------------------------


def test_values_outside_a_types_range_are_refused() -> None:
    with pytest.raises(ValueError, match="0 or 1"):
        summarize_arm(BINARY, [2.0])
    with pytest.raises(ValueError, match="range"):
        summarize_arm(COUNT, [-1.0])
    with pytest.raises(ValueError, match="whole number"):
        summarize_arm(COUNT, [1.5])
    with pytest.raises(ValueError, match="range"):
        compare_pairs(LIKERT, [0.0], [1.0], seed=0)
    with pytest.raises(ValueError, match="integer scale"):
        MetricScale(MetricType.ORDINAL, 1, None)


def test_every_metric_type_is_registered_once() -> None:
    for metric_type in MetricType:
        assert statistics_for(metric_type).metric_type is metric_type
    with pytest.raises(ValueError, match="already registered"):
        register(statistics_for(MetricType.COUNT))


def test_every_result_names_its_method_and_library_version() -> None:
    for scale, values in (
        (BINARY, [0.0, 1.0, 1.0]),
        (COUNT, [1.0, 4.0, 0.0]),
        (LIKERT, [1.0, 3.0, 4.0]),
    ):
        summary = summarize_arm(scale, values)
        effect = compare_pairs(scale, values, values[::-1], seed=0)
        for text in (summary.interval.library, effect.test.library, effect.interval.library):
            assert any(f"{name} " in text for name in ("scipy", "statsmodels", "numpy"))
            assert any(ch.isdigit() for ch in text)
        assert effect.test.method and summary.interval.method
