"""Committed turns are immutable: reject any UPDATE of a turn row at the database."""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION worlds_app_turn_immutable() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'committed turn % of world % is immutable', OLD.number, OLD.world_id;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER worlds_app_turn_no_update BEFORE UPDATE ON worlds_app_turn
    FOR EACH ROW EXECUTE FUNCTION worlds_app_turn_immutable();
"""

REVERSE = """
DROP TRIGGER IF EXISTS worlds_app_turn_no_update ON worlds_app_turn;
DROP FUNCTION IF EXISTS worlds_app_turn_immutable();
"""


class Migration(migrations.Migration):
    dependencies = [("worlds_app", "0001_initial")]

    operations = [migrations.RunSQL(FUNCTION, REVERSE)]
