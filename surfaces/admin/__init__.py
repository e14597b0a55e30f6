"""Operator admin for the scenario store (SPEC §9); being split by entity (see ``scenarios``)."""

from surfaces.admin import scenarios

__all__ = ["scenarios"]
