from django.urls import path

from surfaces.api import (
    annotations,
    compare,
    experiments,
    indexes,
    interventions,
    interviews,
    measurements,
    references,
    retries,
)
from surfaces.api import worlds as api

urlpatterns = [
    path("experiments/", experiments.ExperimentCollectionApi.as_view(), name="api-experiment-list"),
    path(
        "experiments/estimate/",
        experiments.ExperimentEstimateApi.as_view(),
        name="api-experiment-estimate",
    ),
    path(
        "experiments/<str:slug>/",
        experiments.ExperimentDetailApi.as_view(),
        name="api-experiment-detail",
    ),
    path(
        "experiments/<str:slug>/cancel/",
        experiments.ExperimentCancelApi.as_view(),
        name="api-experiment-cancel",
    ),
    path(
        "experiments/<str:slug>/replicates/",
        experiments.ExperimentReplicatesApi.as_view(),
        name="api-experiment-replicates",
    ),
    path(
        "experiments/<str:slug>/metrics/",
        experiments.ExperimentMetricsApi.as_view(),
        name="api-experiment-metrics",
    ),
    path(
        "experiments/<str:slug>/results/",
        experiments.ExperimentResultsApi.as_view(),
        name="api-experiment-results",
    ),
    path(
        "experiments/<str:slug>/measurements.csv",
        experiments.ExperimentExportApi.as_view(),
        name="api-experiment-export-csv",
    ),
    path(
        "experiments/<str:slug>/measurements.jsonl",
        experiments.ExperimentExportJsonlApi.as_view(),
        name="api-experiment-export-jsonl",
    ),
    path(
        "experiments/<str:slug>/references/",
        references.ExperimentReferencesApi.as_view(),
        name="api-experiment-references",
    ),
    path(
        "experiments/<str:slug>/references.csv",
        references.ExperimentReferencesCsvApi.as_view(),
        name="api-experiment-references-csv",
    ),
    path("worlds/", api.WorldCollectionApi.as_view(), name="api-world-list"),
    path("worlds/<str:slug>/", api.WorldDetailApi.as_view(), name="api-world-detail"),
    path("worlds/<str:slug>/turns/", api.TurnCollectionApi.as_view(), name="api-turn-enqueue"),
    path(
        "worlds/<str:slug>/turns/<int:number>/", api.TurnDetailApi.as_view(), name="api-turn-detail"
    ),
    path("worlds/<str:slug>/budget/", api.WorldBudgetApi.as_view(), name="api-world-budget"),
    path("worlds/<str:slug>/diff/", api.WorldDiffApi.as_view(), name="api-world-diff"),
    path(
        "worlds/<str:slug>/interventions/",
        interventions.InterventionCollectionApi.as_view(),
        name="api-intervention-list",
    ),
    path(
        "worlds/<str:slug>/interventions/<int:intervention_id>/",
        interventions.InterventionDetailApi.as_view(),
        name="api-intervention-detail",
    ),
    path(
        "worlds/<str:slug>/interviews/",
        interviews.InterviewCollectionApi.as_view(),
        name="api-interview-list",
    ),
    path(
        "worlds/<str:slug>/measurements/",
        measurements.MeasurementCollectionApi.as_view(),
        name="api-measurement-list",
    ),
    path(
        "metrics/<str:hash>/agreement/",
        measurements.MetricAgreementApi.as_view(),
        name="api-metric-agreement",
    ),
    path(
        "worlds/<str:slug>/compare/<str:other>/",
        compare.WorldCompareApi.as_view(),
        name="api-world-compare",
    ),
    path(
        "annotations/",
        annotations.AnnotationCollectionApi.as_view(),
        name="api-annotation-list",
    ),
    path(
        "annotations/<str:annotation_id>/",
        annotations.AnnotationDetailApi.as_view(),
        name="api-annotation-detail",
    ),
    path("attempts/", indexes.AttemptListApi.as_view(), name="api-attempt-list"),
    path("attempts/<str:attempt_id>/", api.AttemptDetailApi.as_view(), name="api-attempt-detail"),
    path(
        "attempts/<str:attempt_id>/retry/",
        retries.AttemptRetryApi.as_view(),
        name="api-attempt-retry",
    ),
]
