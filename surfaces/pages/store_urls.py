"""Server-rendered pages (see surfaces/pages/rendering.py)."""

from django.urls import URLPattern, path

from surfaces.pages import store as views
from surfaces.pages.metric_form import metric_new_page
from surfaces.pages.population_biographies import biography_run_page, population_biographies_page
from surfaces.pages.population_form import population_new_page

# <str:…> rather than a hash converter: a malformed hash must reach the selector and become a
# 400 page, not a resolver 404.
urlpatterns: list[URLPattern] = [
    path("store/", views.store_index, name="page-store"),
    path("metrics/new/", metric_new_page, name="page-metric-new"),
    path("populations/new/", population_new_page, name="page-population-new"),
    path(
        "populations/<str:hash>/biographies/",
        population_biographies_page,
        name="page-population-biographies",
    ),
    path("biography-runs/<int:id>/", biography_run_page, name="page-biography-run"),
    path("store/<str:segment>/", views.component_list_page, name="page-component-list"),
    path(
        "store/<str:segment>/<str:hash>/",
        views.component_detail_page,
        name="page-component-detail",
    ),
    path(
        "store/<str:segment>/<str:hash>/uses/",
        views.component_uses_page,
        name="page-component-uses",
    ),
    path("scenarios/", views.scenario_list_page, name="page-scenario-list"),
    path("scenarios/<str:ref>/", views.scenario_detail_page, name="page-scenario-detail"),
    path("scenarios/<str:ref>/lineage/", views.scenario_lineage_page, name="page-scenario-lineage"),
    path("names/", views.name_list_page, name="page-name-list"),
    path("names/<str:name>/", views.name_detail_page, name="page-name-detail"),
]
