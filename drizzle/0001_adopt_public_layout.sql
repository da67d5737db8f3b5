-- Databases migrated before pgdrain had a schema of its own hold its tables in `public` and its
-- two migrations in drizzle.__drizzle_migrations. Those tables are moved here, in place of the
-- empty ones 0000 has just created: ALTER TABLE ... SET SCHEMA keeps every row as it is (ids,
-- locks, dedupe keys, counters), with its sequence, indexes and constraints; nothing is copied.
-- The move happens only when those migration rows (by their journal timestamps) say the tables
-- are pgdrain's and the table has pgdrain's columns: an application's own public.jobs is never
-- touched. Stop every drainer of the old version before this runs: their SQL names `jobs`
-- without a schema and finds nothing here afterwards.
DO $adopt$
DECLARE
  had_init boolean := false;     -- 0000_init: public.jobs
  had_counters boolean := false; -- 0001_counters: public.job_counts, public.job_totals
BEGIN
  IF to_regclass('drizzle.__drizzle_migrations') IS NULL THEN
    RETURN;
  END IF;
  SELECT coalesce(bool_or(created_at = 1795979580376), false), coalesce(bool_or(created_at = 1795987605213), false)
    INTO had_init, had_counters
    FROM drizzle.__drizzle_migrations;

  IF had_init AND to_regclass('public.jobs') IS NOT NULL AND (
       SELECT count(*) FROM information_schema.columns
        WHERE table_schema = 'public' AND table_name = 'jobs'
          AND column_name IN ('kind', 'payload', 'run_at', 'locked_by', 'status', 'dedupe_key', 'visibility_seconds')) = 7 THEN
    IF EXISTS (SELECT FROM pgdrain.jobs) THEN
      RAISE EXCEPTION 'pgdrain: both public.jobs (the old layout) and pgdrain.jobs hold jobs; move them by hand';
    END IF;
    DROP TABLE pgdrain.jobs;
    ALTER TABLE public.jobs SET SCHEMA pgdrain;
  END IF;

  IF had_counters AND to_regclass('public.job_counts') IS NOT NULL AND to_regclass('public.job_totals') IS NOT NULL THEN
    DROP TABLE pgdrain.job_counts, pgdrain.job_totals;
    ALTER TABLE public.job_counts SET SCHEMA pgdrain;
    ALTER TABLE public.job_totals SET SCHEMA pgdrain;
  END IF;

  -- Forget pgdrain's rows in drizzle's shared migrations table (an application's own drizzle
  -- migrations may live there too), and the table and schema when nothing else is left in them.
  DELETE FROM drizzle.__drizzle_migrations WHERE created_at IN (1795979580376, 1795987605213);
  IF NOT EXISTS (SELECT FROM drizzle.__drizzle_migrations) THEN
    DROP TABLE drizzle.__drizzle_migrations;
    BEGIN
      DROP SCHEMA drizzle; -- RESTRICT: kept when anything else is in it
    EXCEPTION WHEN dependent_objects_still_exist THEN
      NULL;
    END;
  END IF;
END
$adopt$;
