// A limited kind's claim on a pool (src/queries/claim-limited.ts) runs its transaction on one
// connection it checks out itself: BEGIN and the kind's lock in one simple query, the prepared
// claim, COMMIT. What that must keep: the lock is the same one every other path and process takes
// for the kind (whatever characters the kind holds), and a claim that fails leaves no connection in
// the pool inside a transaction.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimLimited, enqueue } from '../src/queries/index.ts';
import { type TestDatabase, createTestDatabase } from './support/database.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.close();
});

const settle = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a limited claim on its own connection', () => {
  it.each([
    ['plain', 'limited_plain'],
    ['quotes, a backslash and non-ASCII', "o'brien \\ 'tenant'; -- ünïcødé ☃"],
  ])('waits for the kind lock that SQL names the same way (%s)', async (_, kind) => {
    await enqueue(t.db, { kind, payload: {} });
    const holder = await t.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT pg_advisory_xact_lock(hashtextextended('pgdrain.limits:' || $1, 0))`, [kind]);
      let done = false;
      const claiming = claimLimited(t.db, {
        kind,
        limits: { globalConcurrency: 1 },
        batchSize: 5,
        lockToken: `token-${kind.length}`,
      }).then((claim) => {
        done = true;
        return claim;
      });
      await settle(300);
      expect(done).toBe(false);
      await holder.query('COMMIT');
      const claim = await claiming;
      expect(claim.jobs.map((j) => j.kind)).toEqual([kind]);
    } finally {
      holder.release();
    }
  });

  it('a claim that fails in its transaction closes its connection instead of giving it back', async () => {
    const kind = 'limited_failing';
    await enqueue(t.db, { kind, payload: {} });
    const { db, pool } = t.connect(1);
    const holder = await t.pool.connect();
    try {
      // The kind's lock held elsewhere, and the pool's one connection gives up waiting for it.
      await holder.query('BEGIN');
      await holder.query(`SELECT pg_advisory_xact_lock(hashtextextended('pgdrain.limits:' || $1, 0))`, [kind]);
      await pool.query(`SET lock_timeout = '100ms'`);
      const options = { kind, limits: { globalConcurrency: 1 }, batchSize: 5, lockToken: 'failing-1' };
      await expect(claimLimited(db, options)).rejects.toThrow(/lock timeout/);
      expect(pool.totalCount).toBe(0);
      const open = await t.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND pid <> $1`,
        [(await holder.query('SELECT pg_backend_pid() AS pid')).rows[0].pid],
      );
      expect(open[0]!.n).toBe(0);
      await holder.query('COMMIT');
      // The pool opens a new connection; the job was never claimed by the failed attempt.
      const claim = await claimLimited(db, { ...options, lockToken: 'failing-2' });
      expect(claim.jobs).toHaveLength(1);
      expect(claim.jobs[0]!.attempts).toBe(1);
    } finally {
      holder.release();
    }
  });
});
