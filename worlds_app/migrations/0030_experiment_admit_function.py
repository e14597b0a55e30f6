"""An experiment's admission in one round trip (``worlds_app.services.dispatch.
experiment_admit``): ``worlds_app_experiment_admit(...)`` takes the experiment's admission lock,
counts its worlds in flight among those marked (clearing the marks of the done), admits the next
waiting worlds (lowest id first, a chunk of worlds at a time) and returns each admitted world's
first queued attempt with its slug. It ran as eight to ten statements through Django's cursor,
once every time a world of an experiment ends (~5 ms of a worker's CPU each).

The waiting worlds are looked up a chunk at a time, the chunk's queued attempts read once by
the chunk's ids (an uncorrelated ``IN``): a cost linear in the worlds read whatever the
planner's statistics say. One ``EXISTS`` per world was once planned, on tables just filled by an
experiment's creation and not analyzed yet, as a bitmap scan of every queued attempt for each
world: 10,000 new worlds took minutes.

PL/pgSQL runs each statement on a fresh snapshot (read committed), so everything after the
lock sees what the previous holder committed, as the statements after the Python code's
``pg_advisory_xact_lock`` did; the lock is held until the caller's transaction ends."""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION worlds_app_experiment_admit(
    p_experiment bigint, p_limit integer, p_now timestamptz, p_chunk integer,
    p_in_flight text[], p_parked text[], p_queued text
) RETURNS TABLE (attempt_id uuid, slug varchar) AS $$
DECLARE
    v_marked bigint[];
    v_busy integer;
    v_done bigint[];
    v_found bigint[] := '{}';
    v_chunk bigint[];
    v_after bigint := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('experiment-admit:' || p_experiment));
    SELECT coalesce(array_agg(w.id ORDER BY w.id), '{}') INTO v_marked
        FROM worlds_app_world w WHERE w.experiment_id = p_experiment AND w.in_flight;
    IF cardinality(v_marked) > 0 THEN
        WITH s AS (
            SELECT a.world_id, bool_or(a.status = ANY(p_in_flight)) AS has,
                bool_or(a.status = ANY(p_parked)) AS parked
            FROM worlds_app_turnattempt a
            WHERE a.world_id = ANY(v_marked) AND a.status = ANY(p_in_flight || p_parked)
            GROUP BY a.world_id
        )
        SELECT
            (SELECT count(*) FROM s WHERE s.has AND NOT s.parked),
            (SELECT coalesce(array_agg(m), '{}') FROM unnest(v_marked) m
                WHERE m NOT IN (SELECT s.world_id FROM s))
        INTO v_busy, v_done;
        IF cardinality(v_done) > 0 THEN
            UPDATE worlds_app_world SET in_flight = false WHERE id = ANY(v_done);
        END IF;
    ELSE
        v_busy := 0;
    END IF;
    IF v_busy >= p_limit THEN
        RETURN;
    END IF;
    LOOP
        EXIT WHEN cardinality(v_found) >= p_limit - v_busy;
        SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}') INTO v_chunk FROM (
            SELECT w.id FROM worlds_app_world w
            WHERE w.experiment_id = p_experiment AND w.admitted_at IS NULL AND w.id > v_after
            ORDER BY w.id LIMIT p_chunk
        ) c;
        EXIT WHEN cardinality(v_chunk) = 0;
        v_found := v_found || coalesce((
            SELECT array_agg(q.id ORDER BY q.id) FROM (
                SELECT c.id FROM unnest(v_chunk) c(id)
                WHERE c.id IN (SELECT a.world_id FROM worlds_app_turnattempt a
                    WHERE a.world_id = ANY(v_chunk) AND a.status = p_queued)
                ORDER BY c.id LIMIT p_limit - v_busy - cardinality(v_found)
            ) q), '{}');
        v_after := v_chunk[cardinality(v_chunk)];
    END LOOP;
    IF cardinality(v_found) = 0 THEN
        RETURN;
    END IF;
    UPDATE worlds_app_world SET admitted_at = p_now, in_flight = true WHERE id = ANY(v_found);
    RETURN QUERY SELECT DISTINCT ON (a.world_id) a.id, w.slug
        FROM worlds_app_turnattempt a JOIN worlds_app_world w ON w.id = a.world_id
        WHERE a.world_id = ANY(v_found) AND a.status = p_queued ORDER BY a.world_id, a.seq;
END;
$$ LANGUAGE plpgsql VOLATILE;
"""

REVERSE = (
    "DROP FUNCTION IF EXISTS worlds_app_experiment_admit("
    "bigint, integer, timestamptz, integer, text[], text[], text);"
)


class Migration(migrations.Migration):
    dependencies = [("worlds_app", "0029_biography_runs")]

    operations = [migrations.RunSQL(FUNCTION, REVERSE)]
