"""Store the kernel's WorldPatch schema as a json_schema component, and create the operators group.

Workflows name the WorldPatch schema by hash in final_schema_ref, so it must be stored from the
start. If the schema ever changes, a new migration stores the new version beside the old one.
"""

from django.db import migrations


def forwards(apps, schema_editor):
    from chukwa_core.patch_schema import WORLD_PATCH_SCHEMA, world_patch_schema_hash

    JsonSchema = apps.get_model("scenarios_app", "JsonSchema")
    JsonSchema.objects.get_or_create(
        hash=world_patch_schema_hash(), defaults={"content": WORLD_PATCH_SCHEMA}
    )
    Group = apps.get_model("auth", "Group")
    Group.objects.get_or_create(name="operators")


class Migration(migrations.Migration):
    dependencies = [
        ("scenarios_app", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
