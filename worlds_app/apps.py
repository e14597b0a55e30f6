from django.apps import AppConfig


class WorldsAppConfig(AppConfig):
    name = "worlds_app"
    verbose_name = "Worlds"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # a provider batch that ended: measure at once the worlds whose judgings waited on it
        from cognition_app.batches import batches_ended
        from worlds_app.services.measure_redrive import on_batches_ended

        batches_ended.connect(on_batches_ended, dispatch_uid="worlds_app.batch_answers")
