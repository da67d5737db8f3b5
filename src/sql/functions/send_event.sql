-- pgdrain.send_event(event, key, payload, id): sends an event, in the caller's transaction (a rollback
-- sends nothing and wakes nothing). `id`, the sender's own (optional): a repeat of the event's name
-- and id while the first is kept sends nothing and returns the first's id. It is stored (kept for the retention window, so a wait that
-- begins after it still finds it), and in the same statement:
--   - every run waiting for this event and key (and whose match the payload contains) is answered
--     with its payload and made pending (one waiting with a timeout was pending until it: it is due
--     now);
--   - one job of every kind subscribed to the event (pgdrain.subscriptions) is enqueued, its payload
--     the event's, its options its subscription's, `started_by` naming the event (ctx.event()), its
--     dedupe key the event's id and the kind: one job per event and subscriber;
--   - the workflow runs listed for this event and key in pgdrain.cancel_triggers (defineWorkflow
--     cancelOn) are cancelled, with their children.
-- Returns the event's id. An event nobody waits for, subscribes to or cancels with costs an index
-- probe or three.
CREATE OR REPLACE FUNCTION pgdrain.send_event(event text, key text, payload jsonb DEFAULT '{}'::jsonb, id text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
AS $send_event$
#variable_conflict use_column
DECLARE
  sent bigint;
  notified bigint;
BEGIN
  IF send_event.event IS NULL OR send_event.event !~ '^[A-Za-z0-9_.:-]{1,100}$' THEN
    RAISE EXCEPTION 'pgdrain.send_event: event must be 1-100 letters, digits, or _ . : -' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF send_event.key IS NULL OR length(send_event.key) NOT BETWEEN 1 AND 500 THEN
    RAISE EXCEPTION 'pgdrain.send_event: key must be 1 to 500 characters' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF send_event.payload IS NOT NULL AND octet_length(send_event.payload::text) > 65536 THEN
    RAISE EXCEPTION 'pgdrain.send_event: payload is % bytes of JSON as PostgreSQL prints it (", " and ": " between values); an event carries at most 65536', octet_length(send_event.payload::text)
      USING ERRCODE = 'program_limit_exceeded';
  END IF;
  IF send_event.id IS NOT NULL AND length(send_event.id) NOT BETWEEN 1 AND 500 THEN
    RAISE EXCEPTION 'pgdrain.send_event: id must be 1 to 500 characters (or NULL for none)' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- An id its sender gave: a repeat of the event's name and id, while the first is kept
  -- (EVENT_RETENTION_SECONDS), is the first — nothing is sent again, its id is returned. The lock
  -- queues two sends of one id; the unique index holds it whatever happens.
  IF send_event.id IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtextextended('pgdrain.event-id:' || send_event.event || ':' || send_event.id, 0));
    SELECT e.id INTO sent FROM pgdrain.events e WHERE e.event = send_event.event AND e.sender_id = send_event.id;
    IF sent IS NOT NULL THEN
      RETURN sent;
    END IF;
  END IF;
  -- The waits on this event and key look for it and park under the same lock: an event is never
  -- sent between a wait's look and its park unseen by both.
  PERFORM pg_advisory_xact_lock(hashtextextended('pgdrain.event:' || send_event.event || ':' || send_event.key, 0));
  INSERT INTO pgdrain.events (event, event_key, payload, sender_id)
  VALUES (send_event.event, send_event.key, send_event.payload, send_event.id) RETURNING pgdrain.events.id INTO sent;
  WITH answered AS (
    UPDATE pgdrain.workflow_steps s SET status = 'completed', result = send_event.payload, event_id = sent, finished_at = now(), wake_at = NULL
     WHERE s.status = 'waiting' AND s.event = send_event.event AND s.event_key = send_event.key
       AND (s.event_match IS NULL OR send_event.payload @> s.event_match)
    RETURNING s.job_id),
  woken AS (
    UPDATE pgdrain.jobs j SET status = 'pending', run_at = now()
      FROM answered a WHERE j.id = a.job_id AND (j.status = 'waiting' OR (j.status = 'pending' AND j.run_at > now()))
    RETURNING j.kind),
  started AS (
    INSERT INTO pgdrain.jobs (kind, payload, max_attempts, priority, keep_seconds, visibility_seconds, dedupe_key, started_by)
    SELECT s.kind, coalesce(send_event.payload, '{}'::jsonb), s.max_attempts, s.priority, s.keep_seconds, s.visibility_seconds,
           'pgdrain.event:' || sent || ':' || s.kind,
           jsonb_build_object('id', sent::text, 'event', send_event.event, 'key', send_event.key)
      FROM pgdrain.subscriptions s WHERE s.event = send_event.event
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING kind)
  SELECT count(pg_notify('{{NOTIFY_CHANNEL}}', kind)) INTO notified FROM (SELECT kind FROM woken UNION SELECT kind FROM started) k;
  -- Workflow runs this event cancels (cancelOn), with their children, as pgdrain.cancel() does.
  PERFORM pgdrain.cancel(t.job_id)
     FROM pgdrain.cancel_triggers t JOIN pgdrain.jobs j ON j.id = t.job_id
    WHERE t.event = send_event.event AND t.event_key = send_event.key AND j.status IN ('pending', 'running', 'waiting');
  RETURN sent;
END
$send_event$;
