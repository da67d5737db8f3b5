-- pgdrain: online
-- Fair kinds (fair: true): their claims take turns across group keys. pgdrain.fair_turns keeps
-- where each kind's last round ended; pgdrain.fair_keys() walks the jobs_fair index from key to
-- key (built CONCURRENTLY, re-runnable: the migrator drops an invalid one first). New objects only.
CREATE TABLE IF NOT EXISTS "pgdrain"."fair_turns" (
	"kind" text PRIMARY KEY NOT NULL,
	"priority" integer NOT NULL,
	"group_key" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX CONCURRENTLY IF NOT EXISTS "jobs_fair" ON "pgdrain"."jobs" USING btree ("kind","priority" DESC NULLS LAST,"group_key","run_at","id") WHERE status = 'pending' AND group_key IS NOT NULL;
--> statement-breakpoint
-- pgdrain.fair_keys() was (re)defined here; its live text is src/sql/functions/fair_keys.sql, applied by migrate after the migrations.
