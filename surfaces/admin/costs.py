"""Admin for the price table and world budgets: staff read, operators write prices.

Prices are operator data, not content: an operator adds a row (a new price from a time on) or
corrects one; a call keeps the cost it was given and the row it used, and a row some call used
cannot be deleted (the foreign key protects it). Budgets are shown read-only here; they change
through the API or the CLI, which keep their history.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from cognition_app.models import ModelPrice
from surfaces.permissions import is_operator
from worlds_app.models import WorldBudget


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = (
        "url_env",
        "model",
        "input_per_million",
        "output_per_million",
        "cached_input_per_million",
        "batch_input_per_million",
        "batch_output_per_million",
        "valid_from",
        "created_by",
    )
    list_filter = ("url_env", "model")
    search_fields = ("model",)
    ordering = ("url_env", "model", "-valid_from")
    readonly_fields = ("created_at", "created_by")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_operator(request.user)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return is_operator(request.user)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False  # a price some call used must stay; a later row replaces it

    def save_model(self, request: HttpRequest, obj: ModelPrice, form: object, change: bool) -> None:
        if not change:
            obj.created_by = request.user.get_username()
        super().save_model(request, obj, form, change)


@admin.register(WorldBudget)
class WorldBudgetAdmin(admin.ModelAdmin):
    list_display = (
        "world",
        "max_tokens_per_turn",
        "max_cost_per_turn",
        "max_tokens_total",
        "max_cost_total",
        "set_at",
        "set_by",
    )
    list_select_related = ("world",)
    ordering = ("world", "-set_at")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False
