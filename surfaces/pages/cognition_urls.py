"""Server-rendered pages (see surfaces/pages/rendering.py)."""

from django.urls import URLPattern, path

from surfaces.pages import cognition as views

urlpatterns: list[URLPattern] = [
    path("invocations/<str:invocation_id>/", views.invocation_page, name="page-invocation"),
    path("llm-calls/<str:call_id>/", views.llm_call_page, name="page-llm-call"),
]
