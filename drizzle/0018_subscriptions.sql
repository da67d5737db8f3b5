CREATE TABLE "pgdrain"."subscriptions" (
	"event" text NOT NULL,
	"kind" text NOT NULL,
	"max_attempts" integer DEFAULT 3 NOT NULL,
	"priority" integer DEFAULT 0 NOT NULL,
	"keep_seconds" integer,
	"visibility_seconds" integer,
	"subscribed_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "subscriptions_pkey" PRIMARY KEY("event","kind")
);
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD COLUMN "started_by" jsonb;--> statement-breakpoint
-- pgdrain.send_event() was (re)defined here; its live text is src/sql/functions/send_event.sql, applied by migrate after the migrations.
