from django.apps import AppConfig


class CognitionAppConfig(AppConfig):
    name = "cognition_app"
    verbose_name = "Cognition"
    default_auto_field = "django.db.models.BigAutoField"
