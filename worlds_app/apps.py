from django.apps import AppConfig


class WorldsAppConfig(AppConfig):
    name = "worlds_app"
    verbose_name = "Worlds"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Batch mode (services/batch_mode.py): the batch tick holds an experiment's requests
        # while its worlds still run toward theirs, and resumes parked attempts after it.
        from cognition_app import batch_signals
        from worlds_app.services import batch_mode

        batch_signals.holds.append(batch_mode.gathering)
        batch_signals.tick_ended.connect(batch_mode.on_tick_ended, dispatch_uid="batch_resume")
