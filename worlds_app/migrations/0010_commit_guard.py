"""A guard for statements sent together in one round trip: ``worlds_app_refuse_unless(ok,
reason)`` returns true when ``ok`` and otherwise raises, which aborts the transaction the
statement is part of. The turn commit (``services/turn_commit.py``) checks the attempt's lease
and the world's turn with it before anything else of the commit is kept."""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION worlds_app_refuse_unless(ok boolean, reason text) RETURNS boolean AS $$
BEGIN
    IF ok THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'raise_exception', MESSAGE = reason;
END;
$$ LANGUAGE plpgsql;
"""

REVERSE = "DROP FUNCTION IF EXISTS worlds_app_refuse_unless(boolean, text);"


class Migration(migrations.Migration):
    dependencies = [("worlds_app", "0009_index_page_indexes")]

    operations = [migrations.RunSQL(FUNCTION, REVERSE)]
