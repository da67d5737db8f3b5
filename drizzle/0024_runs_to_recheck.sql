CREATE TABLE "pgdrain"."runs_to_recheck" (
	"run_id" bigint PRIMARY KEY NOT NULL,
	"since" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
-- pgdrain.release_dependents_missed() was (re)defined here; its live text is src/sql/functions/release_dependents_missed.sql, applied by migrate after the migrations.
