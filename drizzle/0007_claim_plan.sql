-- pgdrain: online
-- The claim as functions whose planner settings leave one plan: walk jobs_ready in its order, stop
-- at the batch, update those rows by primary key. Without the settings the plan depends on
-- statistics: a table analyzed while it was empty (autovacuum does that to an idle queue), or a
-- claim whose generic plan was cached then, handed a burst of jobs in one transaction, scans every
-- ready job (or the whole table) and sorts them for each claim — a drain at a third of its speed,
-- or a tenth, until the next ANALYZE. With sequential scans, bitmap scans and sorts disabled, the
-- index walk is the only plan left, whatever the statistics say, for a custom plan and a cached
-- generic one alike. Only these functions' statements run under those settings.
--
-- pgdrain.claim(how_many, only_kinds, token, lease_seconds): the next `how_many` ready jobs (of
-- `only_kinds`, or any kind; never a paused kind), in priority, run_at, id order, skipping locked
-- ones; marked running under `token` with one more attempt and a lease of the job's own visibility,
-- else `lease_seconds`. pgdrain.claim_ids(only_ids, …): the same for given jobs (run-now), found by
-- primary key (sorting a handful of rows is allowed there). src/queries/claim.ts calls both; the
-- rows they return are the columns a drainer needs, the job's trace context among them: the W3C
-- `traceparent` of its enqueue, a new nullable column (catalog only), so the handler's span links to
-- the span that enqueued it (src/tracing.ts).
ALTER TABLE "pgdrain"."jobs" ADD COLUMN IF NOT EXISTS "traceparent" text;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION pgdrain.claim(how_many integer, only_kinds text[], token text, lease_seconds integer)
RETURNS TABLE (id bigint, kind text, payload jsonb, attempts integer, max_attempts integer, priority integer, group_key text,
               timeout_ms integer, run_at timestamptz, locked_by text, visibility_seconds integer, traceparent text, created_at timestamptz)
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $claim$
  UPDATE pgdrain.jobs j
     SET status = 'running', locked_at = now(), locked_by = token, attempts = j.attempts + 1,
         locked_until = now() + make_interval(secs => coalesce(j.visibility_seconds, lease_seconds))
   WHERE j.id = ANY(ARRAY(
           SELECT r.id FROM pgdrain.jobs r
            WHERE r.status = 'pending' AND r.run_at <= now()
              AND (only_kinds IS NULL OR r.kind = ANY(only_kinds))
              AND coalesce(r.kind <> ALL(ARRAY(SELECT p.kind FROM pgdrain.paused_kinds p)), true)
            ORDER BY r.priority DESC NULLS LAST, r.run_at, r.id
            LIMIT how_many
            FOR UPDATE OF r SKIP LOCKED))
  RETURNING j.id, j.kind, j.payload, j.attempts, j.max_attempts, j.priority, j.group_key, j.timeout_ms, j.run_at, j.locked_by,
            j.visibility_seconds, j.traceparent, j.created_at
$claim$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION pgdrain.claim_ids(only_ids bigint[], how_many integer, only_kinds text[], token text, lease_seconds integer)
RETURNS TABLE (id bigint, kind text, payload jsonb, attempts integer, max_attempts integer, priority integer, group_key text,
               timeout_ms integer, run_at timestamptz, locked_by text, visibility_seconds integer, traceparent text, created_at timestamptz)
LANGUAGE sql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $claim_ids$
  UPDATE pgdrain.jobs j
     SET status = 'running', locked_at = now(), locked_by = token, attempts = j.attempts + 1,
         locked_until = now() + make_interval(secs => coalesce(j.visibility_seconds, lease_seconds))
   WHERE j.id = ANY(ARRAY(
           SELECT r.id FROM pgdrain.jobs r
            WHERE r.id = ANY(only_ids) AND r.status = 'pending' AND r.run_at <= now()
              AND (only_kinds IS NULL OR r.kind = ANY(only_kinds))
              AND coalesce(r.kind <> ALL(ARRAY(SELECT p.kind FROM pgdrain.paused_kinds p)), true)
            ORDER BY r.priority DESC NULLS LAST, r.run_at, r.id
            LIMIT how_many
            FOR UPDATE OF r SKIP LOCKED))
  RETURNING j.id, j.kind, j.payload, j.attempts, j.max_attempts, j.priority, j.group_key, j.timeout_ms, j.run_at, j.locked_by,
            j.visibility_seconds, j.traceparent, j.created_at
$claim_ids$;
