-- pgdrain.send_dead_letters(dead_ids): the dead letters of jobs that just became dead, for those whose
-- kind has a dead-letter kind (defineJob `deadLetter`, pgdrain.dead_letter_routes) — the one place a
-- letter is written, whichever statement made the job dead: a failure (src/queries/fail.ts), the
-- reaper (reap.ts), or the end of a job it waited for (pgdrain.after_jobs_ended()). It is called in
-- the dying statement, so the letter commits or rolls back with the death. Each letter is one job of
-- the dead-letter kind, with the route's options, whose payload is { job: { id, kind, payload,
-- attempts, lastError, diedAt } }; the dead job's dead_letter_id names it (a job already lettered is
-- left as it is). Returns the letters' kinds (NULL: none), whose drainers are notified.
CREATE OR REPLACE FUNCTION pgdrain.send_dead_letters(dead_ids bigint[])
RETURNS text[]
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $send_dead_letters$
DECLARE
  kinds text[];
BEGIN
  WITH named AS (
    UPDATE pgdrain.jobs j SET dead_letter_id = nextval('pgdrain.jobs_id_seq')
      FROM pgdrain.dead_letter_routes r
     WHERE j.id = ANY(dead_ids) AND r.kind = j.kind AND j.status = 'dead' AND j.dead_letter_id IS NULL
    RETURNING j.id, j.kind, j.payload, j.attempts, j.last_error, j.finished_at, j.dead_letter_id,
              r.dead_letter, r.max_attempts, r.priority, r.keep_seconds),
  lettered AS (
    INSERT INTO pgdrain.jobs (id, kind, payload, max_attempts, priority, keep_seconds)
    SELECT n.dead_letter_id, n.dead_letter,
           jsonb_build_object('job', jsonb_build_object('id', n.id::text, 'kind', n.kind, 'payload', n.payload,
             'attempts', n.attempts, 'lastError', n.last_error, 'diedAt', n.finished_at)),
           n.max_attempts, n.priority, n.keep_seconds
      FROM named n
    RETURNING kind)
  SELECT array_agg(DISTINCT l.kind) INTO kinds FROM lettered l;
  PERFORM pg_notify('{{NOTIFY_CHANNEL}}', k) FROM unnest(kinds) AS k;
  RETURN kinds;
END
$send_dead_letters$;
