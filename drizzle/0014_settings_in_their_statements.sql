-- Planner settings belong to the statement they are for (wave 5). Until now the sidecar's drain
-- pool carried enable_seqscan/enable_bitmapscan/enable_sort = off on every connection, so that a
-- prepared copy of the claim kept its plan; every other statement on that pool (settlements, the
-- limited and fair claims, the steps' read, parks, wakes, the reaper, the prune) was planned under
-- them too. Before PostgreSQL 18 a plan that still needs a disabled node costs 1e10 or more, passes
-- jit_above_cost, and a server with JIT on (Debian's, Ubuntu's, the Docker images) compiles it on
-- every execution: 50-120 ms a statement. The embedded 18 has no JIT and counts disabled nodes
-- instead of pricing them, which is why no test saw it.
--
-- pgdrain.claim() and pgdrain.claim_ids() are now PL/pgSQL with the same SET clauses (and jit = off,
-- which only these two statements' plans see): PL/pgSQL keeps a statement's plan for the session,
-- planned inside the function under its settings, so the sidecar calls them as they are and its
-- pool carries nothing. Same signatures, same rows, same order as 0007.
--
-- pgdrain.wake_workflows(how_many): when it stopped at its limit, next_wake_at is now() (there is
-- more to wake already), not the next moment after now().
CREATE OR REPLACE FUNCTION pgdrain.claim(how_many integer, only_kinds text[], token text, lease_seconds integer)
RETURNS TABLE (id bigint, kind text, payload jsonb, attempts integer, max_attempts integer, priority integer, group_key text,
               timeout_ms integer, run_at timestamptz, locked_by text, visibility_seconds integer, traceparent text, created_at timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $claim$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  UPDATE pgdrain.jobs j
     SET status = 'running', locked_at = now(), locked_by = claim.token, attempts = j.attempts + 1,
         locked_until = now() + make_interval(secs => coalesce(j.visibility_seconds, claim.lease_seconds))
   WHERE j.id = ANY(ARRAY(
           SELECT r.id FROM pgdrain.jobs r
            WHERE r.status = 'pending' AND r.run_at <= now()
              AND (claim.only_kinds IS NULL OR r.kind = ANY(claim.only_kinds))
              AND coalesce(r.kind <> ALL(ARRAY(SELECT p.kind FROM pgdrain.paused_kinds p)), true)
            ORDER BY r.priority DESC NULLS LAST, r.run_at, r.id
            LIMIT claim.how_many
            FOR UPDATE OF r SKIP LOCKED))
  RETURNING j.id, j.kind, j.payload, j.attempts, j.max_attempts, j.priority, j.group_key, j.timeout_ms, j.run_at, j.locked_by,
            j.visibility_seconds, j.traceparent, j.created_at;
END
$claim$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION pgdrain.claim_ids(only_ids bigint[], how_many integer, only_kinds text[], token text, lease_seconds integer)
RETURNS TABLE (id bigint, kind text, payload jsonb, attempts integer, max_attempts integer, priority integer, group_key text,
               timeout_ms integer, run_at timestamptz, locked_by text, visibility_seconds integer, traceparent text, created_at timestamptz)
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
              AND (claim_ids.only_kinds IS NULL OR r.kind = ANY(claim_ids.only_kinds))
              AND coalesce(r.kind <> ALL(ARRAY(SELECT p.kind FROM pgdrain.paused_kinds p)), true)
            ORDER BY r.priority DESC NULLS LAST, r.run_at, r.id
            LIMIT claim_ids.how_many
            FOR UPDATE OF r SKIP LOCKED))
  RETURNING j.id, j.kind, j.payload, j.attempts, j.max_attempts, j.priority, j.group_key, j.timeout_ms, j.run_at, j.locked_by,
            j.visibility_seconds, j.traceparent, j.created_at;
END
$claim_ids$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION pgdrain.wake_workflows(how_many integer DEFAULT 1000, OUT woken integer, OUT next_wake_at timestamptz)
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $wake$
  WITH due AS (
    SELECT s.job_id, s.name FROM pgdrain.workflow_steps s
     WHERE s.status IN ('sleeping', 'waiting') AND s.wake_at <= now()
     ORDER BY s.wake_at LIMIT how_many FOR UPDATE SKIP LOCKED),
  due_jobs AS (
    SELECT j.id FROM pgdrain.jobs j WHERE j.id IN (SELECT job_id FROM due) AND j.status = 'waiting' FOR UPDATE SKIP LOCKED),
  stepped AS (
    UPDATE pgdrain.workflow_steps s SET status = 'completed', finished_at = now(), wake_at = NULL,
           result = CASE WHEN s.status = 'waiting' THEN 'null'::jsonb END
      FROM due WHERE s.job_id = due.job_id AND s.name = due.name AND s.job_id IN (SELECT id FROM due_jobs)
    RETURNING s.job_id),
  stale AS (
    UPDATE pgdrain.workflow_steps s SET wake_at = NULL
      FROM due WHERE s.job_id = due.job_id AND s.name = due.name
       AND NOT EXISTS (SELECT 1 FROM pgdrain.jobs j WHERE j.id = s.job_id AND j.status IN ('waiting', 'running', 'pending'))
    RETURNING 1),
  made_pending AS (
    UPDATE pgdrain.jobs j SET status = 'pending', run_at = now() WHERE j.id IN (SELECT job_id FROM stepped) RETURNING j.kind)
  -- (stale, like every data-modifying CTE, runs whether or not it is read.)
  SELECT (SELECT count(*) FROM made_pending)::int,
         CASE WHEN (SELECT count(*) FROM due) >= how_many THEN now()
              ELSE (SELECT min(wake_at) FROM pgdrain.workflow_steps WHERE status IN ('sleeping', 'waiting') AND wake_at > now()) END
    FROM (SELECT count(pg_notify('pgdrain_jobs', kind)) FROM (SELECT DISTINCT kind FROM made_pending) k) AS notified;
$wake$;
