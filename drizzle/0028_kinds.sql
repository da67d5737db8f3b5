-- Kinds the database knows (wave 6): each drainer writes its kinds here when it starts, so a job
-- enqueued by the kind's name alone (SQL, code without the definition) gets the columns a typed
-- enqueue writes. A new table only.
CREATE TABLE "pgdrain"."kinds" (
	"kind" text PRIMARY KEY NOT NULL,
	"version" integer DEFAULT 1 NOT NULL,
	"max_attempts" integer,
	"priority" integer,
	"visibility_seconds" integer,
	"keep_seconds" integer,
	"options" jsonb NOT NULL,
	"code" jsonb NOT NULL,
	"written_by" text NOT NULL,
	"written_at" timestamp with time zone DEFAULT now() NOT NULL
);
