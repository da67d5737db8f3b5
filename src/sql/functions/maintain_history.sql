-- pgdrain.maintain_history(days_ahead): the day partitions from today (UTC) to days_ahead days on
-- (keepCompletedSeconds is at most 30 days, so a kept job always finds its day's partition), and
-- the partitions whose day is over emptied (TRUNCATE: the partition's own lock only) and dropped
-- (which also locks the parent table briefly: under a 1 s lock_timeout, tried again next round
-- when readers hold it). Rows in the default partition whose keep is over are deleted, 5,000 a call.
-- Returns what it did, and when it next has something to do (next_due: the end of the earliest
-- day that holds rows, the earliest keep in the default partition, the next UTC midnight for the
-- partitions ahead), for a drainer that sleeps until then (the Worker's clock). Idempotent; cheap
-- when there is nothing to do (a catalog lookup per day).
CREATE OR REPLACE FUNCTION pgdrain.maintain_history(days_ahead integer DEFAULT 32)
RETURNS TABLE (created integer, dropped integer, pruned integer, next_due timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '1s'
AS $maintain$
DECLARE
  today date := (now() AT TIME ZONE 'UTC')::date;
  d date;
  part record;
  has_rows boolean;
BEGIN
  created := 0; dropped := 0; pruned := 0;
  FOR i IN 0..days_ahead LOOP
    d := today + i;
    CONTINUE WHEN to_regclass(format('pgdrain.job_history_p%s', to_char(d, 'YYYYMMDD'))) IS NOT NULL;
    BEGIN
      EXECUTE format('CREATE TABLE pgdrain.%I PARTITION OF pgdrain.job_history FOR VALUES FROM (%L) TO (%L)',
                     'job_history_p' || to_char(d, 'YYYYMMDD'), d::timestamp AT TIME ZONE 'UTC', (d + 1)::timestamp AT TIME ZONE 'UTC');
      created := created + 1;
    EXCEPTION WHEN check_violation OR lock_not_available OR duplicate_table THEN
      -- The default partition holds rows of that day (or another round made it just now): they
      -- stay where they are, pruned row by row.
      NULL;
    END;
  END LOOP;
  FOR part IN
    SELECT c.relname FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'pgdrain.job_history'::regclass AND c.relname ~ '^job_history_p[0-9]{8}$'
       AND (to_date(substr(c.relname, 14), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= now()
     ORDER BY c.relname
  LOOP
    BEGIN
      EXECUTE format('TRUNCATE pgdrain.%I', part.relname);
      EXECUTE format('DROP TABLE pgdrain.%I', part.relname);
      dropped := dropped + 1;
    EXCEPTION WHEN lock_not_available THEN
      NULL;
    END;
  END LOOP;
  DELETE FROM pgdrain.job_history_default WHERE keep_until IN (
    SELECT keep_until FROM pgdrain.job_history_default WHERE keep_until <= now() ORDER BY keep_until LIMIT 5000);
  GET DIAGNOSTICS pruned = ROW_COUNT;
  next_due := ((today + 1)::timestamp AT TIME ZONE 'UTC');
  FOR part IN
    SELECT c.relname, (to_date(substr(c.relname, 14), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' AS day_end
      FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'pgdrain.job_history'::regclass AND c.relname ~ '^job_history_p[0-9]{8}$'
     ORDER BY c.relname
  LOOP
    EXIT WHEN part.day_end >= next_due;
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM pgdrain.%I)', part.relname) INTO has_rows;
    IF has_rows THEN
      next_due := part.day_end;
      EXIT;
    END IF;
  END LOOP;
  next_due := least(next_due, (SELECT min(keep_until) FROM pgdrain.job_history_default));
  RETURN NEXT;
END
$maintain$;
