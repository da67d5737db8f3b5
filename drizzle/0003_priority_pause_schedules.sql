CREATE TABLE "pgdrain"."paused_kinds" (
	"kind" text PRIMARY KEY NOT NULL,
	"paused_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "pgdrain"."schedules" (
	"name" text PRIMARY KEY NOT NULL,
	"last_slot" timestamp with time zone,
	"skipped" bigint DEFAULT 0 NOT NULL,
	"evaluated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
DROP INDEX "pgdrain"."jobs_ready";--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD COLUMN "priority" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX "jobs_ready" ON "pgdrain"."jobs" USING btree ("priority" DESC NULLS LAST,"run_at","id") WHERE status = 'pending';--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD CONSTRAINT "jobs_priority_valid" CHECK (priority BETWEEN -1000 AND 1000);