"""Factorial designs (chukwa_core/factorial.py) and their analysis
(chukwa_core/statistics/factorial.py): the arms of a product or a half fraction against the
textbook's 2^(3-1) (generator C = ±AB), and every fit against statsmodels' own fit of the same
data built independently here (patsy's sum coding, cluster-robust covariance)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf

from chukwa_core.errors import ChukwaError
from chukwa_core.factorial import factorial_design
from chukwa_core.statistics import MetricScale
from chukwa_core.statistics.factorial import Observation, fit_factorial


def _two(name: str, low: str = "no", high: str = "yes") -> dict:
    return {"name": name, "levels": [{"label": low}, {"label": high, "fork": {"f": name}}]}


def test_two_by_two_gives_four_arms_labelled_by_level() -> None:
    design = factorial_design([_two("thirst"), _two("fountain")])
    assert [arm.label for arm in design.arms] == [
        "thirst-no--fountain-no",
        "thirst-no--fountain-yes",
        "thirst-yes--fountain-no",
        "thirst-yes--fountain-yes",
    ]
    assert design.fraction is None
    assert design.base_arm.label == "thirst-no--fountain-no"
    assert design.base_arm.forks == ()
    assert design.arms[3].forks == ({"f": "thirst"}, {"f": "fountain"})
    assert design.estimable_words == (("thirst",), ("fountain",), ("thirst", "fountain"))


def test_half_of_two_cubed_is_the_textbook_fraction_with_the_base() -> None:
    design = factorial_design([_two("a"), _two("b"), _two("c")], "1/2")
    fraction = design.fraction
    assert fraction is not None
    assert len(design.arms) == 4
    assert (fraction.defining_word, fraction.sign, fraction.resolution) == (("a", "b", "c"), -1, 3)
    # the textbook's generator: C = -AB (the half holding (-,-,-)), so ABC = -1 on every run
    codes = [tuple(1 if i else -1 for i in arm.levels) for arm in design.arms]
    textbook = [(a, b, -a * b) for a, b in itertools.product((-1, 1), repeat=2)]
    assert sorted(codes) == sorted(textbook)
    assert design.base_arm.levels == (0, 0, 0)
    # A is aliased with BC, B with AC, C with AB (each with the sign -)
    aliases = {s.estimable: s.aliases for s in fraction.alias_sets}
    assert aliases == {
        ("a",): ((-1, ("b", "c")),),
        ("b",): ((-1, ("a", "c")),),
        ("c",): ((-1, ("a", "b")),),
    }
    text = design.text()
    assert "I = -ABC, resolution III" in text and "A = -BC" in text and "C = -AB" in text


def test_half_of_two_to_the_fourth_is_resolution_four() -> None:
    design = factorial_design([_two(n) for n in "abcd"], "1/2")
    assert design.fraction is not None
    assert (len(design.arms), design.fraction.sign, design.fraction.resolution) == (8, 1, 4)
    aliases = {s.estimable: s.aliases for s in design.fraction.alias_sets}
    assert aliases[("a",)] == ((1, ("b", "c", "d")),)
    assert aliases[("a", "b")] == ((1, ("c", "d")),)
    assert len(design.estimable_words) == 7


def test_three_level_factor_full_product() -> None:
    colour = {"name": "colour", "levels": [{"label": "red"}, {"label": "green"}, {"label": "blue"}]}
    design = factorial_design([colour, _two("thirst")])
    assert len(design.arms) == 6
    assert "colour-blue--thirst-yes" in {arm.label for arm in design.arms}


def test_long_labels_are_shortened_by_the_stated_rule() -> None:
    long = "x" * 30
    design = factorial_design([_two(long + "a", "l" * 20, "h" * 20), _two(long + "b")])
    assert design.arms[0].label == ("l" * 20) + "--no"
    assert "levels alone" in design.label_rule
    longer = factorial_design([_two("a", "l" * 40, "h" * 40), _two("b", "m" * 40, "n" * 40)])
    assert longer.arms[0].label == "cell-1-1" and "cell-" in longer.label_rule


@pytest.mark.parametrize(
    ("factors", "fraction", "field"),
    [
        ([_two("a")], None, "factors"),
        ([_two("a"), {"name": "B", "levels": [{"label": "x"}, {"label": "y"}]}], None,
         "factors[1].name"),
        ([_two("a"), {"name": "b", "levels": [{"label": "x"}]}], None, "factors[1].levels"),
        ([_two("a"), {"name": "b", "levels": [{"label": "x"}, {"label": "x"}]}], None,
         "factors[1].levels[1].label"),
        ([_two("a"), {"name": "b", "levels": [{"label": "x"}, {"label": "bad label"}]}], None,
         "factors[1].levels[1].label"),
        ([_two("a"), _two("a")], None, "factors[1].name"),
        ([_two("a"), {"name": "b", "levels": [{"label": "x", "fork": {}}, {"label": "y"}]}],
         None, "factors[1].levels[0].fork"),
        ([_two("a"), _two("b"), _two("c")], "1/4", "fraction"),
        ([_two("a"), _two("b")], "1/2", "fraction"),
        ([_two("a"), _two("b"),
          {"name": "c", "levels": [{"label": "x"}, {"label": "y"}, {"label": "z"}]}], "1/2",
         "fraction"),
    ],
)  # fmt: skip
def test_bad_inputs_name_their_field(factors: list, fraction: str | None, field: str) -> None:
    with pytest.raises(ChukwaError) as raised:
        factorial_design(factors, fraction)
    assert raised.value.status_code == 400
    assert raised.value.details["field"] == field
    assert raised.value.message.startswith(field + ":")


# -- analysis -------------------------------------------------------------------------------


def _simulate(design, replicates: int, mean, rng, noise: float = 1.0):  # type: ignore[no-untyped-def]
    observations, rows = [], []
    shared = rng.normal(0, noise, replicates)  # the replicate's seed, shared by its arms
    for arm in design.arms:
        for r in range(replicates):
            value = mean(arm.levels) + shared[r] + rng.normal(0, noise)
            observations.append(Observation(arm.label, r + 1, float(value)))
            rows.append({**{f"f{i}": lv for i, lv in enumerate(arm.levels)}, "y": value,
                         "rep": r + 1})  # fmt: skip
    return observations, pd.DataFrame(rows)


def test_two_by_two_matches_statsmodels_and_recovers_the_interaction() -> None:
    design = factorial_design([_two("thirst"), _two("fountain")])
    rng = np.random.default_rng(4)
    # cell means: 0, 0, 0 and 4 for yes/yes: mains of +1 (coded) each, interaction +1
    observations, frame = _simulate(design, 30, lambda lv: 4.0 * lv[0] * lv[1], rng)
    fit = fit_factorial(design, MetricScale.continuous(), observations)
    reference = smf.ols("y ~ C(f0, Sum(1)) * C(f1, Sum(1))", frame).fit(
        cov_type="cluster", cov_kwds={"groups": frame["rep"]}, use_t=True
    )
    # patsy's Sum codes the *last* level -1; ours the first: coefficients change sign per factor
    signs = [-1, -1, 1]
    for term, sign, (name, value) in zip(fit.terms, signs, list(reference.params.items())[1:],
                                         strict=True):  # fmt: skip
        assert term.coefficient == pytest.approx(sign * value, rel=1e-9), name
        low, high = reference.conf_int().loc[name]
        expected = sorted((sign * low, sign * high))
        assert (term.interval.low, term.interval.high) == pytest.approx(expected, rel=1e-9)
        assert term.p_value == pytest.approx(reference.pvalues[name], rel=1e-9)
    interaction = fit.terms[2]
    assert interaction.name == "thirst:fountain"
    assert interaction.interval.low < 1.0 < interaction.interval.high
    assert interaction.interval.low > 0
    assert fit.n_replicates == 30 and fit.note is None


def test_half_fraction_fits_the_main_effects_and_names_their_aliases() -> None:
    design = factorial_design([_two("a"), _two("b"), _two("c")], "1/2")
    rng = np.random.default_rng(7)
    observations, frame = _simulate(design, 20, lambda lv: 2.0 * lv[0] + 1.0 * lv[2], rng)
    fit = fit_factorial(design, MetricScale.continuous(), observations)
    assert [t.name for t in fit.terms] == ["a", "b", "c"]
    assert [t.aliased_with for t in fit.terms] == [("-b:c",), ("-a:c",), ("-a:b",)]
    coded = frame.assign(**{f"x{i}": 2 * frame[f"f{i}"] - 1 for i in range(3)})
    reference = smf.ols("y ~ x0 + x1 + x2", coded).fit(
        cov_type="cluster", cov_kwds={"groups": coded["rep"]}, use_t=True
    )
    for term, name in zip(fit.terms, ["x0", "x1", "x2"], strict=True):
        assert term.coefficient == pytest.approx(reference.params[name], rel=1e-9)
        assert [term.interval.low, term.interval.high] == pytest.approx(
            list(reference.conf_int().loc[name]), rel=1e-9
        )
    assert fit.terms[0].contrast[0] == pytest.approx(2.0, abs=0.4)
    assert fit.aliasing is not None and "A = -BC" in fit.aliasing


def test_binary_by_logistic_regression_matches_statsmodels_glm() -> None:
    design = factorial_design([_two("a"), _two("b")])
    rng = np.random.default_rng(11)
    probability = {(0, 0): 0.2, (0, 1): 0.4, (1, 0): 0.5, (1, 1): 0.8}
    observations, rows = [], []
    for arm in design.arms:
        for r in range(60):
            value = float(rng.random() < probability[arm.levels])
            observations.append(Observation(arm.label, r + 1, value))
            codes = [2 * lv - 1 for lv in arm.levels]
            rows.append([1.0, codes[0], codes[1], codes[0] * codes[1], value, r + 1])
    data = np.array(rows)
    reference = sm.GLM(data[:, 4], data[:, :4], family=sm.families.Binomial()).fit(
        cov_type="cluster", cov_kwds={"groups": data[:, 5]}, use_t=True
    )
    fit = fit_factorial(design, MetricScale.binary(), observations)
    assert fit.scale == "log-odds" and "logit" in fit.method
    assert fit.intercept == pytest.approx(reference.params[0], rel=1e-8)
    for i, term in enumerate(fit.terms, start=1):
        assert term.coefficient == pytest.approx(reference.params[i], rel=1e-8)
        assert [term.interval.low, term.interval.high] == pytest.approx(
            list(reference.conf_int()[i]), rel=1e-8
        )
    assert fit.terms[0].interval.low > 0  # a's main effect is clearly positive


def test_three_level_factor_is_sum_coded_against_the_base() -> None:
    colour = {"name": "colour", "levels": [{"label": "red"}, {"label": "green"}, {"label": "blue"}]}
    design = factorial_design([colour, _two("thirst")])
    rng = np.random.default_rng(3)
    observations, _ = _simulate(design, 12, lambda lv: [0.0, 3.0, 6.0][lv[0]], rng, 0.5)
    fit = fit_factorial(design, MetricScale.continuous(), observations)
    names = [t.name for t in fit.terms]
    assert names == ["colour[green]", "colour[blue]", "thirst",
                     "colour[green]:thirst", "colour[blue]:thirst"]  # fmt: skip
    # level j's coefficient is its marginal mean minus the grand mean: 0 and +3 here
    assert fit.terms[0].coefficient == pytest.approx(0.0, abs=0.5)
    assert fit.terms[1].coefficient == pytest.approx(3.0, abs=0.5)
    assert fit.terms[0].contrast == (None, None, None)


def test_a_fit_without_variation_or_replicates_says_why() -> None:
    design = factorial_design([_two("a"), _two("b")])
    same = [Observation(arm.label, r, 1.0) for arm in design.arms for r in (1, 2)]
    fit = fit_factorial(design, MetricScale.count(), same)
    assert fit.terms[0].coefficient is None and "same value" in (fit.note or "")
    one = [Observation(arm.label, 1, float(i)) for i, arm in enumerate(design.arms)]
    assert "fewer than 2" in (fit_factorial(design, MetricScale.count(), one).note or "")
