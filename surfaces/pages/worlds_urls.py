"""Server-rendered pages (see surfaces/pages/rendering.py)."""

from django.urls import URLPattern, path

from surfaces.pages import attempts, interventions, interviews, measure, provenance
from surfaces.pages import worlds as views

urlpatterns: list[URLPattern] = [
    path("worlds/", views.world_list_page, name="page-world-list"),
    path("worlds/<str:slug>/", views.world_detail_page, name="page-world-detail"),
    path("worlds/<str:slug>/run-turns/", views.world_run_turns, name="page-world-run-turns"),
    path("worlds/<str:slug>/measure/", measure.world_measure_page, name="page-world-measure"),
    path(
        "worlds/<str:slug>/interviews/",
        interviews.world_interviews_page,
        name="page-world-interviews",
    ),
    path(
        "worlds/<str:slug>/interventions/",
        interventions.intervention_add,
        name="page-intervention-add",
    ),
    path(
        "worlds/<str:slug>/interventions/check/",
        interventions.intervention_validate,
        name="page-intervention-check",
    ),
    path(
        "worlds/<str:slug>/interventions/<int:intervention_id>/delete/",
        interventions.intervention_remove,
        name="page-intervention-delete",
    ),
    path("worlds/<str:slug>/turns/<int:number>/", views.turn_page, name="page-turn-detail"),
    path("worlds/<str:slug>/diff/", views.world_diff_page, name="page-world-diff"),
    path("worlds/<str:slug>/compare/", views.world_compare_pick, name="page-world-compare-pick"),
    path(
        "worlds/<str:slug>/compare/<str:other>/",
        views.world_compare_page,
        name="page-world-compare",
    ),
    path(
        "worlds/<str:slug>/entities/<str:entity_id>/",
        provenance.entity_page,
        name="page-world-entity",
    ),
    path(
        "worlds/<str:slug>/environments/<str:label>/",
        provenance.environment_page,
        name="page-world-environment",
    ),
    path("attempts/<str:attempt_id>/", attempts.attempt_page, name="page-attempt"),
    path(
        "attempts/<str:attempt_id>/retry/",
        attempts.attempt_retry_page,
        name="page-attempt-retry",
    ),
]
