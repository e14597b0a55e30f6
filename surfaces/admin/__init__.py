"""Operator admin for the scenario store.

Stored rows are immutable: change pages are read-only, nothing can be deleted, and "editing" saves
a new content-addressed row through the same services the API uses ("save as new").

Every write goes through a custom view, never ``ModelAdmin.changeform_view``: that view wraps the
request in ``transaction.atomic``, and the services own a durable transaction of their own.
Staff users may look; only operators (``is_operator``) may write.

Django's admin autodiscovery imports this module only: importing the entity modules here is
what registers their admins.
"""

from surfaces.admin import components, costs, names, scenarios

__all__ = ["components", "costs", "names", "scenarios"]
