"""Server-rendered pages (see surfaces/pages/rendering.py): indexes and annotations in place."""

from django.urls import URLPattern, path

from surfaces.pages import annotations, indexes

urlpatterns: list[URLPattern] = [
    path("attempts/", indexes.attempt_index_page, name="page-attempt-index"),
    path("llm-calls/", indexes.llm_call_index_page, name="page-llm-call-index"),
    path("invocations/", indexes.invocation_index_page, name="page-invocation-index"),
    path("annotations/", indexes.annotation_index_page, name="page-annotation-index"),
    path(
        "annotations/on/attempt/<str:attempt_id>/",
        annotations.annotations_on_attempt,
        name="page-annotations-on-attempt",
    ),
    path(
        "annotations/on/llm-call/<str:call_id>/",
        annotations.annotations_on_llm_call,
        name="page-annotations-on-llm-call",
    ),
    path(
        "annotations/on/turn/<str:slug>/<int:number>/",
        annotations.annotations_on_turn,
        name="page-annotations-on-turn",
    ),
    path("annotations/<str:annotation_id>/", annotations.annotation_page, name="page-annotation"),
    path(
        "annotations/<str:annotation_id>/edit/",
        annotations.annotation_edit,
        name="page-annotation-edit",
    ),
    path(
        "annotations/<str:annotation_id>/delete/",
        annotations.annotation_delete,
        name="page-annotation-delete",
    ),
]
