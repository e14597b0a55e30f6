from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path

from surfaces.api.schema import CachedSchemaView
from surfaces.mcp.http import McpEndpoint, oauth_not_offered
from surfaces.pages import indexes
from surfaces.pages import site as views

urlpatterns = [
    path("", indexes.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/schema/", CachedSchemaView.as_view(), name="api-schema"),
    path("api/", include("surfaces.api.store_urls")),
    path("api/", include("surfaces.api.worlds_urls")),
    path("api/", include("surfaces.api.cognition_urls")),
    # Last of the API routes: any other /api/ path (or a malformed id the converters refuse)
    # answers with the JSON error envelope instead of the HTML 404 page.
    re_path(r"^api/", views.api_not_found, name="api-not-found"),
    # MCP's streamable HTTP endpoint (clients are configured with or without the slash; a slash
    # redirect would lose a POST).
    re_path(r"^mcp/?$", McpEndpoint.as_view(), name="mcp"),
    # What MCP clients probe for OAuth (RFC 8414, RFC 9728, OpenID discovery, RFC 7591
    # registration): Chukwa has none, and says so in JSON rather than with the HTML 404 page.
    re_path(
        r"^(?:mcp/)?\.well-known/"
        r"(?:oauth-authorization-server|oauth-protected-resource|openid-configuration)(?:/.*)?$",
        oauth_not_offered,
        name="oauth-not-offered",
    ),
    re_path(r"^register/?$", oauth_not_offered, name="oauth-register-not-offered"),
    path("", include("surfaces.pages.store_urls")),
    path("", include("surfaces.pages.worlds_urls")),
    path("", include("surfaces.pages.experiments_urls")),
    path("", include("surfaces.pages.cognition_urls")),
    path("", include("surfaces.pages.authoring_urls")),
    path("", include("surfaces.pages.index_urls")),
]
