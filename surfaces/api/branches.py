"""How a world shows where it came from and what undoes its seed: its branch point (read and
written) and the warnings of sources that fix their own seed (docs/worlds.md)."""

from __future__ import annotations

from rest_framework import serializers

from surfaces.api.contract import (
    HashOutField,
    LabelField,
    LabelOutField,
    StrictInputSerializer,
    StrictIntegerField,
)


class BranchFromSerializer(serializers.Serializer):
    world = LabelOutField(help_text="the parent world (it may have been deleted since)")
    turn = serializers.IntegerField(help_text="the parent's turn this world starts at")

    class Meta:
        ref_name = "BranchFrom"


class SeedWarningSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    source_hash = HashOutField()

    class Meta:
        ref_name = "SeedWarning"


class BranchFromInputSerializer(StrictInputSerializer):
    world = LabelField(help_text="an existing world")
    turn = StrictIntegerField(min_value=0, help_text="one of its committed turns")

    class Meta:
        ref_name = "BranchFromInput"
