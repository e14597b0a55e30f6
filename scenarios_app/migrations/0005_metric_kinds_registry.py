# The metric kinds move to a registry (chukwa_core/metric_kinds.py): the database no longer
# enumerates them, so a new kind needs no migration.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scenarios_app', '0004_metric'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='metric',
            name='metric_source_iff_judge',
        ),
        migrations.AlterField(
            model_name='metric',
            name='kind',
            field=models.CharField(max_length=16),
        ),
        migrations.AddConstraint(
            model_name='metric',
            constraint=models.CheckConstraint(condition=models.Q(('kind__regex', '^[a-z][a-z0-9_]{0,15}$')), name='metric_kind_grammar'),
        ),
    ]
