-- A job's attempt log (wave 6): the attempts that ended without completing, for GET /jobs/:id and
-- the dashboard's job page. A nullable column on both tables (no rewrite), written only when an
-- attempt fails or is lost; the readers' view gets it at its end, as a view allows.
ALTER TABLE "pgdrain"."job_history" ADD COLUMN "attempt_log" jsonb;--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD COLUMN "attempt_log" jsonb;--> statement-breakpoint
CREATE OR REPLACE VIEW "pgdrain"."jobs_and_history" AS
  SELECT id, kind, payload, run_at, attempts, max_attempts, locked_at, locked_by, status, last_error, dedupe_key, visibility_seconds,
         priority, group_key, timeout_ms, keep_seconds, keep_until, finished_at, result, progress, cancel_requested_at, watched_until,
         waiting_for, has_dependents, traceparent, locked_until, created_at, version, lost_attempts, held, attempt_log
    FROM pgdrain.jobs
  UNION ALL
  SELECT id, kind, payload, run_at, attempts, max_attempts, locked_at, locked_by, status, last_error, dedupe_key, visibility_seconds,
         priority, group_key, timeout_ms, keep_seconds, keep_until, finished_at, result, progress, cancel_requested_at, watched_until,
         waiting_for, has_dependents, traceparent, locked_until, created_at, version, lost_attempts, held, attempt_log
    FROM pgdrain.job_history
   WHERE keep_until > now();
