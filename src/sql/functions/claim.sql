-- pgdrain.claim(how_many, only_kinds, token, lease_seconds): the claim, one statement. Up to how_many
-- ready jobs (pending, due, of only_kinds when given, of no paused kind), in claim order (priority,
-- then run_at, then id), locked SKIP LOCKED, become running under `token` with one more attempt and a
-- lease (the job's own visibility, else lease_seconds). Returns them (not in claim order).
--
-- A workflow run of a version after the first (defineWorkflow `version`) is named `kind@version` in
-- only_kinds: a drainer lists the versions it has, and a run is claimed only by one that has its
-- version (a kind's name alone claims its runs without a version). Without only_kinds, only runs
-- without a version are claimed. A plain job pays one NULL test for it.
--
-- Its settings are its own (nothing outside the function sees them). With seqscan, bitmapscan and
-- sort off the planner has one plan left: walk jobs_ready in its order and stop at the batch —
-- whatever the statistics say (an idle queue's table analyzed empty, then a burst committed in one
-- transaction, was claimed by scanning and sorting every ready job for each claim). Before
-- PostgreSQL 18 a plan that still needs a disabled node costs 1e10 or more and would pass
-- jit_above_cost on a server with JIT on (Debian's, the Docker images): jit = off, which only this
-- statement's plan sees. PL/pgSQL keeps the statement's plan for the session, planned under these
-- settings; plan_cache_mode = force_generic_plan makes that one plan once per session (the plan
-- cache never judged the generic plan cheaper with a LIMIT and a kinds array as parameters, and
-- planned every claim again: ~4% of a drain's PostgreSQL CPU on a stock 15). The generic plan is
-- tested like the others (test/conformance/queue-behaviour.ts).
--
-- The UPDATE finds the rows its walk locked by their ids on PostgreSQL 17 and later, which walk such
-- an array in one descent of the primary key; before 17 that is one descent per id (a twelfth of the
-- claim's buffer reads), so there it goes by the tuple ids the walk locked, a TID scan straight to the
-- heap (45.6k against 41.2k jobs/s on Debian's 15). The tuple ids are safe: the rows are locked by
-- this same statement before the UPDATE reads them, and a locked tuple is neither moved nor pruned. A
-- pending row that another transaction changed after the statement's snapshot is not visible at its
-- new tuple id: it is left pending, unclaimed this time, never claimed twice.
CREATE OR REPLACE FUNCTION pgdrain.claim(how_many integer, only_kinds text[], token text, lease_seconds integer)
RETURNS TABLE (id bigint, kind text, payload jsonb, attempts integer, max_attempts integer, priority integer, group_key text,
               timeout_ms integer, run_at timestamptz, locked_by text, visibility_seconds integer, traceparent text, created_at timestamptz,
               version integer)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $claim$
#variable_conflict use_column
BEGIN
  IF current_setting('server_version_num')::int >= 170000 THEN
    RETURN QUERY
    UPDATE pgdrain.jobs j
       SET status = 'running', locked_at = now(), locked_by = claim.token, attempts = j.attempts + 1,
           locked_until = now() + make_interval(secs => coalesce(j.visibility_seconds, claim.lease_seconds))
     WHERE j.id = ANY(ARRAY(
             SELECT r.id FROM pgdrain.jobs r
              WHERE r.status = 'pending' AND r.run_at <= now()
                AND (claim.only_kinds IS NULL AND r.version IS NULL
                     OR CASE WHEN r.version IS NULL THEN r.kind ELSE r.kind || '@' || r.version END = ANY(claim.only_kinds))
                AND coalesce(r.kind <> ALL(ARRAY(SELECT p.kind FROM pgdrain.paused_kinds p)), true)
              ORDER BY r.priority DESC NULLS LAST, r.run_at, r.id
              LIMIT claim.how_many
              FOR UPDATE OF r SKIP LOCKED))
    RETURNING j.id, j.kind, j.payload, j.attempts, j.max_attempts, j.priority, j.group_key, j.timeout_ms, j.run_at, j.locked_by,
              j.visibility_seconds, j.traceparent, j.created_at, j.version;
  ELSE
    RETURN QUERY
    UPDATE pgdrain.jobs j
       SET status = 'running', locked_at = now(), locked_by = claim.token, attempts = j.attempts + 1,
           locked_until = now() + make_interval(secs => coalesce(j.visibility_seconds, claim.lease_seconds))
     WHERE j.ctid = ANY(ARRAY(
             SELECT r.ctid FROM pgdrain.jobs r
              WHERE r.status = 'pending' AND r.run_at <= now()
                AND (claim.only_kinds IS NULL AND r.version IS NULL
                     OR CASE WHEN r.version IS NULL THEN r.kind ELSE r.kind || '@' || r.version END = ANY(claim.only_kinds))
                AND coalesce(r.kind <> ALL(ARRAY(SELECT p.kind FROM pgdrain.paused_kinds p)), true)
              ORDER BY r.priority DESC NULLS LAST, r.run_at, r.id
              LIMIT claim.how_many
              FOR UPDATE OF r SKIP LOCKED))
    RETURNING j.id, j.kind, j.payload, j.attempts, j.max_attempts, j.priority, j.group_key, j.timeout_ms, j.run_at, j.locked_by,
              j.visibility_seconds, j.traceparent, j.created_at, j.version;
  END IF;
END
$claim$;
