from django.urls import path

from surfaces.api import cognition as api
from surfaces.api import indexes

urlpatterns = [
    path(
        "source-invocations/",
        indexes.SourceInvocationListApi.as_view(),
        name="api-source-invocation-list",
    ),
    path(
        "source-invocations/<str:invocation_id>/",
        api.SourceInvocationDetailApi.as_view(),
        name="api-source-invocation-detail",
    ),
    path("model-prices/", api.ModelPriceApi.as_view(), name="api-model-prices"),
    path("llm-calls/", indexes.LlmCallListApi.as_view(), name="api-llm-call-list"),
    path("llm-calls/<str:call_id>/", api.LlmCallDetailApi.as_view(), name="api-llm-call-detail"),
]
