from django.apps import AppConfig


class SurfacesConfig(AppConfig):
    """What users touch: the REST API, the browser pages, the admin. The top layer below the
    project package; it calls the apps' services and selectors and is imported by none of them."""

    name = "surfaces"
    verbose_name = "Surfaces"
