-- Workflows that survive a deploy (wave 6): a run's version, a step's type, why a run is held, and
-- attempts lost with their drainer counted apart from the ordinary ones. New columns only (nullable,
-- or with a constant default: no table rewrite), each table held for a moment.
ALTER TABLE "pgdrain"."job_counts" ADD COLUMN "diverged" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "pgdrain"."job_history" ADD COLUMN "version" integer;--> statement-breakpoint
ALTER TABLE "pgdrain"."job_history" ADD COLUMN "lost_attempts" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "pgdrain"."job_history" ADD COLUMN "held" jsonb;--> statement-breakpoint
ALTER TABLE "pgdrain"."job_totals" ADD COLUMN "diverged" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD COLUMN "version" integer;--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD COLUMN "lost_attempts" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD COLUMN "held" jsonb;--> statement-breakpoint
ALTER TABLE "pgdrain"."workflow_steps" ADD COLUMN "type" text;--> statement-breakpoint
-- The readers' view of live and kept jobs gets the new columns (at its end, as a view allows).
CREATE OR REPLACE VIEW "pgdrain"."jobs_and_history" AS
  SELECT id, kind, payload, run_at, attempts, max_attempts, locked_at, locked_by, status, last_error, dedupe_key, visibility_seconds,
         priority, group_key, timeout_ms, keep_seconds, keep_until, finished_at, result, progress, cancel_requested_at, watched_until,
         waiting_for, has_dependents, traceparent, locked_until, created_at, version, lost_attempts, held
    FROM pgdrain.jobs
  UNION ALL
  SELECT id, kind, payload, run_at, attempts, max_attempts, locked_at, locked_by, status, last_error, dedupe_key, visibility_seconds,
         priority, group_key, timeout_ms, keep_seconds, keep_until, finished_at, result, progress, cancel_requested_at, watched_until,
         waiting_for, has_dependents, traceparent, locked_until, created_at, version, lost_attempts, held
    FROM pgdrain.job_history
   WHERE keep_until > now();
