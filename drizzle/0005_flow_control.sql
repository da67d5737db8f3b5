-- pgdrain: online
-- Flow control across every drainer: group keys (per-key concurrency, per-key FIFO), the starts
-- of rate-limited kinds in their window, and the enqueue function's new arguments. Online: the
-- column is catalog-only; the index is built CONCURRENTLY (re-runnable: the migrator drops an
-- invalid one first); the CHECK is added NOT VALID (no scan under lock), then validated while
-- writes go on; the function is replaced in one statement, so callers never find it missing.
CREATE TABLE IF NOT EXISTS "pgdrain"."rate_starts" (
	"kind" text NOT NULL,
	"group_key" text DEFAULT '' NOT NULL,
	"started_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "rate_starts_window" ON "pgdrain"."rate_starts" USING btree ("kind","group_key","started_at");
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD COLUMN IF NOT EXISTS "group_key" text;
--> statement-breakpoint
CREATE INDEX CONCURRENTLY IF NOT EXISTS "jobs_group_holders" ON "pgdrain"."jobs" USING btree ("kind","group_key") WHERE group_key IS NOT NULL AND (status = 'running' OR (status = 'pending' AND attempts > 0));
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" DROP CONSTRAINT IF EXISTS "jobs_group_key_valid";
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD CONSTRAINT "jobs_group_key_valid" CHECK (group_key IS NULL OR length(group_key) BETWEEN 1 AND 200) NOT VALID;
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" VALIDATE CONSTRAINT "jobs_group_key_valid";
--> statement-breakpoint
-- pgdrain.enqueue() was (re)defined here; its live text is src/sql/functions/enqueue.sql, applied by migrate after the migrations.
