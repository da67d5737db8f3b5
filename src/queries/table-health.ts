// What keeps the queue table healthy, as PostgreSQL reports it: a long transaction in the queue's
// database (a report, a stuck session), a prepared transaction there or a forgotten replication
// slot holds back vacuum, and a SKIP LOCKED queue then walks ever more dead index entries on every
// claim. Sessions in other databases of the server do not hold back this table's vacuum and are
// not counted. Read by /metrics; an operator alerts on
// the oldest snapshot's age and on dead tuples growing. Seeing other roles' sessions takes the
// pg_read_all_stats role (or pg_monitor); without it, only this role's own are counted.
import { sql } from 'drizzle-orm';
import { PGDRAIN_SCHEMA } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';

export interface TableHealth {
  /** How long the oldest transaction still holding a snapshot has been open; 0 when none. */
  oldestSnapshotSeconds: number;
  /** Transactions since the oldest xmin still held by a session, a replication slot or a prepared
   * transaction: what vacuum cannot clean past. */
  oldestXminAge: number;
  /** Dead row versions in the jobs table that vacuum has not yet removed. */
  deadTuples: number;
  liveTuples: number;
  /** VACUUMs of the jobs table since the server's statistics were last reset: sent by a session (a
   * sidecar's drainer, VACUUM_EVERY_JOBS, or an operator) and autovacuum's. */
  vacuums: { manual: number; autovacuum: number };
}

export async function tableHealth(db: Db): Promise<TableHealth> {
  const jobsTable = `${PGDRAIN_SCHEMA}.jobs`;
  const [row] = await rowsOf<{
    snapshot_seconds: number | null;
    xmin_age: number | null;
    dead: string | null;
    live: string | null;
    vacuums: string | null;
    autovacuums: string | null;
  }>(
    db,
    sql`SELECT
          (SELECT extract(epoch FROM now() - min(xact_start))::float8 FROM pg_stat_activity
            WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
              AND datname = current_database()) AS snapshot_seconds,
          greatest((SELECT max(age(backend_xmin)) FROM pg_stat_activity WHERE pid <> pg_backend_pid()
            AND datname = current_database()),
                   (SELECT max(age(xmin)) FROM pg_replication_slots WHERE database IS NULL
                     OR database = current_database()),
                   (SELECT max(age(transaction)) FROM pg_prepared_xacts WHERE database = current_database())) AS
                     xmin_age,
          (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = ${jobsTable}::regclass) AS dead,
          (SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = ${jobsTable}::regclass) AS live,
          pg_stat_get_vacuum_count(${jobsTable}::regclass) AS vacuums,
          pg_stat_get_autovacuum_count(${jobsTable}::regclass) AS autovacuums`,
  );
  return {
    oldestSnapshotSeconds: Math.max(0, Number(row?.snapshot_seconds ?? 0)),
    oldestXminAge: Number(row?.xmin_age ?? 0),
    deadTuples: Number(row?.dead ?? 0),
    liveTuples: Number(row?.live ?? 0),
    vacuums: { manual: Number(row?.vacuums ?? 0), autovacuum: Number(row?.autovacuums ?? 0) },
  };
}

/**
 * Whether this role may VACUUM the jobs table: its owner (or a member of the owner's role), a
 * superuser, or, from PostgreSQL 17, a role granted MAINTAIN on it. Anyone else's VACUUM is only a
 * WARNING that does nothing, so a drainer asks once instead of sending it over and over.
 */
export async function mayVacuumQueueTable(db: Db): Promise<boolean> {
  const jobsTable = `${PGDRAIN_SCHEMA}.jobs`;
  const [row] = await rowsOf<{ owner: boolean; version: number }>(
    db,
    sql`SELECT pg_has_role(c.relowner, 'USAGE') OR r.rolsuper AS owner,
               current_setting('server_version_num')::int AS version
          FROM pg_class c, pg_roles r
         WHERE c.oid = ${jobsTable}::regclass AND r.rolname = current_user`,
  );
  if (!row) return false;
  if (row.owner || row.version < 170_000) return row.owner;
  const [maintain] = await rowsOf<{ granted: boolean }>(
    db,
    sql`SELECT has_table_privilege(${jobsTable}::regclass, 'MAINTAIN') AS granted`,
  );
  return maintain?.granted === true;
}

/**
 * A VACUUM of the jobs table, for a drainer that has claimed many jobs since its last one. Every
 * claimed and every finished job leaves a dead entry in jobs_ready that each claim walks from the
 * index's head until a VACUUM removes it; autovacuum visits a database at most once a minute
 * (autovacuum_naptime), so a queue that drains thousands of jobs a second slows down between its
 * visits (bench/NOTES.md). SKIP_LOCKED: nothing happens while another VACUUM (autovacuum's, or
 * another drainer's) holds the table (queueTableBeforeVacuum() tells the drainer beforehand).
 * TRUNCATE false: no ACCESS EXCLUSIVE lock at the end to give empty pages back, which would stall
 * the claims (autovacuum still does that). Not inside a transaction, and not on a connection that
 * is in one.
 */
export async function vacuumQueueTable(db: Db): Promise<void> {
  await db.execute(sql.raw(`VACUUM (SKIP_LOCKED, TRUNCATE false) ${PGDRAIN_SCHEMA}.jobs`));
}

export interface QueueTableBeforeVacuum {
  /** The rows the jobs table holds, as PostgreSQL's planner estimate (pg_class.reltuples, set by the
   * last VACUUM or ANALYZE; 0 before either): what a VACUUM of it costs grows with it. */
  rows: number;
  /** Another session holds a lock on the table that a VACUUM's (SHARE UPDATE EXCLUSIVE) conflicts
   * with: autovacuum, another VACUUM or ANALYZE, an index build. vacuumQueueTable() would be
   * skipped (SKIP_LOCKED) without a word, so the drainer does not send it now. */
  vacuumHeldOff: boolean;
}

/** What a drainer reads before its VACUUM of the jobs table: the table's size, and whether a VACUUM
 * could take its lock now. One statement (pg_locks is readable by any role). pg_locks holds every
 * database's locks, and a relation's oid is only unique within its database: two databases made
 * from one template have the same oid for their jobs tables, and a VACUUM in one held the other's
 * off (seen in the test run, whose databases are copies of one). */
export async function queueTableBeforeVacuum(db: Db): Promise<QueueTableBeforeVacuum> {
  const jobsTable = `${PGDRAIN_SCHEMA}.jobs`;
  const [row] = await rowsOf<{ rows: number | string; held_off: boolean }>(
    db,
    sql`SELECT greatest(c.reltuples, 0)::float8 AS rows,
               EXISTS (SELECT 1 FROM pg_locks l
                        WHERE l.relation = c.oid AND l.granted AND l.pid <> pg_backend_pid()
                          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                          AND l.mode IN ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                                         'ExclusiveLock', 'AccessExclusiveLock')) AS held_off
          FROM pg_class c WHERE c.oid = ${jobsTable}::regclass`,
  );
  return { rows: Number(row?.rows ?? 0), vacuumHeldOff: row?.held_off === true };
}
