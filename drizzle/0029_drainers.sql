-- A sidecar's DRAINER_ID as a lease row (wave 6): the protection no longer hangs on one server
-- session surviving, which a transaction pooler does not give. A new table only.
CREATE TABLE "pgdrain"."drainers" (
	"drainer_id" text PRIMARY KEY NOT NULL,
	"holder" text NOT NULL,
	"session_pid" integer,
	"session_started" timestamp with time zone,
	"renewed_at" timestamp with time zone DEFAULT now() NOT NULL,
	"taken_at" timestamp with time zone DEFAULT now() NOT NULL
);
