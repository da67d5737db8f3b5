// pgdrain keeps everything in the PostgreSQL schema `pgdrain`: a fresh database gets nothing in
// `public`, a database migrated by wave 1 (tables in `public`, migrations in drizzle's shared
// table) upgrades in place with every row kept, and an application's own `public.jobs` is never
// touched.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrate } from 'drizzle-orm/node-postgres/migrator';
import pg from 'pg';
import { afterEach, expect, it } from 'vitest';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { migrateDatabase, migrationsFolder } from '../src/db/migrate.ts';
import { drain } from '../src/drain/index.ts';
import { JobRegistry, noopJob } from '../src/jobs/index.ts';
import { enqueue, reap, retryDead } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { WAVE5, databaseShippedBy, shippedMigrations } from './support/shipped-migrations.ts';

// The drizzle/ folder as wave 1 shipped it, applied the way wave 1 applied it.
const WAVE1_MIGRATIONS = fileURLToPath(new URL('./fixtures/wave1-migrations', import.meta.url));
async function migrateLikeWave1(url: string) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await migrate(drizzle({ client }), { migrationsFolder: WAVE1_MIGRATIONS });
  } finally {
    await client.end();
  }
}

let t: TestDatabase | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

/** A new database migrated by the last wave-5 release up to (not including) the migration whose tag
 * starts with `tag`: what a release before it left. */
const databaseMigratedBefore = (tag: string) => databaseShippedBy(WAVE5, tag);

/** Every relation, function and schema that is not PostgreSQL's own. */
async function userObjects(db: TestDatabase) {
  const relations = await db.query<{ name: string }>(
    `SELECT n.nspname || '.' || c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') ORDER BY 1`,
  );
  const functions = await db.query<{ name: string }>(
    `SELECT p.oid::regprocedure::text AS name FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`,
  );
  const schemas = await db.query<{ name: string }>(
    `SELECT nspname AS name FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema' ORDER BY 1`,
  );
  return {
    relations: relations.map((r) => r.name),
    functions: functions.map((r) => r.name),
    schemas: schemas.map((r) => r.name),
  };
}

it('a fresh migration puts every table, index, sequence and function in the schema pgdrain and nothing in public', async () => {
  t = await createTestDatabase();
  const objects = await userObjects(t);
  expect(objects.schemas).toEqual(['pgdrain', 'public']);
  expect(objects.relations.filter((r) => !r.startsWith('pgdrain.'))).toEqual([]);
  expect(objects.relations).toEqual(
    expect.arrayContaining([
      'pgdrain.jobs',
      'pgdrain.jobs_ready',
      'pgdrain.jobs_id_seq',
      'pgdrain.job_counts',
      'pgdrain.job_totals',
      'pgdrain.migrations',
      'pgdrain.job_dependencies',
      'pgdrain.finished_jobs',
      'pgdrain.jobs_kept',
      'pgdrain.job_history',
      'pgdrain.job_history_default',
      'pgdrain.jobs_and_history',
    ]),
  );
  expect(objects.functions).toEqual([
    'pgdrain.after_jobs_ended(bigint[],text[],text[],boolean[],boolean)',
    'pgdrain.cancel(bigint)',
    'pgdrain.claim(integer,text[],text,integer)',
    'pgdrain.claim_ids(bigint[],integer,text[],text,integer)',
    'pgdrain.enqueue(text,jsonb,timestamp with time zone,integer,text,integer,text,text,bigint[],integer,text)',
    'pgdrain.enqueue_job(text,jsonb,timestamp with time zone,integer,text,integer,integer,text,integer,integer,text,text,bigint[],integer,boolean)',
    'pgdrain.fair_keys(text,integer,text,integer)',
    'pgdrain.hold_run(bigint,text,jsonb)',
    'pgdrain.maintain_history(integer)',
    'pgdrain.park_sleep(bigint,text,text,integer,timestamp with time zone,timestamp with time zone,text)',
    'pgdrain.park_steps(bigint,text,jsonb)',
    'pgdrain.park_wait(bigint,text,text,integer,timestamp with time zone,text,text,timestamp with time zone,jsonb)',
    'pgdrain.record_step(bigint,text,text,integer,text,integer,jsonb,text,timestamp with time zone,boolean,text)',
    'pgdrain.record_steps(bigint[],text[],text[],integer[],integer[],text[],timestamp with time zone[],text[])',
    'pgdrain.release_dependents_missed(bigint[],text[],bigint[])',
    'pgdrain.send_dead_letters(bigint[])',
    'pgdrain.send_event(text,text,jsonb,text)',
    'pgdrain.set_group_limits(text,text,integer,integer,double precision)',
    'pgdrain.snooze_run(bigint,text,timestamp with time zone,text,integer,timestamp with time zone,integer,text)',
  ]);
  // Applying the migrations again changes nothing.
  await migrateDatabase(t.url);
  expect(await userObjects(t)).toEqual(objects);
  expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.migrations')).toEqual([
    { n: readMigrationFiles({ migrationsFolder: migrationsFolder() }).length },
  ]);
});

it("an application's own public.jobs table and its own drizzle migrations are left untouched", async () => {
  t = await createTestDatabase({ migrate: false });
  await t.query(`CREATE TABLE public.jobs (id serial PRIMARY KEY, title text NOT NULL, salary int)`);
  await t.query(`INSERT INTO public.jobs (title, salary) VALUES ('plumber', 50), ('welder', 60)`);
  // The app's own drizzle-kit history, in the table wave 1 shared with it.
  await t.query(`CREATE SCHEMA drizzle`);
  await t.query(
    `CREATE TABLE drizzle.__drizzle_migrations (id serial PRIMARY KEY, hash text NOT NULL, created_at bigint)`,
  );
  await t.query(`INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES ('the-apps-own', 1700000000000)`);
  const before = await t.query('SELECT * FROM public.jobs ORDER BY id');

  await migrateDatabase(t.url);

  expect(await t.query('SELECT * FROM public.jobs ORDER BY id')).toEqual(before);
  expect(
    await t.query(
      `SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'jobs' ORDER BY ordinal_position`,
    ),
  ).toEqual([{ column_name: 'id' }, { column_name: 'title' }, { column_name: 'salary' }]);
  expect(await t.query('SELECT hash, created_at::text FROM drizzle.__drizzle_migrations')).toEqual([
    { hash: 'the-apps-own', created_at: '1700000000000' },
  ]);
  const job = await enqueue(t.db, { kind: 'noop', payload: { a: 1 } });
  expect(await t.query('SELECT id::text, kind FROM pgdrain.jobs')).toEqual([{ id: job.id, kind: 'noop' }]);
  expect(await t.query('SELECT count(*)::int AS n FROM public.jobs')).toEqual([{ n: 2 }]);
});

it('a database migrated by wave 1 upgrades in place: every job, lock, dedupe key and counter is kept, then drains', async () => {
  t = await createTestDatabase({ migrate: false });
  await migrateLikeWave1(t.url);
  // The app's own drizzle migration shares drizzle.__drizzle_migrations with wave 1's two rows.
  await t.query(`INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES ('the-apps-own', 1700000000000)`);
  await t.query(`
    INSERT INTO public.jobs (kind, payload, status, run_at, attempts, max_attempts, locked_at, locked_by, last_error, dedupe_key, visibility_seconds, created_at) VALUES
      ('noop', '{"n":1}', 'pending', now() - interval '1 minute', 0, 3, NULL, NULL, NULL, 'order-1', NULL, now() - interval '2 minutes'),
      ('noop', '{"n":2}', 'running', now() - interval '1 hour', 1, 3, now() - interval '10 minutes', 'old-sidecar:7', NULL, NULL, 60, now() - interval '1 hour'),
      ('noop', '{"n":3}', 'dead', now() - interval '1 day', 3, 3, NULL, NULL, 'boom', 'order-3', NULL, now() - interval '1 day'),
      ('noop', '{"n":4}', 'pending', now() + interval '1 hour', 1, 5, NULL, NULL, 'try later', NULL, 30, now())`);
  await t.query(
    `INSERT INTO public.job_counts (minute, kind, completed, failed, dead) VALUES (date_trunc('minute', now()), 'noop', 7, 2, 1)`,
  );
  await t.query(`INSERT INTO public.job_totals (kind, completed, failed, dead) VALUES ('noop', 1000, 20, 3)`);
  const WAVE1_COLUMNS =
    'id, kind, payload, run_at, attempts, max_attempts, locked_at, locked_by, status, last_error, dedupe_key, visibility_seconds, created_at';
  const jobsBefore = await t.query(`SELECT ${WAVE1_COLUMNS} FROM public.jobs ORDER BY id`);
  const countsBefore = await t.query('SELECT * FROM public.job_counts');
  const totalsBefore = await t.query('SELECT * FROM public.job_totals');
  const lastId = Number((await t.query(`SELECT last_value FROM public.jobs_id_seq`))[0]!.last_value);

  await migrateDatabase(t.url);

  expect(await t.query(`SELECT ${WAVE1_COLUMNS} FROM pgdrain.jobs ORDER BY id`)).toEqual(jobsBefore);
  expect(await t.query('SELECT DISTINCT priority FROM pgdrain.jobs')).toEqual([{ priority: 0 }]);
  // Every counter kept (a counter added since, diverged, starts at 0).
  const counters = 'minute, kind, completed, failed, dead';
  expect(await t.query(`SELECT ${counters} FROM pgdrain.job_counts`)).toEqual(countsBefore);
  expect(await t.query('SELECT kind, completed, failed, dead FROM pgdrain.job_totals')).toEqual(totalsBefore);
  const objects = await userObjects(t);
  expect(objects.relations.filter((r) => r.startsWith('public.'))).toEqual([]);
  expect(objects.relations).toEqual(
    expect.arrayContaining(['pgdrain.jobs_ready', 'pgdrain.jobs_dedupe_key', 'pgdrain.jobs_id_seq']),
  );
  // Wave 1's rows are forgotten; the app's own stays.
  expect(await t.query('SELECT hash FROM drizzle.__drizzle_migrations')).toEqual([{ hash: 'the-apps-own' }]);

  // The moved sequence goes on from where it was, and the dedupe key still holds.
  const next = await enqueue(t.db, { kind: 'noop', payload: { n: 5 } });
  expect(Number(next.id)).toBe(lastId + 1);
  const again = await enqueue(t.db, { kind: 'noop', payload: { n: 99 }, dedupeKey: 'order-1' });
  expect(again).toMatchObject({ id: String(jobsBefore[0]!.id), deduplicated: true });

  // And they drain: the expired lock is reaped, the dead job retried, the delayed one stays delayed.
  expect((await reap(t.db, 300)).reclaimed).toEqual([String(jobsBefore[1]!.id)]);
  expect(await retryDead(t.db, String(jobsBefore[2]!.id))).toMatchObject({ outcome: 'retried' });
  const report = await drain(t.db, new JobRegistry([noopJob]), { workerId: 'upgrade-test', budgetMs: 10_000 });
  expect(report.completed).toBe(4);
  expect(await t.query('SELECT payload FROM pgdrain.jobs')).toEqual([{ payload: { n: 4 } }]);
  expect(Number((await t.query(`SELECT sum(completed) AS n FROM pgdrain.job_counts`))[0]!.n)).toBe(7 + 4);
});

it("with only wave 1 in the database, the upgrade also removes drizzle's migrations table and schema", async () => {
  t = await createTestDatabase({ migrate: false });
  await migrateLikeWave1(t.url);
  await t.query(`INSERT INTO public.jobs (kind, payload) VALUES ('noop', '{}')`);
  await migrateDatabase(t.url);
  const objects = await userObjects(t);
  expect(objects.schemas).toEqual(['pgdrain', 'public']);
  expect(objects.relations.filter((r) => !r.startsWith('pgdrain.'))).toEqual([]);
  expect(await t.query('SELECT kind, payload FROM pgdrain.jobs')).toEqual([{ kind: 'noop', payload: {} }]);
});

it('runs parked by the version before 0016 (waiting on a sleep or a timed wait) become pending until their time, and drain', async () => {
  t = await databaseMigratedBefore('0016');
  // As 0015's park_sleep and park_wait left them: a sleep due already, a sleep an hour ahead, a
  // wait with a timeout, a wait without one.
  const [due, later, timed, untimed] = await t.query<{ id: string }>(
    `INSERT INTO pgdrain.jobs (kind, payload, status) SELECT 'flow', '{}', 'waiting' FROM generate_series(1, 4) RETURNING id::text`,
  );
  await t.query(
    `INSERT INTO pgdrain.workflow_steps (job_id, name, position, status, attempts, wake_at, event, event_key) VALUES
       ($1, 'nap', 0, 'sleeping', 1, now() - interval '1 second', NULL, NULL),
       ($2, 'nap', 0, 'sleeping', 1, now() + interval '1 hour', NULL, NULL),
       ($3, 'wait', 0, 'waiting', 1, now() + interval '1 hour', 'e', 'k'),
       ($4, 'wait', 0, 'waiting', 1, NULL, 'e', 'k')`,
    [due!.id, later!.id, timed!.id, untimed!.id],
  );
  await migrateDatabase(t.url);
  const rows = await t.query<{ id: string; status: string; due_now: boolean }>(
    `SELECT id::text, status, run_at <= now() AS due_now FROM pgdrain.jobs ORDER BY id`,
  );
  expect(rows).toEqual([
    { id: due!.id, status: 'pending', due_now: true },
    { id: later!.id, status: 'pending', due_now: false },
    { id: timed!.id, status: 'pending', due_now: false },
    { id: untimed!.id, status: 'waiting', due_now: true },
  ]);
  // The event answers both waits: the timed one is made due now, the other pending.
  await t.query(`SELECT pgdrain.send_event('e', 'k', '{"ok":true}')`);
  expect(
    await t.query(
      `SELECT status, run_at <= now() AS due_now FROM pgdrain.jobs WHERE id = ANY($1::bigint[]) ORDER BY id`,
      [[timed!.id, untimed!.id]],
    ),
  ).toEqual([
    { status: 'pending', due_now: true },
    { status: 'pending', due_now: true },
  ]);
});

it('a migration that runs in a transaction does not queue enqueues behind a long transaction: it steps back and retries', async () => {
  // 0018 runs in a transaction and adds a column to pgdrain.jobs: it needs the table's exclusive
  // lock. A long transaction that touched the table (a transactional handler, a report) holds it
  // off; a migration that waited in the lock queue would hold every enqueue queued behind it.
  t = await databaseMigratedBefore('0018');
  await t.query(`SELECT pgdrain.enqueue('report', '{}')`);
  const holder = new pg.Client({ connectionString: t.url });
  await holder.connect();
  const app = new pg.Client({ connectionString: t.url });
  await app.connect();
  try {
    await holder.query('BEGIN');
    await holder.query(`SELECT id FROM pgdrain.jobs WHERE kind = 'report' FOR UPDATE`);

    const timings: number[] = [];
    let enqueuing = true;
    const enqueues = (async () => {
      while (enqueuing) {
        const started = performance.now();
        await app.query(`SELECT pgdrain.enqueue('app', '{}')`);
        timings.push(performance.now() - started);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    let migrated = false;
    const busy: string[] = [];
    const migration = migrateDatabase(t.url, { onLockBusy: (name) => busy.push(name) }).then(() => {
      migrated = true;
    });
    await new Promise((r) => setTimeout(r, 3_000));
    // The long transaction still holds the table: the migration has not gone through it.
    expect(migrated).toBe(false);
    const duringHold = timings.length;
    await holder.query('COMMIT');
    await migration;
    enqueuing = false;
    await enqueues;

    expect(duringHold).toBeGreaterThan(20);
    // The caller was told which migration waited (the sidecar logs it), once and not at every try.
    expect(busy[0]).toBe('0018_subscriptions');
    expect(busy.length).toBeLessThan(5);
    expect(Math.max(...timings)).toBeLessThan(1_000);
    const applied = await t.query<{ n: number }>('SELECT count(*)::int AS n FROM pgdrain.migrations');
    expect(applied).toEqual([{ n: readMigrationFiles({ migrationsFolder: migrationsFolder() }).length }]);
    expect(
      await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'app' AND started_by IS NULL`),
    ).toEqual([{ n: timings.length }]);
  } finally {
    await holder.end();
    await app.end();
  }
});

/** What a migrated database's schema pgdrain is: its columns, indexes, constraints and functions
 * (their text and settings), for comparing two databases. */
async function schemaFingerprint(db: TestDatabase): Promise<string[]> {
  const rows = await db.query<{ line: string }>(
    `SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
              || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
              || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') AS line
       FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
       LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE c.relnamespace = 'pgdrain'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
        AND c.relkind IN ('r', 'p', 'v') AND c.relname NOT LIKE 'job\\_history\\_2%'
     UNION ALL
     SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
      WHERE c.relnamespace = 'pgdrain'::regnamespace AND c.relname NOT LIKE 'job\\_history\\_2%'
     UNION ALL
     SELECT 'constraint ' || conrelid::regclass || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
      WHERE connamespace = 'pgdrain'::regnamespace AND conrelid::regclass::text NOT LIKE 'pgdrain.job\\_history\\_2%'
     UNION ALL
     SELECT 'function ' || p.oid::regprocedure || ' ' || md5(p.prosrc) || ' ' || coalesce(p.proconfig::text, '')
       FROM pg_proc p WHERE p.pronamespace = 'pgdrain'::regnamespace
     ORDER BY 1`,
  );
  return rows.map((r) => r.line);
}

it('a database left by any migration the last release shipped upgrades to exactly what a fresh one is', async () => {
  const fresh = await createTestDatabase();
  const expected = await schemaFingerprint(fresh);
  await fresh.close();
  const { folder, remove } = await shippedMigrations(WAVE5);
  try {
    const journal = JSON.parse(await readFile(path.join(folder, 'meta', '_journal.json'), 'utf8')) as {
      entries: { tag: string }[];
    };
    // Every schema the release could have left: after each of its migrations (the last: itself).
    const stops = [...journal.entries.slice(1).map((e) => e.tag), undefined];
    const upgrade = async (before: string | undefined) => {
      const db = await databaseShippedBy(WAVE5, before);
      try {
        await migrateDatabase(db.url);
        return [before ?? 'all', await schemaFingerprint(db)] as const;
      } finally {
        await db.close();
      }
    };
    for (let i = 0; i < stops.length; i += 4) {
      for (const [stop, fingerprint] of await Promise.all(stops.slice(i, i + 4).map(upgrade)))
        expect([stop, fingerprint]).toEqual([stop, expected]);
    }
  } finally {
    await remove();
  }
}, 240_000);
