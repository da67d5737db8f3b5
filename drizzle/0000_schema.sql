-- IF NOT EXISTS: drizzle's migrator creates the schema first, to hold its migrations table.
CREATE SCHEMA IF NOT EXISTS "pgdrain";
--> statement-breakpoint
CREATE TABLE "pgdrain"."job_counts" (
	"minute" timestamp with time zone NOT NULL,
	"kind" text NOT NULL,
	"completed" bigint DEFAULT 0 NOT NULL,
	"failed" bigint DEFAULT 0 NOT NULL,
	"dead" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "job_counts_pkey" PRIMARY KEY("minute","kind")
);
--> statement-breakpoint
CREATE TABLE "pgdrain"."job_totals" (
	"kind" text PRIMARY KEY NOT NULL,
	"completed" bigint DEFAULT 0 NOT NULL,
	"failed" bigint DEFAULT 0 NOT NULL,
	"dead" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "pgdrain"."jobs" (
	"id" bigserial PRIMARY KEY NOT NULL,
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
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "jobs_status_valid" CHECK (status IN ('pending', 'running', 'dead')),
	CONSTRAINT "jobs_attempts_valid" CHECK (attempts >= 0 AND max_attempts >= 1),
	CONSTRAINT "jobs_visibility_valid" CHECK (visibility_seconds IS NULL OR visibility_seconds > 0),
	CONSTRAINT "jobs_running_is_locked" CHECK ((status = 'running') = (locked_at IS NOT NULL AND locked_by IS NOT NULL))
);
--> statement-breakpoint
CREATE INDEX "jobs_ready" ON "pgdrain"."jobs" USING btree ("run_at","id") WHERE status = 'pending';--> statement-breakpoint
CREATE INDEX "jobs_running" ON "pgdrain"."jobs" USING btree ("locked_at") WHERE status = 'running';--> statement-breakpoint
CREATE INDEX "jobs_dead" ON "pgdrain"."jobs" USING btree ("id") WHERE status = 'dead';--> statement-breakpoint
CREATE UNIQUE INDEX "jobs_dedupe_key" ON "pgdrain"."jobs" USING btree ("dedupe_key") WHERE dedupe_key IS NOT NULL;