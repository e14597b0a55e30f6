from django.apps import AppConfig


class ScenariosAppConfig(AppConfig):
    name = "scenarios_app"
    verbose_name = "Scenario store"
    default_auto_field = "django.db.models.BigAutoField"
