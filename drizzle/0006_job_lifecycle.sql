-- pgdrain: online
-- A job's whole life: kept results and terminal states (completed, cancelled), progress, a cancel
-- that reaches a running handler, waiting for other jobs (`after`), a timeout per job. Online:
-- every column is nullable without a default (catalog only); the status CHECK is replaced NOT VALID
-- then validated (no scan under lock; between the two, the old values are all still allowed by
-- the new check); indexes are built CONCURRENTLY; the functions are replaced in one statement.
CREATE TABLE IF NOT EXISTS "pgdrain"."finished_jobs" (
	"id" bigint PRIMARY KEY NOT NULL,
	"kind" text NOT NULL,
	"status" text NOT NULL,
	"finished_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "pgdrain"."job_dependencies" (
	"depends_on" bigint NOT NULL,
	"job_id" bigint NOT NULL,
	CONSTRAINT "job_dependencies_pkey" PRIMARY KEY("depends_on","job_id")
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "job_dependencies_job" ON "pgdrain"."job_dependencies" USING btree ("job_id");
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs"
  ADD COLUMN IF NOT EXISTS "timeout_ms" integer,
  ADD COLUMN IF NOT EXISTS "keep_seconds" integer,
  ADD COLUMN IF NOT EXISTS "keep_until" timestamp with time zone,
  ADD COLUMN IF NOT EXISTS "finished_at" timestamp with time zone,
  ADD COLUMN IF NOT EXISTS "result" jsonb,
  ADD COLUMN IF NOT EXISTS "progress" jsonb,
  ADD COLUMN IF NOT EXISTS "cancel_requested_at" timestamp with time zone,
  ADD COLUMN IF NOT EXISTS "watched_until" timestamp with time zone,
  ADD COLUMN IF NOT EXISTS "waiting_for" integer,
  ADD COLUMN IF NOT EXISTS "has_dependents" boolean;
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" DROP CONSTRAINT IF EXISTS "jobs_status_valid", ADD CONSTRAINT "jobs_status_valid" CHECK (status IN ('pending', 'running', 'dead', 'completed', 'cancelled', 'waiting')) NOT VALID;
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" VALIDATE CONSTRAINT "jobs_status_valid";
--> statement-breakpoint
CREATE INDEX CONCURRENTLY IF NOT EXISTS "jobs_kept" ON "pgdrain"."jobs" USING btree ("keep_until") WHERE status IN ('completed', 'cancelled');
--> statement-breakpoint
CREATE INDEX CONCURRENTLY IF NOT EXISTS "jobs_finished" ON "pgdrain"."jobs" USING btree ("id") WHERE status IN ('completed', 'cancelled');
--> statement-breakpoint
-- pgdrain.enqueue() was (re)defined here; its live text is src/sql/functions/enqueue.sql, applied by migrate after the migrations.
--> statement-breakpoint
-- pgdrain.cancel() was (re)defined here; its live text is src/sql/functions/cancel.sql, applied by migrate after the migrations.
