from django.apps import AppConfig


class WorldsAppConfig(AppConfig):
    name = "worlds_app"
    verbose_name = "Worlds"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from cognition_app import batch_signals
        from cognition_app.batches import batches_ended
        from worlds_app.services import batch_mode
        from worlds_app.services.measure_redrive import on_batches_ended

        # a provider batch that ended: measure at once the worlds whose judgings waited on it
        batches_ended.connect(on_batches_ended, dispatch_uid="worlds_app.batch_answers")
        # Batch mode (services/batch_mode.py): the batch tick holds an experiment's requests
        # while its worlds still run toward theirs, and resumes parked attempts after it.
        batch_signals.holds.append(batch_mode.gathering)
        batches_ended.connect(batch_mode.on_batches_ended, dispatch_uid="worlds_app.batch_resume")
