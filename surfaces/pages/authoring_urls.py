"""Authoring pages (see surfaces/pages/authoring/)."""

from django.urls import URLPattern, path

from surfaces.pages.authoring import views as authoring
from surfaces.pages.authoring import worlds

urlpatterns: list[URLPattern] = [
    path("workflows/author/", authoring.workflow_author, name="page-workflow-author"),
    path(
        "workflows/author/subjects",
        authoring.workflow_author_subjects,
        name="page-workflow-author-subjects",
    ),
    path(
        "workflows/author/profiles",
        authoring.workflow_author_profiles,
        name="page-workflow-author-profiles",
    ),
    path(
        "workflows/author/validate",
        authoring.workflow_author_validate,
        name="page-workflow-author-validate",
    ),
    path(
        "workflows/author/preview",
        authoring.workflow_author_preview,
        name="page-workflow-author-preview",
    ),
    path(
        "workflows/author/review",
        authoring.workflow_author_review,
        name="page-workflow-author-review",
    ),
    path("workflows/author/save", authoring.workflow_author_save, name="page-workflow-author-save"),
    path("workflows/author/fork", authoring.workflow_author_fork, name="page-workflow-author-fork"),
    path("create-world/", worlds.create_world_page, name="page-create-world"),
]
