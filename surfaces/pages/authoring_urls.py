"""Workflow authoring pages (see surfaces/pages/authoring.py)."""

from django.urls import URLPattern, path

from surfaces.pages import authoring

urlpatterns: list[URLPattern] = [
    path("workflows/author/", authoring.workflow_author, name="page-workflow-author"),
    path(
        "workflows/author/subjects",
        authoring.workflow_author_subjects,
        name="page-workflow-author-subjects",
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
    path("workflows/author/save", authoring.workflow_author_save, name="page-workflow-author-save"),
    path("workflows/author/fork", authoring.workflow_author_fork, name="page-workflow-author-fork"),
]
