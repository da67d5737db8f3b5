// docs/coming-from.md, run as written: graphile-worker's and pg-boss's schemas installed by their own
// code (the versions the benchmark runs), jobs added through their own APIs in each state, then the
// page's statements move the pending ones into pgdrain — payload, due time, priority, key and the
// attempts left — and leave the rest; a drain then runs what moved.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { z } from 'zod';
import { drain } from '../src/drain/index.ts';
import { JobRegistry, defineJob } from '../src/entry/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { resetQueue } from './support/harness.ts';

/** The page's statements marked as run here, in order: graphile-worker's, then pg-boss's. */
const [fromGraphile, fromPgBoss] = [
  ...readFileSync(new URL('../docs/coming-from.md', import.meta.url), 'utf8').matchAll(
    /<!-- run by test\/coming-from\.test\.ts -->\n```sql\n([\s\S]*?)\n```/g,
  ),
].map((m) => m[1]!);

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());
beforeEach(() => resetQueue(t));

const moved = () =>
  t.query(
    `SELECT kind, payload, max_attempts, priority, dedupe_key, run_at > now() + interval '30 minutes' AS later
       FROM pgdrain.jobs ORDER BY payload::text`,
  );

it('the page has both statements', () => {
  expect(fromGraphile).toContain('graphile_worker._private_jobs');
  expect(fromPgBoss).toContain('pgboss.job');
});

it('from graphile-worker: pending jobs move (priority inverted, attempts left), a locked or spent one stays; a drain runs them', async () => {
  const { makeWorkerUtils } = await import('graphile-worker');
  const utils = await makeWorkerUtils({ connectionString: t.url });
  try {
    await utils.migrate();
    await utils.addJob('send_email', { to: 'a@example.com' }, { priority: -5, maxAttempts: 4, jobKey: 'welcome-a' });
    await utils.addJob('send_email', { to: 'b@example.com' }, { runAt: new Date(Date.now() + 3_600_000) });
    const failedOnce = await utils.addJob('send_email', { to: 'c@example.com' }, { maxAttempts: 4 });
    const locked = await utils.addJob('send_email', { to: 'd@example.com' });
    const spent = await utils.addJob('send_email', { to: 'e@example.com' }, { maxAttempts: 1 });
    await t.query(`UPDATE graphile_worker._private_jobs SET attempts = 1, last_error = 'timeout' WHERE id = $1`, [
      failedOnce.id,
    ]);
    await t.query(
      `UPDATE graphile_worker._private_jobs SET locked_at = now(), locked_by = 'old-worker' WHERE id = $1`,
      [locked.id],
    );
    await t.query(`UPDATE graphile_worker._private_jobs SET attempts = 1, last_error = 'boom' WHERE id = $1`, [
      spent.id,
    ]);

    expect(await t.query(fromGraphile!)).toHaveLength(3);
    expect(await moved()).toEqual([
      {
        kind: 'send_email',
        payload: { to: 'a@example.com' },
        max_attempts: 4,
        priority: 5,
        dedupe_key: 'welcome-a',
        later: false,
      },
      {
        kind: 'send_email',
        payload: { to: 'b@example.com' },
        max_attempts: 25,
        priority: 0,
        dedupe_key: null,
        later: true,
      },
      {
        kind: 'send_email',
        payload: { to: 'c@example.com' },
        max_attempts: 3,
        priority: 0,
        dedupe_key: null,
        later: false,
      },
    ]);
    expect(
      await t.query(`SELECT payload->>'to' AS "to" FROM graphile_worker._private_jobs ORDER BY payload->>'to'`),
    ).toEqual([{ to: 'd@example.com' }, { to: 'e@example.com' }]);
  } finally {
    await utils.release();
  }
  const sent: string[] = [];
  const sendEmail = defineJob({
    kind: 'send_email',
    schema: z.object({ to: z.string() }),
    handler: async ({ to }) => void sent.push(to),
  });
  expect(await drain(t.db, new JobRegistry([sendEmail]), { workerId: 'moved' })).toMatchObject({ completed: 2 });
  expect(sent.sort()).toEqual(['a@example.com', 'c@example.com']);
});

it('from pg-boss: created and retrying jobs move (attempts left), an active or failed one stays; a drain runs them', async () => {
  const { PgBoss } = await import('pg-boss');
  const boss = new PgBoss({ connectionString: t.url, schedule: false, supervise: false });
  boss.on('error', () => {});
  await boss.start();
  try {
    await boss.createQueue('email-digest');
    await boss.send('email-digest', { user: 1 }, { priority: 5, retryLimit: 4, singletonKey: 'digest-1' });
    await boss.send('email-digest', { user: 2 }, { startAfter: 3600 });
    const retrying = await boss.send('email-digest', { user: 3 });
    const active = await boss.send('email-digest', { user: 4 });
    const failed = await boss.send('email-digest', { user: 5 });
    await t.query(`UPDATE pgboss.job SET state = 'retry', retry_count = 1 WHERE id = $1`, [retrying]);
    await t.query(`UPDATE pgboss.job SET state = 'active', started_on = now() WHERE id = $1`, [active]);
    await t.query(`UPDATE pgboss.job SET state = 'failed', completed_on = now() WHERE id = $1`, [failed]);

    expect(await t.query(fromPgBoss!)).toHaveLength(3);
    expect(await moved()).toEqual([
      {
        kind: 'email-digest',
        payload: { user: 1 },
        max_attempts: 5,
        priority: 5,
        dedupe_key: 'digest-1',
        later: false,
      },
      { kind: 'email-digest', payload: { user: 2 }, max_attempts: 3, priority: 0, dedupe_key: null, later: true },
      { kind: 'email-digest', payload: { user: 3 }, max_attempts: 2, priority: 0, dedupe_key: null, later: false },
    ]);
    expect(await t.query(`SELECT data->>'user' AS "user", state FROM pgboss.job ORDER BY data->>'user'`)).toEqual([
      { user: '4', state: 'active' },
      { user: '5', state: 'failed' },
    ]);
  } finally {
    await boss.stop({ graceful: false, timeout: 1000 });
  }
  const digests: number[] = [];
  const emailDigest = defineJob({
    kind: 'email-digest',
    schema: z.object({ user: z.number() }),
    handler: async ({ user }) => void digests.push(user),
  });
  expect(await drain(t.db, new JobRegistry([emailDigest]), { workerId: 'moved' })).toMatchObject({ completed: 2 });
  expect(digests.sort()).toEqual([1, 3]);
});
