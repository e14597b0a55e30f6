from django.apps import AppConfig


class WorldsAppConfig(AppConfig):
    name = "worlds_app"
    verbose_name = "Worlds"
    default_auto_field = "django.db.models.BigAutoField"
