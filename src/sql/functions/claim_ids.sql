-- pgdrain.claim_ids(only_ids, how_many, only_kinds, token, lease_seconds): the claim of run-now —
-- pgdrain.claim() restricted to the given ids (those ready and free), with the same write, lease and
-- returned columns. Its settings are claim()'s but sort (its walk is by the ids, a few at most) and
-- the plan cache's choice: a few ids plan cheaply with their values.
CREATE OR REPLACE FUNCTION pgdrain.claim_ids(only_ids bigint[], how_many integer, only_kinds text[], token text, lease_seconds integer)
RETURNS TABLE (id bigint, kind text, payload jsonb, attempts integer, max_attempts integer, priority integer, group_key text,
               timeout_ms integer, run_at timestamptz, locked_by text, visibility_seconds integer, traceparent text, created_at timestamptz,
               version integer)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $claim_ids$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  UPDATE pgdrain.jobs j
     SET status = 'running', locked_at = now(), locked_by = claim_ids.token, attempts = j.attempts + 1,
         locked_until = now() + make_interval(secs => coalesce(j.visibility_seconds, claim_ids.lease_seconds))
   WHERE j.id = ANY(ARRAY(
           SELECT r.id FROM pgdrain.jobs r
            WHERE r.id = ANY(claim_ids.only_ids) AND r.status = 'pending' AND r.run_at <= now()
              AND (claim_ids.only_kinds IS NULL AND r.version IS NULL
                     OR CASE WHEN r.version IS NULL THEN r.kind ELSE r.kind || '@' || r.version END = ANY(claim_ids.only_kinds))
              AND coalesce(r.kind <> ALL(ARRAY(SELECT p.kind FROM pgdrain.paused_kinds p)), true)
            ORDER BY r.priority DESC NULLS LAST, r.run_at, r.id
            LIMIT claim_ids.how_many
            FOR UPDATE OF r SKIP LOCKED))
  RETURNING j.id, j.kind, j.payload, j.attempts, j.max_attempts, j.priority, j.group_key, j.timeout_ms, j.run_at, j.locked_by,
            j.visibility_seconds, j.traceparent, j.created_at, j.version;
END
$claim_ids$;
