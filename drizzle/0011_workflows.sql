-- pgdrain: online
-- Durable workflows (src/workflows/): a row per step a run reached (pgdrain.workflow_steps), events
-- kept for a retention window (pgdrain.events), pgdrain.send_event() and pgdrain.wake_workflows(),
-- and pgdrain.cancel() taught that a workflow's children go with it and that a workflow parked on a
-- child (step.invoke) is woken, not killed, when that child ends dead or cancelled.
-- Online: new objects only, and one function replaced in one statement.
CREATE TABLE IF NOT EXISTS "pgdrain"."events" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"event" text NOT NULL,
	"event_key" text NOT NULL,
	"payload" jsonb,
	"sent_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "pgdrain"."workflow_steps" (
	"job_id" bigint NOT NULL,
	"name" text NOT NULL,
	"position" integer NOT NULL,
	"status" text NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"result" jsonb,
	"error" text,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"finished_at" timestamp with time zone,
	"wake_at" timestamp with time zone,
	"event" text,
	"event_key" text,
	"event_id" bigint,
	"child_id" bigint,
	CONSTRAINT "workflow_steps_pkey" PRIMARY KEY("job_id","name"),
	CONSTRAINT "workflow_steps_status_valid" CHECK (status IN ('completed', 'failed', 'sleeping', 'waiting'))
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "events_lookup" ON "pgdrain"."events" USING btree ("event","event_key","id");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "events_sent" ON "pgdrain"."events" USING btree ("sent_at");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "workflow_steps_wake" ON "pgdrain"."workflow_steps" USING btree ("wake_at") WHERE status IN ('sleeping', 'waiting') AND wake_at IS NOT NULL;--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "workflow_steps_event" ON "pgdrain"."workflow_steps" USING btree ("event","event_key") WHERE status = 'waiting' AND event IS NOT NULL;;--> statement-breakpoint
-- pgdrain.record_step() was (re)defined here; its live text is src/sql/functions/record_step.sql, applied by migrate after the migrations.
--> statement-breakpoint
-- pgdrain.park_sleep() was (re)defined here; its live text is src/sql/functions/park_sleep.sql, applied by migrate after the migrations.
--> statement-breakpoint
-- pgdrain.park_wait() was (re)defined here; its live text is src/sql/functions/park_wait.sql, applied by migrate after the migrations.
--> statement-breakpoint
-- pgdrain.send_event() was (re)defined here; its live text is src/sql/functions/send_event.sql, applied by migrate after the migrations.
--> statement-breakpoint
-- pgdrain.wake_workflows() was (re)defined here; its live text is src/sql/functions/wake_workflows.sql, applied by migrate after the migrations.
--> statement-breakpoint
-- pgdrain.cancel() was (re)defined here; its live text is src/sql/functions/cancel.sql, applied by migrate after the migrations.
