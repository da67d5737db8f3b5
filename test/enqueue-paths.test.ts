// One table of enqueues run two ways — the TypeScript enqueue pipeline (enqueue() by kind name,
// as the CLI and any program uses it) and pgdrain.enqueue() in SQL — into the same starting state,
// each case in a transaction rolled back after: the rows each leaves must be the same, and what one
// refuses the other refuses. A new option is a new case here.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type SQL, sql } from 'drizzle-orm';
import { type EnqueueRequest, enqueue } from '../src/jobs/enqueue.ts';
import { type Db, rowsOf } from '../src/queries/db.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());

/** The SQL call for a request: named arguments for the options it sets. */
function sqlCall(request: EnqueueRequest): SQL {
  const args: SQL[] = [sql`${request.kind}`, sql`${JSON.stringify(request.payload)}::jsonb`];
  const named = (name: string, value: unknown, type: string) => {
    if (value !== undefined) args.push(sql`${sql.raw(name)} => ${value}::${sql.raw(type)}`);
  };
  named('run_at', request.runAt?.toISOString(), 'timestamptz');
  named('max_attempts', request.maxAttempts, 'int');
  named('dedupe_key', request.dedupeKey, 'text');
  named('priority', request.priority, 'int');
  named('group_key', request.groupKey, 'text');
  named('dedupe_mode', request.dedupeMode, 'text');
  if (request.after !== undefined) args.push(sql`after => ${sql.param(request.after)}::bigint[]`);
  named('timeout_ms', request.timeoutMs, 'int');
  return sql`SELECT pgdrain.enqueue(${sql.join(args, sql`, `)})::text AS id`;
}

/** What an enqueue left: every job's columns that do not depend on when or by whom it ran. */
const ROWS_LEFT =
  sql.raw(`SELECT kind, payload, status, attempts, max_attempts, dedupe_key, priority, group_key, timeout_ms, waiting_for, last_error,
                   run_at > now() + interval '1 minute' AS later, (SELECT count(*)::int FROM pgdrain.job_dependencies d WHERE d.job_id = j.id) AS deps
              FROM pgdrain.jobs j ORDER BY id`);
const jobCount = async (tx: Db) =>
  (await rowsOf<{ n: number }>(tx, sql`SELECT count(*)::int AS n FROM pgdrain.jobs`))[0]!.n;

class RolledBack extends Error {}

/** Runs `arrange` then `request` (through `way`) in a transaction, reads what it left, rolls back. */
async function leaves(way: 'typescript' | 'sql', arrange: string, request: EnqueueRequest): Promise<unknown> {
  let left: unknown;
  await t.db
    .transaction(async (tx) => {
      const ids = arrange
        ? (await rowsOf<{ id: string }>(tx, sql.raw(`${arrange} RETURNING id::text`))).map((r) => r.id)
        : [];
      // `after` names the arranged jobs by position: $1, $2 (one that was not arranged does not exist).
      const resolved = { ...request, after: request.after?.map((ref) => ids[Number(ref.slice(1)) - 1] ?? '987654321') };
      const before = await jobCount(tx);
      let outcome: string;
      try {
        // A nested transaction: a savepoint, rolled back alone when the enqueue is refused.
        if (way === 'typescript') await tx.transaction((inner) => enqueue(inner, resolved));
        else await tx.transaction((inner) => inner.execute(sqlCall(resolved)));
        outcome = (await jobCount(tx)) > before ? 'enqueued' : 'not inserted';
      } catch (error) {
        const message = String((error as { cause?: { message?: string } }).cause?.message ?? (error as Error).message);
        outcome = /after names jobs that do not exist/.test(message) ? 'refused: unknown dependency' : 'refused';
      }
      // Which job id a message names depends on the sequence, not on the way in.
      const rows = (await rowsOf<{ last_error: string | null }>(tx, ROWS_LEFT)).map((r) => ({
        ...r,
        last_error: r.last_error?.replace(/\d+/g, 'N') ?? null,
      }));
      left = { outcome, rows };
      throw new RolledBack();
    })
    .catch((error: unknown) => {
      if (!(error instanceof RolledBack)) throw error;
    });
  return left;
}

const later = new Date(Date.now() + 3_600_000);
const pendingKeyed = `INSERT INTO pgdrain.jobs (kind, payload, dedupe_key) VALUES ('mail', '{"v": 1}', 'k1')`;
const runningKeyed = `INSERT INTO pgdrain.jobs (kind, payload, dedupe_key, status, attempts, locked_by, locked_at) VALUES ('mail', '{"v": 1}', 'k1', 'running', 1, 'w:1', now())`;
const twoParents = `INSERT INTO pgdrain.jobs (kind, payload, status) VALUES ('mail', '{}', 'pending'), ('mail', '{}', 'completed')`;
const deadParent = `INSERT INTO pgdrain.jobs (kind, payload, status, attempts) VALUES ('mail', '{}', 'dead', 3)`;
/** Kept jobs once finished are in the history (src/queries/job-history.ts). */
const historyParent = (status: string) =>
  `INSERT INTO pgdrain.job_history (id, kind, payload, status, attempts, finished_at, keep_until)
   VALUES (nextval('pgdrain.jobs_id_seq'), 'mail', '{}', '${status}', 1, now(), now() + interval '1 hour')`;

const CASES: [string, string, EnqueueRequest][] = [
  ['no options', '', { kind: 'mail', payload: { to: 'a@example.com' } }],
  [
    'every plain option',
    '',
    {
      kind: 'mail',
      payload: [1, 'two', null],
      runAt: later,
      maxAttempts: 7,
      priority: -20,
      groupKey: 'tenant-9',
      timeoutMs: 5_000,
    },
  ],
  ['a dedupe key, first', '', { kind: 'mail', payload: {}, dedupeKey: 'k1' }],
  ['a dedupe key held by a pending job (keep)', pendingKeyed, { kind: 'mail', payload: { v: 2 }, dedupeKey: 'k1' }],
  [
    'a dedupe key held by a pending job (replace)',
    pendingKeyed,
    { kind: 'mail', payload: { v: 2 }, dedupeKey: 'k1', dedupeMode: 'replace', runAt: later },
  ],
  [
    'a dedupe key held by a running job (replace)',
    runningKeyed,
    { kind: 'mail', payload: { v: 2 }, dedupeKey: 'k1', dedupeMode: 'replace' },
  ],
  ['after a pending and a completed job', twoParents, { kind: 'mail', payload: {}, after: ['$1', '$2'], priority: 3 }],
  ['after a dead job', deadParent, { kind: 'mail', payload: {}, after: ['$1'] }],
  [
    'after a kept job that completed (in the history)',
    historyParent('completed'),
    { kind: 'mail', payload: {}, after: ['$1'] },
  ],
  [
    'after a kept job that was cancelled (in the history)',
    historyParent('cancelled'),
    { kind: 'mail', payload: {}, after: ['$1'] },
  ],
  ['after a job that does not exist', '', { kind: 'mail', payload: {}, after: ['$9'] }],
  ['a priority above 1000', '', { kind: 'mail', payload: {}, priority: 1001 }],
  ['maxAttempts of 0', '', { kind: 'mail', payload: {}, maxAttempts: 0 }],
  ['a group key of 201 characters', '', { kind: 'mail', payload: {}, groupKey: 'g'.repeat(201) }],
  ['a timeout of 99 ms', '', { kind: 'mail', payload: {}, timeoutMs: 99 }],
  ['a dedupe mode without a key', '', { kind: 'mail', payload: {}, dedupeMode: 'replace' }],
  ['maxAttempts over 100', '', { kind: 'mail', payload: {}, maxAttempts: 101 }],
  ['a dedupe key of 501 characters', '', { kind: 'mail', payload: {}, dedupeKey: 'k'.repeat(501) }],
  ['after and a dedupe key', twoParents, { kind: 'mail', payload: {}, after: ['$1'], dedupeKey: 'k2' }],
];

describe('the enqueue pipeline and pgdrain.enqueue() in SQL leave the same rows', () => {
  for (const [what, arrange, request] of CASES) {
    it(what, async () => {
      const typescript = await leaves('typescript', arrange, request);
      const sql = await leaves('sql', arrange, request);
      expect(sql).toEqual(typescript);
    });
  }
});

describe('a job that waits for a kept job already in the history', () => {
  it('is pending at once when that job completed, and dead when it was cancelled — both ways in', async () => {
    for (const way of ['typescript', 'sql'] as const) {
      const completed = (await leaves(way, historyParent('completed'), {
        kind: 'mail',
        payload: {},
        after: ['$1'],
      })) as { outcome: string; rows: { status: string }[] };
      expect(completed.outcome).toBe('enqueued');
      expect(completed.rows).toEqual([expect.objectContaining({ status: 'pending', waiting_for: null, deps: 1 })]);
      const cancelled = (await leaves(way, historyParent('cancelled'), {
        kind: 'mail',
        payload: {},
        after: ['$1'],
      })) as { outcome: string; rows: unknown[] };
      expect(cancelled.rows).toEqual([
        expect.objectContaining({ status: 'dead', last_error: 'job N it waits for ended cancelled' }),
      ]);
    }
  });
});
