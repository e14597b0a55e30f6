"""The results table: columns aligned, numbers to three decimals, a missing value as "-", an
interval that is not shown named by its status, and the rows a methods reviewer asks for."""

from __future__ import annotations

from chukwa_core.experiment_analysis import (
    DesignFacts,
    MetricInput,
    WorldInput,
    methods_paragraph,
    metric_result,
    software,
    with_holm,
)
from chukwa_core.experiment_results_types import ExperimentResults
from chukwa_core.experiment_table import results_table
from chukwa_core.statistics import MetricScale


def _results(control: list[float | None], treated: list[float | None]) -> ExperimentResults:
    metric = MetricInput(
        hash="0" * 64,
        label="eaten",
        aggregate="any",
        turn_scale=MetricScale.binary(),
        world_scale=MetricScale.binary(),
        type_basis="inferred",
        primary=True,
        added_after_creation=False,
    )
    worlds = {
        arm: [
            WorldInput(
                i + 1, f"e--{arm}--{i + 1}", v, None if v is not None else "world_incomplete"
            )
            for i, v in enumerate(values)
        ]
        for arm, values in (("control", control), ("cautious", treated))
    }
    result = metric_result(
        metric,
        arms=["control", "cautious"],
        control="control",
        worlds=worlds,
        by_turn={},
        turns=range(0, 3),
        seed=7,
        registered_replicates=len(control),
    )
    adjusted, multiplicity = with_holm([result])
    facts = DesignFacts(
        "e", ["control", "cautious"], "control", len(control), len(control), 2, 0, 7, [], "a" * 64
    )
    return ExperimentResults(
        experiment="e",
        control="control",
        results=adjusted,
        registered_hash="a" * 64,
        history=(),
        multiplicity=multiplicity,
        missing_data="",
        methods=methods_paragraph(facts, adjusted, (), multiplicity),
        software=software(),
    )


def test_the_demo_table_shows_wilson_mcnemar_and_holm() -> None:
    table = results_table(_results([1.0] * 20, [1.0] * 8 + [0.0] * 12)).splitlines()
    assert table[0] == "metric eaten [primary] (aggregate: any; binary (0 or 1))"
    assert table[1].split() == ["arm", "n", "missing", "mean", "95%", "CI"]
    # 20 of 20: Wilson's [0.839, 1], never [1, 1]
    assert table[2].split() == ["control", "20", "0", "1.000", "[0.839,", "1.000]"]
    assert table[4].startswith("  CI: Wilson score interval")
    assert "effect" in table[5] and "p (Holm)" in table[5]
    row = table[6].split()
    assert row[:3] == ["cautious", "-", "control"] and row[3] == "20"
    assert row[4:7] == ["1.000", "/", "0.400"] and row[7] == "-0.600"
    assert row[-2:] == ["0.000488", "0.000488"]  # the exact McNemar p, alone in its family
    assert any("risk ratio" in line for line in table)
    assert table[-1].startswith("methods: Experiment e compared 2 arms")


def test_a_missing_arm_and_an_unavailable_interval_are_named() -> None:
    table = results_table(_results([1.0, 0.0, 1.0], [None, None, None]))
    lines = table.splitlines()
    assert lines[3].split() == ["cautious", "0", "3", "-", "unavailable"]
    effect = lines[6].split()
    assert effect[3] == "0" and effect[-1] == "-"


def test_the_methods_say_how_the_model_requests_went() -> None:
    """Reuse and batch mode are named beside the models: a reader reproducing the costs needs
    to know an identical request was answered once, and whether it went through batches."""
    base = ("e", ["control", "cautious"], "control", 2, 2, 2, 0, 7, ["gpt-4o-mini"], "a" * 64)
    said = {
        (reuse, mode): methods_paragraph(DesignFacts(*base, reuse=reuse, mode=mode), [], (), "")
        for reuse in ("exact", "off")
        for mode in ("online", "batch")
    }
    assert (
        "answered from that record instead of being sent again (reuse 'exact')"
        in (said["exact", "online"])
    )
    assert "every request was sent, none answered from a record" in said["off", "online"]
    assert "sent through the provider's Batch API, at its batch prices" in said["off", "batch"]
    assert "sent one at a time as each turn ran" in said["exact", "online"]
    assert "Batch API" in said["exact", "batch"] and "reuse 'exact'" in said["exact", "batch"]
    # no model, no request: nothing said
    no_model = DesignFacts(*base[:8], [], "a" * 64, reuse="off", mode="batch")
    assert "Model requests" not in methods_paragraph(no_model, [], (), "")
