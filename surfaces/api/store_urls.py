from django.urls import path

from surfaces.api import store as api
from surfaces.api.metric_try import MetricTryApi
from surfaces.api.populations import (
    BiographyRunApi,
    PopulationBiographiesApi,
    PopulationCoverageApi,
)

# Before the metric routes: "try" is no hash.
urlpatterns = [
    path("metrics/try/", MetricTryApi.as_view(), name="api-metric-try"),
    path(
        "populations/<str:hash>/coverage/",
        PopulationCoverageApi.as_view(),
        name="api-population-coverage",
    ),
    path(
        "populations/<str:hash>/biographies/",
        PopulationBiographiesApi.as_view(),
        name="api-population-biographies",
    ),
    path("biography-runs/<int:id>/", BiographyRunApi.as_view(), name="api-biography-run"),
]
for segment, kind in api.COLLECTIONS.items():
    views = api.COMPONENT_VIEWS[segment]
    urlpatterns += [
        path(f"{segment}/", views["collection"].as_view(), name=f"api-{kind.value}-list"),
        path(f"{segment}/<str:hash>/", views["detail"].as_view(), name=f"api-{kind.value}-detail"),
        path(f"{segment}/<str:hash>/uses/", views["uses"].as_view(), name=f"api-{kind.value}-uses"),
    ]

urlpatterns += [
    path("scenarios/", api.ScenarioListApi.as_view(), name="api-scenario-list"),
    path("scenarios/assemble/", api.ScenarioAssembleApi.as_view(), name="api-scenario-assemble"),
    path("scenarios/fork/", api.ScenarioForkApi.as_view(), name="api-scenario-fork"),
    path("scenarios/<str:ref>/", api.ScenarioDetailApi.as_view(), name="api-scenario-detail"),
    path(
        "scenarios/<str:ref>/lineage/",
        api.ScenarioLineageApi.as_view(),
        name="api-scenario-lineage",
    ),
    path("scenario-names/<str:name>/", api.ScenarioNameApi.as_view(), name="api-scenario-name"),
    path("world-patch-schema/", api.WorldPatchSchemaApi.as_view(), name="api-world-patch-schema"),
]
