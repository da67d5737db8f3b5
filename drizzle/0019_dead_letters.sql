CREATE TABLE "pgdrain"."dead_letter_routes" (
	"kind" text PRIMARY KEY NOT NULL,
	"dead_letter" text NOT NULL,
	"max_attempts" integer DEFAULT 3 NOT NULL,
	"priority" integer DEFAULT 0 NOT NULL,
	"keep_seconds" integer,
	"routed_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD COLUMN "dead_letter_id" bigint;