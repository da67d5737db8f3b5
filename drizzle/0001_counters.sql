CREATE TABLE "job_counts" (
	"minute" timestamp with time zone NOT NULL,
	"kind" text NOT NULL,
	"completed" bigint DEFAULT 0 NOT NULL,
	"failed" bigint DEFAULT 0 NOT NULL,
	"dead" bigint DEFAULT 0 NOT NULL,
	CONSTRAINT "job_counts_pkey" PRIMARY KEY("minute","kind")
);
--> statement-breakpoint
CREATE TABLE "job_totals" (
	"kind" text PRIMARY KEY NOT NULL,
	"completed" bigint DEFAULT 0 NOT NULL,
	"failed" bigint DEFAULT 0 NOT NULL,
	"dead" bigint DEFAULT 0 NOT NULL
);
