"""The typed design (chukwa_core/experiment_design.py): its derived facts, its one progress, and
its stored form read back unchanged."""

from __future__ import annotations

from chukwa_core.experiment_design import (
    CANCELLED,
    COMPLETED,
    FAILED,
    RUNNING,
    Arm,
    BranchFrom,
    Budget,
    ExperimentDesign,
    PlannedIntervention,
    ReplayFrom,
    WorldProgress,
)


def _design(**extra: object) -> ExperimentDesign:
    fields: dict[str, object] = {
        "slug": "thirst",
        "name": "Thirst",
        "description": "",
        "arms": (
            Arm("control", "a" * 64),
            Arm("thirsty", "b" * 64, (PlannedIntervention(3, {"narration": "x"}, "dry"),)),
        ),
        "control": "control",
        "replicates": 3,
        "turns": 2,
        "metrics": ("m" * 64, "n" * 64),
        "seed": 7,
        **extra,
    }
    return ExperimentDesign(**fields)  # type: ignore[arg-type]


def test_derived_facts_start_at_turn_zero_without_a_branch() -> None:
    design = _design()
    assert (design.first_turn, design.last_turn) == (0, 2)
    assert list(design.run_turns) == [1, 2] and list(design.measured_turns) == [0, 1, 2]
    assert design.arm_labels == ("control", "thirsty")
    assert design.treatment_arms == ("thirsty",)
    assert (design.worlds_planned, design.turns_planned, design.measurements_planned) == (6, 12, 36)
    assert design.world_slugs([2]) == ["thirst--control--2", "thirst--thirsty--2"]


def test_a_branch_moves_every_turn_fact() -> None:
    design = _design(branch_from=BranchFrom("trunk", 5))
    assert (design.first_turn, design.last_turn) == (5, 7)
    assert list(design.run_turns) == [6, 7] and list(design.measured_turns) == [5, 6, 7]
    assert not design.world_finished(6) and design.world_finished(7)


def test_progress_counts_turns_from_the_first_and_worlds_short_of_the_last() -> None:
    design = _design(branch_from=BranchFrom("trunk", 5))
    worlds = [WorldProgress(7, False), WorldProgress(6, False), WorldProgress(5, True)]
    running = design.progress(worlds, measured=4, cancelled=False)
    assert running.status == RUNNING
    assert (running.turns_committed, running.turns_planned) == (3, 6)
    assert running.failed_worlds == 1  # the one stopped at 6; the pending one is not done yet
    assert running.measurements_planned == 3 * 3 * 2
    done = design.progress(worlds[:2], measured=0, cancelled=False)
    assert (done.status, done.failed_worlds) == (FAILED, 1)
    assert design.progress([WorldProgress(7, False)], measured=0, cancelled=False).status == (
        COMPLETED
    )
    assert design.progress(worlds, measured=0, cancelled=True).status == CANCELLED


def test_the_stored_form_reads_back_equal() -> None:
    design = _design(
        start_time=None,
        budget=Budget("2.5", None),
        branch_from=BranchFrom("trunk", 2),
        replay_from=ReplayFrom("old", "replay_strict"),
        primary="m" * 64,
    )
    stored = design.to_json()
    assert stored["first_turn"] == 2 and stored["arms"][1]["scenario_ref"] == {"hash": "b" * 64}
    assert ExperimentDesign.from_json(stored) == design
    assert ExperimentDesign.from_json(_design().to_json()) == _design()


def test_changes_after_creation_make_a_new_design() -> None:
    design = _design()
    assert design.with_replicates(5).replicates == 5 and design.replicates == 3
    more = design.with_metrics(["n" * 64, "o" * 64, "o" * 64])
    assert more.metrics == ("m" * 64, "n" * 64, "o" * 64)
