-- pgdrain.fair_keys(kind, priority, after, how_many): the next `how_many` turns of `kind` at `priority`: its group keys with pending jobs, in key order
-- after `after` (NULL: from the first), and a NULL at the end of the keys — the turn of the jobs
-- without a key —, wrapping around once to end at `after`. One index probe per key visited,
-- however many keys the kind has.
CREATE OR REPLACE FUNCTION pgdrain.fair_keys(kind text, priority integer, after text, how_many integer)
RETURNS SETOF text
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $fair_keys$
DECLARE
  cursor_key text := fair_keys.after;
  next_key text;
  wrapped boolean := false;
  found_keys integer := 0;
BEGIN
  WHILE found_keys < fair_keys.how_many LOOP
    IF cursor_key IS NULL THEN
      SELECT j.group_key INTO next_key FROM pgdrain.jobs j
       WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.kind = fair_keys.kind AND j.priority = fair_keys.priority
       ORDER BY j.priority DESC NULLS LAST, j.group_key LIMIT 1;
    ELSE
      SELECT j.group_key INTO next_key FROM pgdrain.jobs j
       WHERE j.status = 'pending' AND j.group_key IS NOT NULL AND j.kind = fair_keys.kind AND j.priority = fair_keys.priority AND j.group_key > cursor_key
       ORDER BY j.priority DESC NULLS LAST, j.group_key LIMIT 1;
    END IF;
    IF next_key IS NULL THEN
      -- The end of the keys: the keyless jobs' turn, then once around from the first, up to where the round began.
      EXIT WHEN wrapped;
      RETURN NEXT NULL;
      found_keys := found_keys + 1;
      EXIT WHEN fair_keys.after IS NULL;
      wrapped := true;
      cursor_key := NULL;
      CONTINUE;
    END IF;
    EXIT WHEN wrapped AND next_key > fair_keys.after;
    RETURN NEXT next_key;
    found_keys := found_keys + 1;
    EXIT WHEN wrapped AND next_key = fair_keys.after;
    cursor_key := next_key;
  END LOOP;
END
$fair_keys$;
