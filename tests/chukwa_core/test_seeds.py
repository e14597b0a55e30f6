"""Seeds stay inside I-JSON's safe range (|n| < 2^53), so a JavaScript client (the MCP Inspector,
a browser) shows and sends back exactly the seed Chukwa stored, never a rounded one."""

from __future__ import annotations

from chukwa_core.seeds import (
    CALL_SEED_LIMIT,
    SEED_LIMIT,
    call_seed,
    experiment_seed,
    replicate_seed,
    rule_seed,
    seed_problem,
)

SAFE = 2**53


def test_derived_world_seeds_are_below_two_to_the_53() -> None:
    assert SEED_LIMIT == SAFE
    for i in range(2000):
        seed = experiment_seed(f"experiment-{i}")
        assert 0 <= seed < SAFE
        for replicate in (1, 2, 1000):
            assert 0 <= replicate_seed(seed, replicate) < SAFE
    # the experiment the Inspector showed rounded (5202105026525348997 > 2^53) gets a safe one
    assert experiment_seed("thirst") < SAFE


def test_a_seed_of_two_to_the_53_is_refused_and_one_below_accepted() -> None:
    assert seed_problem(SAFE - 1) is None
    problem = seed_problem(SAFE)
    assert problem is not None and "2^53" in problem
    assert seed_problem(-1) is not None and seed_problem(True) is not None


def test_call_seeds_stay_32_bit() -> None:
    assert all(
        0 <= call_seed(SAFE - 1, t, "bob", "n", "r0.g0") < CALL_SEED_LIMIT for t in range(50)
    )
    assert rule_seed(1, 1, "bob", "n") != rule_seed(2, 1, "bob", "n")
