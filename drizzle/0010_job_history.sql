-- pgdrain: online
-- Kept jobs out of the hot table. A kind with keepCompletedSeconds used to keep each completed job
-- as a row of pgdrain.jobs (an UPDATE instead of the DELETE): the table every claim walks carried
-- the history, and pruning it was a DELETE per row with the VACUUM that follows. Now the statement
-- that completes a kept job moves it to pgdrain.job_history, partitioned by the day its keep ends
-- (UTC), a partition a day created ahead by pgdrain.maintain_history() (the housekeeping round);
-- a day whose keeps are all over is emptied with TRUNCATE and dropped: no bloat, no VACUUM debt.
-- Readers (getJob, lists, waits, dependencies, the CLI and the dashboard) read the view
-- pgdrain.jobs_and_history. Kept jobs with a dedupe key stay in pgdrain.jobs: its unique index is
-- what holds their key, and no unique index spans partitions.
-- Online: new objects only, and two functions replaced in one statement each. Kept rows already in
-- pgdrain.jobs move to the history in batches of 5,000 by the housekeeping round (src/queries/prune.ts),
-- readable in either place meanwhile.
CREATE TABLE IF NOT EXISTS "pgdrain"."job_history" (
	"id" bigint NOT NULL,
	"kind" text NOT NULL,
	"payload" jsonb NOT NULL,
	"run_at" timestamp with time zone DEFAULT now() NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"max_attempts" integer DEFAULT 3 NOT NULL,
	"locked_at" timestamp with time zone,
	"locked_by" text,
	"status" text DEFAULT 'pending' NOT NULL,
	"last_error" text,
	"dedupe_key" text,
	"visibility_seconds" integer,
	"priority" integer DEFAULT 0 NOT NULL,
	"group_key" text,
	"timeout_ms" integer,
	"keep_seconds" integer,
	"keep_until" timestamp with time zone NOT NULL,
	"finished_at" timestamp with time zone,
	"result" jsonb,
	"progress" jsonb,
	"cancel_requested_at" timestamp with time zone,
	"watched_until" timestamp with time zone,
	"waiting_for" integer,
	"has_dependents" boolean,
	"traceparent" text,
	"locked_until" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
) PARTITION BY RANGE ("keep_until");
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "pgdrain"."job_history_default" PARTITION OF "pgdrain"."job_history" DEFAULT;
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "job_history_id" ON "pgdrain"."job_history" USING btree ("id");
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "job_history_default_keep_until" ON "pgdrain"."job_history_default" USING btree ("keep_until");
--> statement-breakpoint
CREATE OR REPLACE VIEW "pgdrain"."jobs_and_history" AS
  SELECT id, kind, payload, run_at, attempts, max_attempts, locked_at, locked_by, status, last_error, dedupe_key, visibility_seconds,
         priority, group_key, timeout_ms, keep_seconds, keep_until, finished_at, result, progress, cancel_requested_at, watched_until,
         waiting_for, has_dependents, traceparent, locked_until, created_at
    FROM pgdrain.jobs
  UNION ALL
  SELECT id, kind, payload, run_at, attempts, max_attempts, locked_at, locked_by, status, last_error, dedupe_key, visibility_seconds,
         priority, group_key, timeout_ms, keep_seconds, keep_until, finished_at, result, progress, cancel_requested_at, watched_until,
         waiting_for, has_dependents, traceparent, locked_until, created_at
    FROM pgdrain.job_history
   WHERE keep_until > now();
--> statement-breakpoint
-- pgdrain.maintain_history() was (re)defined here; its live text is src/sql/functions/maintain_history.sql, applied by migrate after the migrations.
--> statement-breakpoint
-- pgdrain.maintain_history() was called here; migrate calls it after it has applied the functions (src/db/migrate.ts).
--> statement-breakpoint
-- pgdrain.cancel() was (re)defined here; its live text is src/sql/functions/cancel.sql, applied by migrate after the migrations.
--> statement-breakpoint
-- pgdrain.enqueue() was (re)defined here; its live text is src/sql/functions/enqueue.sql, applied by migrate after the migrations.
