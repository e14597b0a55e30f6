"""A factorial design's arms from its factors (docs/designs.md): the full product of
every factor's levels, or the regular half fraction of an all-two-level design, with the
fraction's defining relation, resolution and alias structure as typed values and as text.

Coding: a factor's first level is its base (the base scenario's value); in a two-level factor
the first level is coded -1 and the second +1, the textbook's "low" and "high". An effect is a
word, the set of factors whose codes it multiplies (``("a", "b")`` is the AB interaction).

The half fraction of k two-level factors is the one whose defining word is every factor (the
highest resolution a half fraction can have: k). Of its two halves, the one holding the
all-first-levels run (the base itself, the experiment's control) is kept, so the sign of the
defining relation is (-1)^k: I = -ABC for three factors, I = +ABCD for four. Both halves have
the same resolution and the same alias pairs; the sign says that the contrast of A estimates
A - BC (for I = -ABC) rather than A + BC. Pure: no Django.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chukwa_core.errors import invalid
from chukwa_core.ids import label_problem

HALF = "1/2"
FRACTIONS = (HALF,)
MAX_FACTORS = 6
MAX_ARMS = 64
LABEL_LIMIT = 64
# "thirst-yes--fountain-no": a factor's name and level joined by "-", the factors by "--"
LEVEL_JOIN, FACTOR_JOIN = "-", "--"
ROMAN = {2: "II", 3: "III", 4: "IV", 5: "V", 6: "VI"}

Word = tuple[str, ...]  # factor names in the design's order; () is the identity I


@dataclass(frozen=True)
class Level:
    label: str
    # the store's fork-one-field request without its parent; None: the base's value
    fork: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Factor:
    name: str
    levels: tuple[Level, ...]

    @property
    def two_level(self) -> bool:
        return len(self.levels) == 2


@dataclass(frozen=True)
class FactorialArm:
    """One run of the design: the level of every factor (by index, 0 the base) and its label."""

    label: str
    levels: tuple[int, ...]
    level_labels: tuple[str, ...]
    forks: tuple[Mapping[str, Any], ...]  # the forks to apply to the base, factor order

    @property
    def is_base(self) -> bool:
        return not any(self.levels)


@dataclass(frozen=True)
class AliasSet:
    """Effects the fraction cannot tell apart: the contrast of ``words[0]`` estimates
    ``words[0] + signs[1]·words[1]`` (``signs[0]`` is always +1)."""

    words: tuple[Word, ...]
    signs: tuple[int, ...]

    @property
    def estimable(self) -> Word:
        """The word the fit names: the lowest order one (the first of equals)."""
        return self.words[0]

    @property
    def aliases(self) -> tuple[tuple[int, Word], ...]:
        return tuple(zip(self.signs[1:], self.words[1:], strict=True))


@dataclass(frozen=True)
class Fraction:
    spec: str
    defining_word: Word
    sign: int  # I = sign · defining_word
    resolution: int
    alias_sets: tuple[AliasSet, ...]  # every effect but the identity's set

    def alias_set_of(self, word: Word) -> AliasSet | None:
        for alias_set in self.alias_sets:
            if word in alias_set.words:
                return alias_set
        return None

    def text(self, letters: Mapping[str, str]) -> str:
        relation = f"I = {'+' if self.sign > 0 else '-'}{_letters(self.defining_word, letters)}"
        lines = [
            f"{self.spec} fraction, {relation}, resolution {ROMAN.get(self.resolution, self.resolution)}",
        ]
        for alias_set in self.alias_sets:
            joined = " = ".join(
                [_letters(alias_set.words[0], letters)]
                + [
                    f"{'+' if sign > 0 else '-'}{_letters(word, letters)}"
                    for sign, word in alias_set.aliases
                ]
            )
            lines.append(joined)
        return "\n".join(lines)


@dataclass(frozen=True)
class FactorialDesign:
    factors: tuple[Factor, ...]
    arms: tuple[FactorialArm, ...]
    fraction: Fraction | None
    label_rule: str  # how the arms' labels were formed (shortened or not)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.factors)

    @property
    def letters(self) -> dict[str, str]:
        """A, B, C… for the factors in order (the textbook's notation in the alias text)."""
        return {f.name: chr(ord("A") + i) for i, f in enumerate(self.factors)}

    @property
    def base_arm(self) -> FactorialArm:
        return next(arm for arm in self.arms if arm.is_base)

    @property
    def estimable_words(self) -> tuple[Word, ...]:
        """Every effect a fit can name (the full design: all words; a fraction: one per alias
        set, the lowest order one), lowest order first."""
        if self.fraction is not None:
            words = [s.estimable for s in self.fraction.alias_sets]
        else:
            words = list(all_words(self.names))
        return tuple(sorted(words, key=lambda w: (len(w), [self.names.index(n) for n in w])))

    def text(self) -> str:
        letters = self.letters
        legend = ", ".join(f"{letters[f.name]} = {f.name}" for f in self.factors)
        head = f"{len(self.arms)} arms from {len(self.factors)} factors ({legend})"
        if self.fraction is None:
            return f"{head}: the full factorial product; every effect is estimable."
        return f"{head}:\n{self.fraction.text(letters)}"


def all_words(names: Sequence[str]) -> tuple[Word, ...]:
    return tuple(
        word for order in range(1, len(names) + 1) for word in itertools.combinations(names, order)
    )


def _letters(word: Word, letters: Mapping[str, str]) -> str:
    return "".join(letters[name] for name in word) or "I"


def _product(word_a: Word, word_b: Word, names: Sequence[str]) -> Word:
    """The product of two effects: squares vanish (A·A = I), so the symmetric difference."""
    both = set(word_a) ^ set(word_b)
    return tuple(name for name in names if name in both)


def half_fraction(names: Sequence[str]) -> Fraction:
    k = len(names)
    defining = tuple(names)
    sign = -1 if k % 2 else 1  # the half holding the all-first-levels (all -1) run
    sets: list[AliasSet] = []
    seen: set[Word] = set()
    for word in all_words(names):
        if word in seen or word == defining:
            continue
        partner = _product(word, defining, names)
        seen.update((word, partner))
        ordered = sorted((word, partner), key=lambda w: (len(w), [names.index(n) for n in w]))
        sets.append(AliasSet(tuple(ordered), (1, sign)))
    return Fraction(HALF, defining, sign, k, tuple(sets))


def _check_label(value: object, field: str) -> str:
    problem = label_problem(value)
    if problem is not None:
        raise invalid("invalid_label", field, f"{value!r} {problem}")
    assert isinstance(value, str)
    return value


def parse_factors(raw: object) -> tuple[Factor, ...]:
    if not isinstance(raw, list) or len(raw) < 2:
        raise invalid("invalid_factors", "factors", "must be a list of at least 2 factors")
    if len(raw) > MAX_FACTORS:
        raise invalid("invalid_factors", "factors", f"at most {MAX_FACTORS} factors are allowed")
    factors: list[Factor] = []
    for i, item in enumerate(raw):
        where = f"factors[{i}]"
        if not isinstance(item, Mapping):
            raise invalid("invalid_factors", where, "must be an object with name and levels")
        unknown = sorted(set(item) - {"name", "levels"})
        if unknown:
            raise invalid("invalid_factors", f"{where}.{unknown[0]}", "is not a factor's field")
        name = _check_label(item.get("name"), f"{where}.name")
        if any(f.name == name for f in factors):
            raise invalid("duplicate_factor", f"{where}.name", f"{name!r} names two factors")
        levels_raw = item.get("levels")
        if not isinstance(levels_raw, list) or len(levels_raw) < 2:
            raise invalid("invalid_factors", f"{where}.levels", "must list at least 2 levels")
        levels: list[Level] = []
        for j, level in enumerate(levels_raw):
            at = f"{where}.levels[{j}]"
            if not isinstance(level, Mapping):
                raise invalid("invalid_factors", at, "must be an object with a label")
            unknown = sorted(set(level) - {"label", "fork"})
            if unknown:
                raise invalid("invalid_factors", f"{at}.{unknown[0]}", "is not a level's field")
            label = _check_label(level.get("label"), f"{at}.label")
            if any(seen.label == label for seen in levels):
                raise invalid("duplicate_level", f"{at}.label", f"{label!r} names two levels")
            fork = level.get("fork")
            if fork is not None and not isinstance(fork, Mapping):
                raise invalid("invalid_factors", f"{at}.fork", "must be an object")
            if fork is not None and j == 0:
                # the first level is the base: the control arm is the base scenario itself
                raise invalid("invalid_factors", f"{at}.fork", "the first level is the base's")
            levels.append(Level(label, fork))
        factors.append(Factor(name, tuple(levels)))
    return tuple(factors)


def _labels(factors: Sequence[Factor], runs: Sequence[tuple[int, ...]]) -> tuple[list[str], str]:
    """Arm labels, the longest readable form that fits the label grammar's 64 characters."""
    forms = (
        (
            "<factor>-<level> joined by '--'",
            lambda run: FACTOR_JOIN.join(
                f"{f.name}{LEVEL_JOIN}{f.levels[i].label}"
                for f, i in zip(factors, run, strict=True)
            ),
        ),
        (
            "<factor>-<level> joined by '--' was longer than 64 characters: the levels "
            "alone, joined by '--', in the factors' order",
            lambda run: FACTOR_JOIN.join(
                f.levels[i].label for f, i in zip(factors, run, strict=True)
            ),
        ),
        (
            "the levels' labels were too long for 64 characters: 'cell-' and each factor's "
            "level number (1 the first level), joined by '-', in the factors' order",
            lambda run: "cell-" + "-".join(str(i + 1) for i in run),
        ),
    )
    for rule, form in forms:
        labels = [form(run) for run in runs]
        if all(label_problem(x) is None for x in labels) and len(set(labels)) == len(labels):
            return labels, rule
    raise AssertionError("the numbered form always fits")  # pragma: no cover


def factorial_design(factors_raw: object, fraction: object = None) -> FactorialDesign:
    """The arms of ``factors`` (the request's list), all of them or the ``"1/2"`` fraction.
    Raises ChukwaError (400) naming the field at the first problem."""
    factors = parse_factors(factors_raw)
    names = tuple(f.name for f in factors)
    chosen: Fraction | None = None
    if fraction is not None:
        if fraction not in FRACTIONS:
            raise invalid("invalid_fraction", "fraction", f"must be one of {list(FRACTIONS)}")
        if not all(f.two_level for f in factors):
            raise invalid(
                "invalid_fraction",
                "fraction",
                "a regular fraction needs every factor to have exactly 2 levels",
            )
        if len(factors) < 3:
            raise invalid(
                "invalid_fraction",
                "fraction",
                "half of a 2x2 design aliases one main effect with the other (resolution II); "
                "a half fraction needs at least 3 factors",
            )
        chosen = half_fraction(names)
    runs = list(itertools.product(*(range(len(f.levels)) for f in factors)))
    if chosen is not None:
        # in the fraction: the runs whose codes (first level -1, second +1) multiply to the sign
        runs = [r for r in runs if _code_product(r) == chosen.sign]
    if len(runs) > MAX_ARMS:
        raise invalid(
            "too_many_arms", "factors", f"make {len(runs)} arms; at most {MAX_ARMS} are allowed"
        )
    labels, rule = _labels(factors, runs)
    arms = tuple(
        FactorialArm(
            label,
            run,
            tuple(f.levels[i].label for f, i in zip(factors, run, strict=True)),
            tuple(
                fork
                for f, i in zip(factors, run, strict=True)
                if (fork := f.levels[i].fork) is not None
            ),
        )
        for label, run in zip(labels, runs, strict=True)
    )
    return FactorialDesign(factors, arms, chosen, rule)


def _code_product(run: Sequence[int]) -> int:
    product = 1
    for index in run:
        product *= 1 if index else -1
    return product
