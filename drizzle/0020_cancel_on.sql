CREATE TABLE "pgdrain"."cancel_triggers" (
	"event" text NOT NULL,
	"event_key" text NOT NULL,
	"job_id" bigint NOT NULL,
	CONSTRAINT "cancel_triggers_pkey" PRIMARY KEY("event","event_key","job_id")
);

--> statement-breakpoint
-- pgdrain.send_event() was (re)defined here; its live text is src/sql/functions/send_event.sql, applied by migrate after the migrations.
