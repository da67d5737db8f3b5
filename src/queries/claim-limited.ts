// claim, for a kind with limits that hold across every drainer (globalConcurrency,
// groupConcurrency, rateLimit): the same write as claim.ts, under the kind's own lock.
//
// How concurrent claimers agree: each claim of a limited kind runs in a short transaction that
// first takes a transaction-level advisory lock named after the kind, then claims in a statement
// of its own. In READ COMMITTED that statement's snapshot is taken after the lock is granted, so it
// sees every claim of the kind committed before it: two drainers that both see 2 of 3 running
// cannot both take one more; the second waits for the first and then counts 3. Only claims of that
// kind wait on each other: unlimited kinds never take the lock and their claim is unchanged.
// Settlements take no lock either; one that lands during a claim only makes that claim count one
// job too many as running (it claims less, never more).
//
// What the statement counts, over small sets: the kind's running jobs (the jobs_running index);
// for groups, each candidate key's holders — running jobs, and jobs waiting to retry, which keep
// their key so its order holds (jobs_group_holders, which only grouped jobs enter); for rate
// limits, the kind's starts in the rolling window (pgdrain.rate_starts, written and pruned here).
// Candidates are the first ready jobs of the kind in claim order (a window of them); within a key,
// a job waiting to retry goes first, then claim order. A candidate key with a row in
// pgdrain.group_limits (setGroupLimits) has that row's concurrency instead of the kind's
// groupConcurrency, and, for a kind limited per group, that row's rate instead of the kind's.
import { type SQL, TransactionRollbackError, sql } from 'drizzle-orm';
import { fairTurns, groupLimits, jobs, pausedKinds, rateStarts } from '../db/schema.ts';
import {
  type ClaimedJob,
  type ClaimOptions,
  type ClaimValues,
  claimUpdate,
  claimValues,
  claimedJobsFromDriver,
} from './claim.ts';
import {
  type ConnectionPool,
  type Db,
  builtQuery,
  poolOf,
  preparedQuery,
  rowsOf,
  rowsOfDriverResult,
  rowsOfPrepared,
  sqlLiteral,
} from './db.ts';

export interface ClaimLimits {
  globalConcurrency?: number;
  groupConcurrency?: number;
  rateLimit?: { limit: number; periodSeconds: number; perGroup?: boolean };
  /** Take turns across group keys (fair: true): the candidates are a round of keys after the
   * kind's last turn (pgdrain.fair_keys()), not the first ready jobs in claim order. */
  fair?: boolean;
}

export interface LimitedClaimOptions extends Omit<ClaimOptions, 'kinds'> {
  kind: string;
  /** The kind's names as claim.sql reads them: the versions this drainer has of it (the first by
   * the kind's name, a later one as `kind@version`). Default: the kind's name alone. */
  names?: readonly string[];
  limits: ClaimLimits;
}

/** Its runs of the versions `names` lists (claim.sql's rule): what a drainer has the code for. */
const ofVersions = (names: readonly string[]): SQL =>
  sql`(CASE WHEN version IS NULL THEN kind ELSE kind || '@' || version END) = ANY(${sql.param(names)}::text[])`;

export interface LimitedClaim {
  jobs: ClaimedJob[];
  /** Ready jobs of the kind were left pending by its limits (not a short backlog). */
  heldBack: boolean;
  /** When the rate limit's window lets the next start in, if that is what held jobs back. */
  nextStartAt: Date | null;
}

/** How many ready jobs of the kind one claim looks at: enough to find free keys past busy ones. */
const candidateWindow = (size: number) => Math.min(5_000, Math.max(500, size * 8));

/** Its commit asynchronous, as a drainer's claims may be (the lock is held until the commit
 * returns: a flush on each serial claim was a sixth of its time on a stock server). For the claim
 * that follows in its transaction (the only statement after it), the planner
 * settings of pgdrain.claim() (src/sql/functions/claim.sql): its candidates are found by walking
 * jobs_ready, whatever statistics a burst into an idle table meets. And no JIT: a fair claim's
 * estimate (a round of up to 1,000 keys) passes jit_above_cost on a stock server, and compiling it
 * would cost 50-120 ms for a claim that runs in one. */
const CLAIM_SETTINGS = sql`set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
  set_config('jit', 'off', true), set_config('synchronous_commit', 'off', true)`;
const CLAIM_SETTINGS_TEXT = builtQuery(CLAIM_SETTINGS).sql;

type LimitedClaimRow = Record<string, unknown> & { pgdrain_candidates: number; pgdrain_next_start_ms: number | null };

export async function claimLimited(db: Db, options: LimitedClaimOptions): Promise<LimitedClaim> {
  if (options.batchSize < 1 || options.ids?.length === 0) return { jobs: [], heldBack: false, nextStartAt: null };
  const pool = poolOf(db);
  const rows = pool
    ? await claimOnPinnedConnection(pool, options.kind, limitedClaim(db, options))
    : await db.transaction(async (tx) => {
        await tx.execute(sql`SELECT pg_advisory_xact_lock(${kindLockKey(options.kind)}), ${CLAIM_SETTINGS}`);
        return rowsOfPrepared<LimitedClaimRow>(tx, PREPARED_PREFIX, limitedClaim(tx, options));
      });
  const claimed = claimedJobsFromDriver(rows, options.lockToken);
  const candidates = Number(rows[0]?.pgdrain_candidates ?? 0);
  const nextStart = rows[0]?.pgdrain_next_start_ms;
  return {
    jobs: claimed,
    heldBack: claimed.length < Math.min(options.batchSize, candidates),
    nextStartAt: nextStart === null || nextStart === undefined ? null : new Date(Number(nextStart)),
  };
}

const PREPARED_PREFIX = 'pgdrain_claim_limited';

/** The kind's advisory lock key, the same on every path and in every process. */
const kindLockKey = (kind: string): SQL => sql`hashtextextended(${`pgdrain.limits:${kind}`}, 0)`;

/**
 * The claim's transaction on one connection of the pool in three round trips, where Drizzle's
 * transaction takes four: `BEGIN` and the kind's lock are one simple query (a query with no values
 * may hold several statements; each still takes its own snapshot, so the claim's is taken after the
 * lock, as the header says), then the prepared claim, then `COMMIT`. The kind goes into that text
 * as hex, which needs no quoting whatever the kind holds. A round trip is what a Worker pays 10-30 ms
 * for; a serial or fair kind is claimed one claim at a time. A connection on which anything failed
 * is closed rather than given back, so none returns to the pool inside a transaction.
 */
async function claimOnPinnedConnection(pool: ConnectionPool, kind: string, claim: SQL): Promise<LimitedClaimRow[]> {
  const connection = await pool.connect();
  try {
    await connection.query(`BEGIN; SELECT pg_advisory_xact_lock(${lockKeyText(kind)}), ${CLAIM_SETTINGS_TEXT}`);
    const rows = rowsOfDriverResult<LimitedClaimRow>(await connection.query(preparedQuery(PREPARED_PREFIX, claim)));
    await connection.query('COMMIT');
    connection.release();
    return rows;
  } catch (error) {
    connection.release(error instanceof Error ? error : true);
    throw error;
  }
}

const lockKeys = new Map<string, string>();
/** kindLockKey() as text with no values: the kind as UTF-8 in hex. */
function lockKeyText(kind: string): string {
  let key = lockKeys.get(kind);
  if (key === undefined) {
    const hex = Array.from(new TextEncoder().encode(kind), (b) => b.toString(16).padStart(2, '0')).join('');
    key = `hashtextextended('pgdrain.limits:' || convert_from(decode('${hex}', 'hex'), 'UTF8'), 0)`;
    if (lockKeys.size < 10_000) lockKeys.set(kind, key);
  }
  return key;
}

/**
 * The plan PostgreSQL uses for a limited claim right now (EXPLAIN (FORMAT JSON)), under the claim's
 * own settings: what a test holds the claim's shape to. `analyze`: run it too (EXPLAIN ANALYZE,
 * with the buffers it read) and roll it back, so that nothing is claimed. `generic`: the plan a
 * prepared claim settles on after its first runs, planned without its values (as the claim is:
 * rowsOfPrepared), instead of one planned for them.
 */
export async function explainLimitedClaim(
  db: Db,
  options: LimitedClaimOptions,
  { analyze = false, generic = false }: { analyze?: boolean; generic?: boolean } = {},
): Promise<unknown> {
  let plan: unknown;
  await db
    .transaction(async (tx) => {
      await tx.execute(sql`SELECT ${CLAIM_SETTINGS}`);
      const how = sql.raw(analyze ? 'ANALYZE, BUFFERS, FORMAT JSON' : 'FORMAT JSON');
      let explained: SQL;
      if (generic) {
        // EXPLAIN EXECUTE takes no bind parameters: the values go in as literals.
        const built = builtQuery(limitedClaim(tx, options));
        await tx.execute(sql`SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`);
        await tx.execute(sql.raw(`PREPARE pgdrain_explain_limited AS ${built.sql}`));
        const values = sql.raw(built.params.map(sqlLiteral).join(', '));
        explained = sql`EXPLAIN (${how}) EXECUTE pgdrain_explain_limited(${values})`;
      } else explained = sql`EXPLAIN (${how}) ${limitedClaim(tx, options)}`;
      try {
        const [row] = await rowsOf<{ 'QUERY PLAN': unknown }>(tx, explained);
        plan = row?.['QUERY PLAN'];
      } finally {
        // A prepared statement outlives its transaction.
        if (generic) await tx.execute(sql`DEALLOCATE pgdrain_explain_limited`);
      }
      if (analyze) tx.rollback();
    })
    .catch((error: unknown) => {
      if (!(error instanceof TransactionRollbackError)) throw error;
    });
  return plan;
}

function limitedClaim(db: Db, options: LimitedClaimOptions): SQL {
  const { kind, limits } = options;
  const names = options.names ?? [kind];
  const v = claimValues(options);
  const size = sql`${v.limit}::int`;
  const group = sql`${limits.groupConcurrency ?? null}::int`;
  const rate = limits.rateLimit;
  const perGroup = rate?.perGroup === true;
  const periodSeconds = sql`${rate?.periodSeconds ?? 0}::float8`;
  const period = sql`make_interval(secs => ${periodSeconds})`;
  // A key's own rate period (a group_limits row), else the kind's; the longest of them bounds the window read.
  const keyPeriod = perGroup ? sql`coalesce(o.rate_period_seconds, ${periodSeconds})` : periodSeconds;
  const longestPeriod = sql`make_interval(secs => greatest(${periodSeconds}, coalesce((SELECT max(rate_period_seconds)
    FROM ${groupLimits} WHERE kind = ${kind}), 0)))`;
  // Within a key's own rate (per group), and the room the kind's rate leaves (not per group).
  const keyRateAllows = perGroup
    ? sql`coalesce(w.n, 0) + r.in_group <= coalesce(o.rate_limit, ${rate!.limit}::int)`
    : sql`true`;
  const kindRateRoom =
    rate && !perGroup ? sql`${rate.limit}::int - coalesce((SELECT sum(n) FROM window_starts), 0)::int` : size;
  const update = claimUpdate(
    db,
    sql`${jobs.id} IN (SELECT id FROM chosen)`,
    sql`${v.token}::text`,
    sql`${v.lease}::int`,
  ).getSQL();
  return sql`
    WITH RECURSIVE clock AS (SELECT clock_timestamp() AS t),
    ${
      limits.fair
        ? fairCandidates(kind, v, limits.groupConcurrency !== undefined || perGroup, options.ids !== undefined, names)
        : plainCandidates(kind, v, options.ids !== undefined, names)
    }
    overrides AS (
      SELECT group_key, concurrency, rate_limit, rate_period_seconds FROM ${groupLimits}
       WHERE kind = ${kind} AND group_key IN (SELECT group_key FROM cand WHERE group_key IS NOT NULL)),
    running AS (SELECT count(*)::int AS n FROM ${jobs} WHERE status = 'running' AND kind = ${kind}),
    ${inUse(kind, group, rate !== undefined, perGroup, keyPeriod, perGroup ? longestPeriod : period)}
    ranked AS (
      SELECT c.id, c.group_key, c.priority, c.run_at, c.turn_pos,
             row_number() OVER
               (PARTITION BY c.group_key ORDER BY (c.attempts > 0) DESC, c.priority DESC NULLS LAST, c.run_at, c.id)
                 AS in_group,
             count(*) FILTER (WHERE c.attempts > 0) OVER (PARTITION BY c.group_key) AS retrying_here
        FROM cand c),
    allowed AS (
      SELECT r.id, r.priority, r.run_at, r.in_group, r.turn_pos FROM ranked r
        LEFT JOIN holders h ON h.group_key = r.group_key
        LEFT JOIN overrides o ON o.group_key = r.group_key
        LEFT JOIN window_starts w ON ${perGroup ? sql`w.group_key = coalesce(r.group_key, '')` : sql`false`}
       WHERE (coalesce(o.concurrency, ${group}) IS NULL OR r.group_key IS NULL
              OR coalesce(h.running, 0) + coalesce(h.retrying, 0) - r.retrying_here + r.in_group <=
                coalesce(o.concurrency, ${group}))
         AND ${keyRateAllows}),
    room AS (
      SELECT least(${size},
                   coalesce(${limits.globalConcurrency ?? null}::int - (SELECT n FROM running), ${size}),
                   ${kindRateRoom}) AS n),
    chosen AS (
      SELECT id FROM allowed
       ORDER BY ${limits.fair ? sql`in_group, turn_pos, run_at, id` : sql`priority DESC NULLS LAST, run_at, id`}
       LIMIT greatest(0, (SELECT n FROM room))),
    claimed AS (${update}),
    ${limits.fair ? fairTurnTaken(kind) : sql``}
    ${startsRecorded(kind, rate !== undefined, perGroup, perGroup ? longestPeriod : period)}
    SELECT claimed.*, s.pgdrain_candidates, s.pgdrain_next_start_ms
      FROM (SELECT (SELECT count(*) FROM cand)::int AS pgdrain_candidates,
                   (SELECT extract(epoch FROM min(oldest + make_interval(secs => period_s))) * 1000
                     FROM window_starts)::float8 AS pgdrain_next_start_ms) AS s
      LEFT JOIN claimed ON true`;
}

/** What the candidates' limits have used: per group key, its running jobs and its retries waiting
 * (a key with a concurrency), and the starts in its rate window (`window`: the longest one read). */
function inUse(kind: string, group: SQL, rated: boolean, perGroup: boolean, keyPeriod: SQL, window: SQL): SQL {
  return sql`holders AS (
      SELECT group_key, count(*) FILTER (WHERE status = 'running')::int AS running,
        count(*) FILTER (WHERE status = 'pending')::int AS retrying
        FROM ${jobs}
       WHERE (${group} IS NOT NULL OR group_key IN (SELECT group_key FROM overrides WHERE concurrency IS NOT NULL))
         AND kind = ${kind} AND group_key IN (SELECT group_key FROM cand)
         AND group_key IS NOT NULL AND (status = 'running' OR (status = 'pending' AND attempts > 0))
       GROUP BY group_key),
    window_starts AS (
      SELECT group_key, count(*)::int AS n, min(started_at) AS oldest, period_s
        FROM (SELECT s.group_key, s.started_at, ${keyPeriod} AS period_s FROM ${rateStarts} s
                ${perGroup ? sql`LEFT JOIN overrides o ON o.group_key = s.group_key` : sql``}
               WHERE ${rated ? sql`true` : sql`false`} AND s.kind = ${kind}
                 AND s.started_at > (SELECT t FROM clock) - ${window}) x
       WHERE started_at > (SELECT t FROM clock) - make_interval(secs => period_s)
       GROUP BY group_key, period_s),`;
}

/** A rate-limited kind's starts: one row per claimed job (its group's, per group), and the rows past
 * the longest window pruned, in the claim's statement. Nothing for a kind without a rate. */
function startsRecorded(kind: string, rated: boolean, perGroup: boolean, window: SQL): SQL {
  return sql`started AS (
      INSERT INTO ${rateStarts} (kind, group_key, started_at)
      SELECT ${kind}, ${perGroup ? sql`coalesce(claimed.group_key, '')` : sql`''`}, (SELECT t FROM clock) FROM claimed
       WHERE ${rated ? sql`true` : sql`false`}),
    pruned AS (
      DELETE FROM ${rateStarts} WHERE ${rated ? sql`true` : sql`false`} AND kind = ${kind}
        AND started_at <= (SELECT t FROM clock) - ${window})`;
}

/** A kind that is not fair: its ready jobs in claim order, a window of them, locked. */
function plainCandidates(
  kind: string,
  v: ReturnType<typeof claimValues>,
  byIds: boolean,
  names: readonly string[],
): SQL {
  return sql`cand AS (
      SELECT id, group_key, attempts, priority, run_at, NULL::bigint AS turn_pos FROM ${jobs}
       WHERE status = 'pending' AND run_at <= now() AND kind = ${kind} AND ${ofVersions(names)}
         AND NOT EXISTS (SELECT 1 FROM ${pausedKinds} p WHERE p.kind = ${kind})
         ${byIds ? sql`AND id = ANY(${sql.param(v.ids)}::bigint[])` : sql``}
       ORDER BY priority DESC NULLS LAST, run_at, id
       LIMIT ${candidateWindow(v.limit)}
       FOR UPDATE SKIP LOCKED),`;
}

/** A fair kind's claim: where its turns ended (the last key claimed), for the next claim to go on from. */
function fairTurnTaken(kind: string): SQL {
  return sql`turned AS (
      INSERT INTO ${fairTurns} (kind, priority, group_key, updated_at)
      SELECT ${kind}, (SELECT priority FROM top),
        (SELECT c.group_key FROM claimed c JOIN cand ON cand.id = c.id ORDER BY cand.turn_pos DESC LIMIT 1), now()
       WHERE EXISTS (SELECT 1 FROM claimed)
      ON CONFLICT (kind) DO UPDATE SET priority = excluded.priority, group_key = excluded.group_key,
        updated_at = now()),`;
}

/**
 * A fair kind's candidates: a round of turns after the one its last claim ended at (the key in
 * pgdrain.fair_turns), at the top priority of its ready jobs. The round walks the jobs_fair index
 * from key to key (a recursive query, one probe each, which also reads the key's first job): the
 * keys after the last turn, then one turn for the jobs without a key, then from the first key
 * around to the last turn. It stops once it has found as many keys with a ready job as the claim
 * can take (twice that when keys have limits of their own, a concurrency or a rate per group,
 * which may hold some back: a claim that comes back short waits), and after at most
 * twice the claim's size of keys whatever it found (keys with only delayed jobs count there): the
 * cost does not grow with the number of keys. When there are enough ready keys for one job each,
 * the probe's first job is the key's offer; with fewer keys each is probed again for as many as the
 * claim needs. `turn_pos` is each job's place in the round. The offered jobs are locked by their
 * ids, a primary-key lookup each: joined to the table instead, they were found by hashing every
 * row of it (the planner cannot tell how long a round is), so a claim of 50 cost as much as the
 * backlog was long.
 */
function fairCandidates(
  kind: string,
  v: ClaimValues,
  perKeyLimits: boolean,
  byIds: boolean,
  names: readonly string[],
): SQL {
  const ids = byIds ? sql`AND id = ANY(${sql.param(v.ids)}::bigint[])` : sql``;
  // Keys with only delayed jobs are visited too: a round may visit more keys than one claim takes.
  const visit = sql`${Math.min(1_000, v.limit * 2)}::int`;
  const ofKind = sql`status = 'pending' AND group_key IS NOT NULL AND kind = ${kind} AND ${ofVersions(names)}
         AND priority = (SELECT priority FROM top)`;
  const firstJob = sql`ORDER BY priority DESC NULLS LAST, group_key, run_at, id LIMIT 1`;
  const ready = (runAt: SQL) => sql`(${runAt} <= now())::int`;
  return sql`last_turn AS (SELECT priority, group_key FROM ${fairTurns} WHERE kind = ${kind}),
    ${byIds ? topOfIds(kind, ids) : topPriority(kind)}
    turn AS (SELECT group_key FROM last_turn WHERE priority = (SELECT priority FROM top)),
    wanted AS (
      SELECT ${v.limit}::int * CASE WHEN ${perKeyLimits ? sql`true` : sql`false`}
        OR EXISTS (SELECT 1 FROM ${groupLimits}
        WHERE kind = ${kind} AND concurrency IS NOT NULL) THEN 2 ELSE 1 END AS ready_keys),
    keys_after (key, id, run_at, pos, ready) AS (
      SELECT f.group_key, f.id, f.run_at, 1, ${ready(sql`f.run_at`)} FROM (
        (SELECT group_key, id, run_at FROM ${jobs}
          WHERE ${ofKind} AND group_key > (SELECT group_key FROM turn) ${firstJob})
        UNION ALL
        (SELECT group_key, id, run_at FROM ${jobs}
          WHERE ${ofKind} AND (SELECT group_key FROM turn) IS NULL ${firstJob})) f
      UNION ALL
      SELECT f.group_key, f.id, f.run_at, k.pos + 1, k.ready + ${ready(sql`f.run_at`)}
        FROM keys_after k CROSS JOIN LATERAL (
          SELECT group_key, id, run_at FROM ${jobs} WHERE ${ofKind} AND group_key > k.key ${firstJob}) f
       WHERE k.pos < ${visit} AND k.ready < (SELECT ready_keys FROM wanted)),
    after_end AS (SELECT coalesce(max(pos), 0) AS pos, coalesce(max(ready), 0) AS ready FROM keys_after),
    keys_before (key, id, run_at, pos, ready) AS (
      SELECT f.group_key, f.id, f.run_at, e.pos + 2, e.ready + ${ready(sql`f.run_at`)}
        FROM after_end e CROSS JOIN LATERAL (
          SELECT group_key, id, run_at FROM ${jobs}
           WHERE ${ofKind} AND group_key <= (SELECT group_key FROM turn) ${firstJob}) f
       WHERE e.pos + 1 < ${visit} AND e.ready < (SELECT ready_keys FROM wanted)
      UNION ALL
      SELECT f.group_key, f.id, f.run_at, k.pos + 1, k.ready + ${ready(sql`f.run_at`)}
        FROM keys_before k CROSS JOIN LATERAL (
          SELECT group_key, id, run_at FROM ${jobs}
           WHERE ${ofKind} AND group_key > k.key AND group_key <= (SELECT group_key FROM turn) ${firstJob}) f
       WHERE k.pos < ${visit} AND k.ready < (SELECT ready_keys FROM wanted)),
    fair_round AS (
      SELECT key, id, run_at, pos FROM keys_after
      UNION ALL
      SELECT NULL, NULL, NULL, e.pos + 1 FROM after_end e
       WHERE EXISTS (SELECT 1 FROM top) AND e.pos < ${visit} AND e.ready < (SELECT ready_keys FROM wanted)
      UNION ALL
      SELECT key, id, run_at, pos FROM keys_before),
    per_key AS (SELECT greatest(1, ceil(${v.limit}::float8 / greatest(1, (SELECT count(*)
      FROM fair_round WHERE key IS NULL OR run_at <= now()))))::int AS n),
    offered AS (
      ${
        byIds
          ? sql``
          : sql`SELECT r.id, r.pos FROM fair_round r
       WHERE r.key IS NOT NULL AND r.run_at <= now() AND (SELECT n FROM per_key) = 1
      UNION ALL`
      }
      SELECT j.id, r.pos FROM fair_round r CROSS JOIN LATERAL (
        SELECT id FROM ${jobs}
         WHERE ${ofKind} AND group_key = r.key AND run_at <= now() ${ids}
         ORDER BY priority DESC NULLS LAST, group_key, run_at, id LIMIT (SELECT n FROM per_key)) j
       WHERE r.key IS NOT NULL AND r.run_at <= now() ${byIds ? sql`` : sql`AND (SELECT n FROM per_key) > 1`}
      UNION ALL
      ${unkeyedTurn(kind, ids, names)}),
    locked AS (
      SELECT j.id, j.group_key, j.attempts, j.priority, j.run_at FROM ${jobs} j
       WHERE j.id = ANY(ARRAY(SELECT id FROM offered)) AND j.status = 'pending'
       FOR UPDATE OF j SKIP LOCKED),
    cand AS (SELECT l.*, o.pos AS turn_pos FROM locked l JOIN offered o ON o.id = l.id),`;
}

/** A fair round's turn of the jobs without a key: as many as each key's turn takes. */
function unkeyedTurn(kind: string, ids: SQL, names: readonly string[]): SQL {
  return sql`SELECT u.id, (SELECT min(pos) FROM fair_round WHERE key IS NULL) FROM (
        SELECT id FROM ${jobs}
         WHERE status = 'pending' AND run_at <= now() AND kind = ${kind} AND group_key IS NULL AND ${ofVersions(names)}
           AND priority = (SELECT priority FROM top) ${ids}
           AND EXISTS (SELECT 1 FROM fair_round WHERE key IS NULL)
         ORDER BY priority DESC NULLS LAST, run_at, id LIMIT (SELECT n FROM per_key)) u`;
}

/**
 * The top priority of a fair kind's ready jobs, without walking other kinds' jobs: for its keyed
 * jobs, the jobs_fair index — above the priority its last turn was at, down from the highest; then
 * at that priority, the key after the turn; then below it —, and its jobs without a key only where
 * they would come first, above that (the jobs_ready index from the top down to there: other kinds'
 * jobs at higher priorities only). Found in claim order instead, behind an older backlog of another
 * kind at the same priority, it walked that backlog every claim. Started from the turn, it does not
 * pass over the index entries of the jobs the round has already claimed (the start of the keys, dead
 * until a vacuum). Reads `last_turn`, the kind's row of pgdrain.fair_turns (fairCandidates).
 */
function topPriority(kind: string): SQL {
  const keyed = sql`status = 'pending' AND group_key IS NOT NULL AND kind = ${kind}`;
  // Ordered as jobs_fair is (only that index gives this order without a sort), so that its kind
  // comes first in the scan, whatever the planner guesses of the kind's share of the table.
  const fairOrder = sql`ORDER BY priority DESC NULLS LAST, group_key LIMIT 1`;
  const readyAt = (priority: SQL) =>
    sql`(SELECT 1 FROM ${jobs} WHERE ${keyed} AND priority = ${priority} AND run_at <= now() ${fairOrder}) IS NOT NULL`;
  const turnPriority = sql`(SELECT priority FROM last_turn)`;
  // The kind's keyed priorities from `from` down, one probe each, while `bound` holds.
  const priorities = (name: string, from: SQL, bound: SQL) => sql`${sql.raw(name)} (priority) AS (
      (SELECT priority FROM ${jobs} WHERE ${keyed} AND ${from} AND ${bound} ${fairOrder})
      UNION ALL
      SELECT (SELECT priority FROM ${jobs} WHERE ${keyed} AND priority < k.priority AND ${bound} ${fairOrder})
        FROM ${sql.raw(name)} k WHERE k.priority IS NOT NULL),`;
  return sql`${priorities('priorities_above', sql`true`, sql`priority > coalesce(${turnPriority}, -2147483648)`)}
    ${priorities('priorities_below', sql`priority < ${turnPriority}`, sql`true`)}
    top_keyed AS (
      SELECT coalesce(
        (SELECT k.priority FROM priorities_above k
          WHERE k.priority IS NOT NULL AND ${readyAt(sql`k.priority`)} LIMIT 1),
        (SELECT t.priority FROM last_turn t
          WHERE (SELECT run_at FROM ${jobs} WHERE ${keyed} AND priority = t.priority AND group_key > t.group_key
                  ${fairOrder}) <= now()
             OR ${readyAt(sql`t.priority`)}),
        (SELECT k.priority FROM priorities_below k
          WHERE k.priority IS NOT NULL AND ${readyAt(sql`k.priority`)} LIMIT 1))
        AS priority),
    top AS (
      SELECT priority FROM (
        SELECT priority FROM top_keyed WHERE priority IS NOT NULL
        UNION ALL
        (SELECT priority FROM ${jobs}
          WHERE status = 'pending' AND run_at <= now() AND kind = ${kind} AND group_key IS NULL
            AND priority > coalesce((SELECT priority FROM top_keyed), -2147483648)
          ORDER BY priority DESC NULLS LAST LIMIT 1)) t
       WHERE NOT EXISTS (SELECT 1 FROM ${pausedKinds} p WHERE p.kind = ${kind})
       ORDER BY priority DESC LIMIT 1),`;
}

/** The top priority among the given ids' ready jobs of a fair kind (run-now: a handful of ids). */
function topOfIds(kind: string, ids: SQL): SQL {
  return sql`top AS (
      SELECT priority FROM ${jobs}
       WHERE status = 'pending' AND run_at <= now() AND kind = ${kind}
         AND NOT EXISTS (SELECT 1 FROM ${pausedKinds} p WHERE p.kind = ${kind}) ${ids}
       ORDER BY priority DESC NULLS LAST LIMIT 1),`;
}
