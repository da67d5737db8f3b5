-- pgdrain: online
-- Flow control across every drainer: group keys (per-key concurrency, per-key FIFO), the starts
-- of rate-limited kinds in their window, and the enqueue function's new arguments. Online: the
-- column is catalog-only; the index is built CONCURRENTLY (re-runnable: the migrator drops an
-- invalid one first); the CHECK is added NOT VALID (no scan under lock), then validated while
-- writes go on; the function is replaced in one statement, so callers never find it missing.
CREATE TABLE IF NOT EXISTS "pgdrain"."rate_starts" (
	"kind" text NOT NULL,
	"group_key" text DEFAULT '' NOT NULL,
	"started_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "rate_starts_window" ON "pgdrain"."rate_starts" USING btree ("kind","group_key","started_at");
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD COLUMN IF NOT EXISTS "group_key" text;
--> statement-breakpoint
CREATE INDEX CONCURRENTLY IF NOT EXISTS "jobs_group_holders" ON "pgdrain"."jobs" USING btree ("kind","group_key") WHERE group_key IS NOT NULL AND (status = 'running' OR (status = 'pending' AND attempts > 0));
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" DROP CONSTRAINT IF EXISTS "jobs_group_key_valid";
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" ADD CONSTRAINT "jobs_group_key_valid" CHECK (group_key IS NULL OR length(group_key) BETWEEN 1 AND 200) NOT VALID;
--> statement-breakpoint
ALTER TABLE "pgdrain"."jobs" VALIDATE CONSTRAINT "jobs_group_key_valid";
--> statement-breakpoint
-- pgdrain.enqueue() gains group_key and dedupe_mode. 'replace' (debounce): a pending job of the
-- same kind with the key takes the new payload and run_at; a running or dead one keeps running (or
-- stays dead), untouched but for giving up its key, and a new job with the key is enqueued. A key
-- held by a job of another kind is left alone: its id is returned, as with 'keep'.
DROP FUNCTION IF EXISTS pgdrain.enqueue(text, jsonb, timestamptz, integer, text, integer);
CREATE OR REPLACE FUNCTION pgdrain.enqueue(
  kind text,
  payload jsonb,
  run_at timestamptz DEFAULT now(),
  max_attempts integer DEFAULT 3,
  dedupe_key text DEFAULT NULL,
  priority integer DEFAULT 0,
  group_key text DEFAULT NULL,
  dedupe_mode text DEFAULT 'keep'
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $enqueue$
#variable_conflict use_column
DECLARE
  job_id bigint;
  holder_kind text;
  due timestamptz := coalesce(enqueue.run_at, now());
BEGIN
  IF enqueue.kind IS NULL OR enqueue.kind !~ '^[A-Za-z0-9_.:-]{1,100}$' THEN
    RAISE EXCEPTION 'pgdrain.enqueue: kind % is not a job kind: use 1-100 letters, digits, or _ . : -', coalesce(quote_literal(enqueue.kind), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.payload IS NULL THEN
    RAISE EXCEPTION 'pgdrain.enqueue: payload is NULL: pass a jsonb value (''{}'' for none)'
      USING ERRCODE = 'null_value_not_allowed';
  END IF;
  IF enqueue.priority IS NOT NULL AND enqueue.priority NOT BETWEEN -1000 AND 1000 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: priority is %, it must be between -1000 and 1000 (higher runs first)', enqueue.priority
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.max_attempts IS NOT NULL AND enqueue.max_attempts < 1 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: max_attempts is %, it must be at least 1', enqueue.max_attempts
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.group_key IS NOT NULL AND length(enqueue.group_key) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'pgdrain.enqueue: group_key is % characters long; use 1 to 200 (or NULL for none)', length(enqueue.group_key)
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF enqueue.dedupe_mode IS NULL OR enqueue.dedupe_mode NOT IN ('keep', 'replace') THEN
    RAISE EXCEPTION 'pgdrain.enqueue: dedupe_mode is %, use ''keep'' (the existing job stays as it is) or ''replace''', coalesce(quote_literal(enqueue.dedupe_mode), 'NULL')
      USING ERRCODE = 'invalid_parameter_value';
  END IF;

  -- A concurrent enqueue of the same key can commit, or its job be deleted or claimed, between one
  -- statement and the next; each retry takes a fresh snapshot.
  FOR attempt IN 1..5 LOOP
    IF enqueue.dedupe_key IS NOT NULL AND enqueue.dedupe_mode = 'replace' THEN
      UPDATE pgdrain.jobs j SET payload = enqueue.payload, run_at = due
       WHERE j.dedupe_key = enqueue.dedupe_key AND j.kind = enqueue.kind AND j.status = 'pending'
      RETURNING j.id INTO job_id;
      IF job_id IS NOT NULL THEN
        IF due <= now() THEN
          PERFORM pg_notify('pgdrain_jobs', enqueue.kind);
        END IF;
        RETURN job_id;
      END IF;
      UPDATE pgdrain.jobs j SET dedupe_key = NULL
       WHERE j.dedupe_key = enqueue.dedupe_key AND j.kind = enqueue.kind AND j.status IN ('running', 'dead');
    END IF;
    INSERT INTO pgdrain.jobs (kind, payload, run_at, max_attempts, dedupe_key, priority, group_key)
    VALUES (enqueue.kind, enqueue.payload, due, coalesce(enqueue.max_attempts, 3), enqueue.dedupe_key, coalesce(enqueue.priority, 0), enqueue.group_key)
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING id INTO job_id;
    IF job_id IS NOT NULL THEN
      IF due <= now() THEN
        PERFORM pg_notify('pgdrain_jobs', enqueue.kind);
      END IF;
      RETURN job_id;
    END IF;
    SELECT id, j.kind INTO job_id, holder_kind FROM pgdrain.jobs j WHERE j.dedupe_key = enqueue.dedupe_key;
    IF job_id IS NOT NULL AND (enqueue.dedupe_mode = 'keep' OR holder_kind <> enqueue.kind) THEN
      RETURN job_id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'pgdrain.enqueue: could not insert or find the job with dedupe key %', quote_literal(enqueue.dedupe_key)
    USING ERRCODE = 'serialization_failure';
END
$enqueue$;
