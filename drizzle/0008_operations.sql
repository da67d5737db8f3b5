-- pgdrain: online
-- For the people who run it: the last slot a schedule actually enqueued, apart from the last one it
-- handled (the first evaluation records its own time, which the dashboard used to show as "Last
-- enqueued"), and pgdrain.enqueue() taking the caller's W3C trace context (the column came with
-- 0007). Online: a nullable column without a default; the function replaced in one statement.
-- Schedules that enqueued before the upgrade show "never" until their next slot.
ALTER TABLE "pgdrain"."schedules" ADD COLUMN IF NOT EXISTS "last_enqueued_slot" timestamp with time zone;
--> statement-breakpoint
-- pgdrain.enqueue() was (re)defined here; its live text is src/sql/functions/enqueue.sql, applied by migrate after the migrations.
