-- pgdrain: online
-- Limits per group key from data: pgdrain.group_limits and pgdrain.set_group_limits(). New objects only.
CREATE TABLE IF NOT EXISTS "pgdrain"."group_limits" (
	"kind" text NOT NULL,
	"group_key" text NOT NULL,
	"concurrency" integer,
	"rate_limit" integer,
	"rate_period_seconds" double precision,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "group_limits_pkey" PRIMARY KEY("kind","group_key"),
	CONSTRAINT "group_limits_concurrency_valid" CHECK (concurrency IS NULL OR concurrency >= 1),
	CONSTRAINT "group_limits_rate_valid" CHECK ((rate_limit IS NULL) = (rate_period_seconds IS NULL) AND (rate_limit IS NULL OR (rate_limit >= 1 AND rate_period_seconds > 0 AND rate_period_seconds <= 86400))),
	CONSTRAINT "group_limits_something" CHECK (concurrency IS NOT NULL OR rate_limit IS NOT NULL)
);
;--> statement-breakpoint
-- pgdrain.set_group_limits() was (re)defined here; its live text is src/sql/functions/set_group_limits.sql, applied by migrate after the migrations.
