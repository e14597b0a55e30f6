from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("worlds_app", "0016_experiment_budget"),
    ]

    operations = [
        migrations.AddField(
            model_name="world",
            name="admitted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        # Worlds of experiments created before admission existed were all dispatched at
        # creation: they count as admitted, so none is held back or dispatched twice.
        migrations.RunSQL(
            "UPDATE worlds_app_world SET admitted_at = created_at WHERE experiment_id IS NOT NULL",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
