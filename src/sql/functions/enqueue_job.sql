-- pgdrain.enqueue_job(…): the one place a job with a dedupe key, with jobs to wait for (`after`) or
-- enqueued by its kind's name alone is enqueued, whoever enqueues it — pgdrain.enqueue() in SQL, and
-- the TypeScript enqueue (src/queries/enqueue/one.ts). What it is given is stored as given: checking
-- it (bounds) is the caller's. With from_kind, what it is not given (NULL) among max_attempts,
-- priority, visibility_seconds, keep_seconds and version comes from the kind's row in pgdrain.kinds
-- (what a typed enqueue of the kind writes; columns.ts has the same list for the TypeScript bulk
-- enqueue); a kind no drainer wrote gets the table's defaults. One row back: the job's id, status and run_at, whether it was inserted
-- (false: a job holding the dedupe key answers), whether it replaced a pending job's payload
-- (dedupe_mode 'replace'), or, with nothing written, the `after` ids that do not exist. Drainers are
-- notified (delivered at COMMIT, never for a rollback) of a job that is pending and due now.
--
--   dedupe_key, 'keep'     inserted, or — while a job holds the key — that job returned as it is
--   dedupe_key, 'replace'  a pending job of the kind with the key takes the payload and run_at; else
--                          the key's running or dead job of the kind gives up the key (it runs on, or
--                          stays dead, untouched otherwise) and the job is inserted; a key held by
--                          another kind's job is left alone, as 'keep' would
--   after                  the jobs it waits for are marked as having dependents — which locks them,
--                          in id order, so none can complete before this job is committed and counted
--                          (the statement that ends one counts it down: pgdrain.after_jobs_ended()),
--                          and two enqueues waiting for the same jobs cannot deadlock; it is inserted
--                          `waiting` for those not completed yet, `dead` at once if one of them ended
--                          dead or cancelled, `pending` if all completed; a dependency row per id. A
--                          kept job that finished is in pgdrain.job_history: final, nothing to lock.
CREATE OR REPLACE FUNCTION pgdrain.enqueue_job(
  kind text,
  payload jsonb,
  run_at timestamptz,
  max_attempts integer,
  dedupe_key text,
  visibility_seconds integer,
  priority integer,
  group_key text,
  timeout_ms integer,
  keep_seconds integer,
  traceparent text,
  dedupe_mode text,
  after bigint[],
  version integer DEFAULT NULL,
  from_kind boolean DEFAULT false,
  OUT id bigint, OUT status text, OUT run_at_ms float8, OUT inserted boolean, OUT replaced boolean, OUT missing bigint[]
)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $enqueue_job$
#variable_conflict use_column
DECLARE
  due timestamptz := coalesce(enqueue_job.run_at, now());
  waits_for bigint[] := ARRAY(SELECT DISTINCT unnest(enqueue_job.after));
  found_ids bigint[];
  unfinished integer := 0;
  ended_parent bigint;
  ended_status text;
  holder_kind text;
  defined pgdrain.kinds%ROWTYPE;
BEGIN
  inserted := false;
  replaced := false;
  IF from_kind THEN
    SELECT * INTO defined FROM pgdrain.kinds k WHERE k.kind = enqueue_job.kind;
  END IF;
  IF cardinality(waits_for) > 0 THEN
    -- Marked once: a parent already marked is only locked. Marking it again for every job that waits
    -- for it would write a row version per waiting job (a batch of 1,000 jobs after the same 100:
    -- 100,000 versions of 100 rows, each write walking the ones before it).
    WITH parents AS MATERIALIZED (
      SELECT l.id, l.status, l.has_dependents FROM pgdrain.jobs l WHERE l.id = ANY(waits_for) ORDER BY l.id FOR UPDATE),
    marked AS (
      UPDATE pgdrain.jobs p SET has_dependents = true FROM parents l
       WHERE p.id = l.id AND l.has_dependents IS NOT TRUE RETURNING p.id),
    found AS (
      SELECT m.id, m.status FROM parents m
      UNION ALL
      SELECT h.id, h.status FROM pgdrain.job_history h WHERE h.id = ANY(waits_for) AND h.keep_until > now())
    SELECT array_agg(DISTINCT f.id), count(DISTINCT f.id) FILTER (WHERE f.status <> 'completed'),
           min(f.id) FILTER (WHERE f.status IN ('dead', 'cancelled'))
      INTO found_ids, unfinished, ended_parent FROM found f;
    -- One that moved to the history while the statement above ran is found by a fresh snapshot.
    IF coalesce(cardinality(found_ids), 0) < cardinality(waits_for) THEN
      SELECT array_agg(DISTINCT f.id), count(DISTINCT f.id) FILTER (WHERE f.status <> 'completed'),
             min(f.id) FILTER (WHERE f.status IN ('dead', 'cancelled'))
        INTO found_ids, unfinished, ended_parent
        FROM (SELECT m.id, m.status FROM pgdrain.jobs m WHERE m.id = ANY(waits_for) AND m.has_dependents
              UNION ALL
              SELECT h.id, h.status FROM pgdrain.job_history h WHERE h.id = ANY(waits_for) AND h.keep_until > now()) f;
    END IF;
    IF coalesce(cardinality(found_ids), 0) < cardinality(waits_for) THEN
      missing := ARRAY(SELECT unnest(waits_for) EXCEPT SELECT unnest(found_ids) ORDER BY 1);
      RETURN;
    END IF;
    IF ended_parent IS NOT NULL THEN
      SELECT h.status INTO ended_status FROM pgdrain.jobs_and_history h WHERE h.id = ended_parent;
    END IF;
  END IF;

  -- A concurrent enqueue of the same key can commit, or its job be deleted or claimed, between one
  -- statement and the next; each try takes a fresh snapshot.
  FOR attempt IN 1..5 LOOP
    IF enqueue_job.dedupe_key IS NOT NULL AND enqueue_job.dedupe_mode = 'replace' THEN
      UPDATE pgdrain.jobs j SET payload = enqueue_job.payload, run_at = due
       WHERE j.dedupe_key = enqueue_job.dedupe_key AND j.kind = enqueue_job.kind AND j.status = 'pending'
      RETURNING j.id, j.status, extract(epoch from j.run_at) * 1000 INTO id, status, run_at_ms;
      IF id IS NOT NULL THEN
        replaced := true;
        IF due <= now() THEN
          PERFORM pg_notify('{{NOTIFY_CHANNEL}}', enqueue_job.kind);
        END IF;
        RETURN;
      END IF;
      UPDATE pgdrain.jobs j SET dedupe_key = NULL
       WHERE j.dedupe_key = enqueue_job.dedupe_key AND j.kind = enqueue_job.kind AND j.status IN ('running', 'dead');
    END IF;
    INSERT INTO pgdrain.jobs (kind, payload, run_at, max_attempts, dedupe_key, visibility_seconds, priority, group_key,
                              timeout_ms, keep_seconds, traceparent, version, status, waiting_for, last_error, finished_at)
    VALUES (enqueue_job.kind, enqueue_job.payload, due,
            coalesce(enqueue_job.max_attempts, defined.max_attempts, {{DEFAULT_MAX_ATTEMPTS}}),
            enqueue_job.dedupe_key, coalesce(enqueue_job.visibility_seconds, defined.visibility_seconds),
            coalesce(enqueue_job.priority, defined.priority, {{DEFAULT_PRIORITY}}),
            enqueue_job.group_key, enqueue_job.timeout_ms, coalesce(enqueue_job.keep_seconds, defined.keep_seconds),
            enqueue_job.traceparent, coalesce(enqueue_job.version, nullif(defined.version, 1)),
            CASE WHEN ended_parent IS NOT NULL THEN 'dead' WHEN unfinished > 0 THEN 'waiting' ELSE 'pending' END,
            CASE WHEN ended_parent IS NULL AND unfinished > 0 THEN unfinished END,
            CASE WHEN ended_parent IS NOT NULL THEN format('job %s it waits for ended %s', ended_parent, ended_status) END,
            CASE WHEN ended_parent IS NOT NULL THEN now() END)
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING pgdrain.jobs.id, pgdrain.jobs.status, extract(epoch from pgdrain.jobs.run_at) * 1000 INTO id, status, run_at_ms;
    IF id IS NOT NULL THEN
      inserted := true;
      IF cardinality(waits_for) > 0 THEN
        INSERT INTO pgdrain.job_dependencies (depends_on, job_id) SELECT unnest(waits_for), enqueue_job.id;
      END IF;
      IF status = 'pending' AND due <= now() THEN
        PERFORM pg_notify('{{NOTIFY_CHANNEL}}', enqueue_job.kind);
      END IF;
      RETURN;
    END IF;
    SELECT j.id, j.status, extract(epoch from j.run_at) * 1000, j.kind INTO id, status, run_at_ms, holder_kind
      FROM pgdrain.jobs j WHERE j.dedupe_key = enqueue_job.dedupe_key;
    IF id IS NOT NULL AND (enqueue_job.dedupe_mode IS DISTINCT FROM 'replace' OR holder_kind <> enqueue_job.kind) THEN
      RETURN;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'pgdrain.enqueue: could not insert or find the job with dedupe key %', quote_literal(enqueue_job.dedupe_key)
    USING ERRCODE = 'serialization_failure';
END
$enqueue_job$;
