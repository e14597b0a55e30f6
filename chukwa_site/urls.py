from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView

from chukwa_site import views

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/", include("scenarios_app.urls")),
    path("api/", include("worlds_app.urls")),
    path("api/", include("cognition_app.urls")),
    # Last of the API routes: any other /api/ path (or a malformed id the converters refuse)
    # answers with the JSON error envelope instead of the HTML 404 page.
    re_path(r"^api/", views.api_not_found, name="api-not-found"),
    path("", include("scenarios_app.pages_urls")),
    path("", include("worlds_app.pages_urls")),
    path("", include("cognition_app.pages_urls")),
    path("", include("cognition_app.authoring_urls")),
]
