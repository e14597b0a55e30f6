"""Server-rendered pages (see surfaces/pages/rendering.py): experiments."""

from django.urls import URLPattern, path

from surfaces.pages import experiment_form, experiments

urlpatterns: list[URLPattern] = [
    path("experiments/", experiments.experiment_index_page, name="page-experiment-index"),
    path("experiments/new/", experiment_form.experiment_new_page, name="page-experiment-new"),
    path("experiments/<str:slug>/", experiments.experiment_page, name="page-experiment-detail"),
    path(
        "experiments/<str:slug>/cancel/",
        experiments.experiment_cancel_page,
        name="page-experiment-cancel",
    ),
    path(
        "experiments/<str:slug>/replicates/",
        experiments.experiment_replicates_page,
        name="page-experiment-replicates",
    ),
    path(
        "experiments/<str:slug>/metrics/",
        experiments.experiment_metrics_page,
        name="page-experiment-metrics",
    ),
]
