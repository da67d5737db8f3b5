// Flow control across drainers, written once and run on every driver (node-postgres in Node,
// neon-serverless and node-postgres through Hyperdrive inside workerd): several drains on separate
// connections stand for several drainers. Limits are counted from the handlers themselves, not
// from the table. The same limits across sidecar processes and Worker invocations are in
// test/flow-control-processes.test.ts.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { drain } from '../../src/drain/index.ts';
import { JobRegistry, JobValidationError, defineJob } from '../../src/jobs/registry.ts';
import { enqueue as enqueueTyped } from '../../src/jobs/enqueue.ts';
import { defineBatchJob } from '../../src/jobs/batch.ts';
import { removeGroupLimits, setGroupLimits } from '../../src/jobs/group-limits.ts';
import { cancel, claimLimited, enqueue, enqueueMany, explainLimitedClaim } from '../../src/queries/index.ts';
import { type Harness, resetQueue } from '../support/harness.ts';
import { sleep } from '../support/time.ts';

/** Runs counted by the handlers: how many at once at most, and when each started. */
function recorder() {
  let now = 0;
  const peak = { value: 0 };
  const starts: { key: string | null; n: number; at: number; attempt: number }[] = [];
  const ends: { key: string | null; n: number; at: number }[] = [];
  return {
    peak,
    starts,
    ends,
    async run(job: { groupKey: string | null; attempts: number }, n: number, ms: number) {
      now++;
      peak.value = Math.max(peak.value, now);
      starts.push({ key: job.groupKey, n, at: performance.now(), attempt: job.attempts });
      await sleep(ms);
      ends.push({ key: job.groupKey, n, at: performance.now() });
      now--;
    },
  };
}

export function flowControlSuite(name: string, createHarness: () => Promise<Harness>) {
  describe(`flow control across drainers (${name})`, () => {
    let h: Harness;
    beforeAll(async () => {
      h = await createHarness();
    });
    afterAll(() => h?.close());
    beforeEach(async () => {
      await resetQueue(h);
    });
    /** `n` drains of `registry` at once, each on connections of its own, like `n` drainers. */
    const drainers = async (n: number, registry: JobRegistry) => {
      const dbs = await Promise.all(Array.from({ length: n }, () => h.connect()));
      return Promise.all(
        dbs.map((db, i) => drain(db, registry, { workerId: `drainer-${i}`, batchSize: 10, concurrency: 10 })),
      );
    };

    it('globalConcurrency: three drainers claiming at once never run more than the limit, and reach it', async () => {
      const r = recorder();
      const registry = new JobRegistry([
        defineJob({
          kind: 'limited',
          schema: z.object({ n: z.number() }),
          globalConcurrency: 3,
          handler: ({ n }, { job }) => r.run(job, n, 60),
        }),
        defineJob({ kind: 'free', schema: z.unknown(), handler: () => {} }),
      ]);
      await enqueueMany(h.db, [
        ...Array.from({ length: 18 }, (_, n) => ({ kind: 'limited', payload: { n } })),
        ...Array.from({ length: 40 }, () => ({ kind: 'free', payload: {} })),
      ]);
      // Each drain ends when the limit holds the rest back; drain again as a sidecar's next wake-up would.
      for (
        let round = 0;
        round < 50 && Number((await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`))[0]!.n) > 0;
        round++
      )
        await drainers(3, registry);
      expect(r.starts).toHaveLength(18);
      expect(r.peak.value).toBe(3);
      // A job held back by the limit is not an attempt.
      expect(r.starts.every((s) => s.attempt === 1)).toBe(true);
    });

    it('groupConcurrency 1: a key runs one job at a time, in order, while different keys run side by side', async () => {
      const r = recorder();
      const registry = new JobRegistry([
        defineJob({
          kind: 'grouped',
          schema: z.object({ n: z.number() }),
          groupConcurrency: 1,
          handler: ({ n }, { job }) => r.run(job, n, 30),
        }),
      ]);
      // 4 keys × 5 jobs, interleaved key by key.
      await enqueueMany(
        h.db,
        Array.from({ length: 20 }, (_, n) => ({ kind: 'grouped', payload: { n }, groupKey: `customer-${n % 4}` })),
      );
      for (
        let round = 0;
        round < 100 && Number((await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`))[0]!.n) > 0;
        round++
      )
        await drainers(2, registry);
      expect(r.starts).toHaveLength(20);
      for (let key = 0; key < 4; key++) {
        const mine = r.starts.filter((s) => s.key === `customer-${key}`).sort((a, b) => a.at - b.at);
        expect(mine.map((s) => s.n)).toEqual([0, 1, 2, 3, 4].map((i) => i * 4 + key)); // enqueue order
        const ended = r.ends.filter((e) => e.key === `customer-${key}`);
        for (let i = 1; i < mine.length; i++)
          expect(mine[i]!.at).toBeGreaterThanOrEqual(ended.find((e) => e.n === mine[i - 1]!.n)!.at); // never two at once
      }
      expect(r.peak.value).toBeGreaterThan(1); // keys overlap
    });

    it('a key whose job waits to retry holds the key: the next job of that key waits, and order is kept', async () => {
      const order: number[] = [];
      const registry = new JobRegistry([
        defineJob({
          kind: 'ledger',
          schema: z.object({ n: z.number() }),
          groupConcurrency: 1,
          backoff: { baseSeconds: 0.3, capSeconds: 0.3 },
          handler: ({ n }, { job }) => {
            if (n === 0 && job.attempts === 1) throw new Error('first try fails');
            order.push(n);
          },
        }),
      ]);
      await enqueueMany(
        h.db,
        [0, 1, 2].map((n) => ({ kind: 'ledger', payload: { n }, groupKey: 'account-7' })),
      );
      const first = await drain(h.db, registry, { workerId: 'w' });
      expect(first).toMatchObject({ failed: 1, completed: 0 });
      expect(await h.query(`SELECT payload->>'n' AS n, status, attempts FROM pgdrain.jobs ORDER BY id`)).toEqual([
        { n: '0', status: 'pending', attempts: 1 },
        { n: '1', status: 'pending', attempts: 0 },
        { n: '2', status: 'pending', attempts: 0 },
      ]);
      for (let round = 0; round < 40 && order.length < 3; round++) {
        await drain(h.db, registry, { workerId: 'w' });
        await sleep(50);
      }
      expect(order).toEqual([0, 1, 2]);
    });

    it('rateLimit: no rolling window holds more starts than the limit, the rest wait as pending (not attempts), at the limit pace', async () => {
      const starts: number[] = [];
      const registry = new JobRegistry([
        defineJob({
          kind: 'rated',
          schema: z.unknown(),
          rateLimit: { limit: 4, periodSeconds: 1 },
          handler: () => void starts.push(performance.now()),
        }),
      ]);
      // Every start as the limiter counts it (the claim's stamp in pgdrain.rate_starts, which it
      // prunes as the window passes), copied aside: a handler starts some milliseconds after its
      // claim, more on a loaded machine, so the handlers' own clocks cannot judge a window.
      await h.query('CREATE TABLE public.rated_starts (started_at timestamptz NOT NULL)');
      await h.query(`CREATE FUNCTION public.copy_rated_start() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO public.rated_starts VALUES (NEW.started_at); RETURN NEW; END $$`);
      await h.query(`CREATE TRIGGER copy_rated_start AFTER INSERT ON pgdrain.rate_starts FOR EACH ROW
        WHEN (NEW.kind = 'rated') EXECUTE FUNCTION public.copy_rated_start()`);
      try {
        await rateLimitedDrains(registry, starts);
        const stamps = (
          await h.query<{ ms: string }>(
            'SELECT (extract(epoch FROM started_at) * 1000)::text AS ms FROM public.rated_starts ORDER BY started_at',
          )
        ).map((r) => Number(r.ms));
        expect(stamps).toHaveLength(12);
        for (const t of stamps) expect(stamps.filter((s) => s >= t && s < t + 1_000).length).toBeLessThanOrEqual(4);
      } finally {
        await h.query('DROP TRIGGER copy_rated_start ON pgdrain.rate_starts');
        await h.query('DROP FUNCTION public.copy_rated_start()');
        await h.query('DROP TABLE public.rated_starts');
      }
    });

    /** 12 jobs of `rated` (4 a second) drained: the first drain takes 4 and is held back; two
     * drainers at a time take the rest as the window allows, about two windows more. */
    async function rateLimitedDrains(registry: JobRegistry, starts: number[]): Promise<void> {
      await enqueueMany(
        h.db,
        Array.from({ length: 12 }, () => ({ kind: 'rated', payload: {} })),
      );
      const first = await drain(h.db, registry, { workerId: 'w' });
      expect(first.completed).toBe(4);
      expect(first.nextClaimAt).toBeGreaterThan(Date.now()); // held back until the window allows
      expect(
        await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE status = 'pending' AND attempts = 0`),
      ).toEqual([{ n: 8 }]);
      const began = performance.now();
      let report = first;
      while (starts.length < 12) {
        await sleep(Math.max(0, (report.nextClaimAt ?? Date.now()) - Date.now()));
        const reports = await drainers(2, registry);
        report = reports.find((r) => r.nextClaimAt !== null) ?? reports[0]!;
      }
      expect(starts).toHaveLength(12);
      // 8 more at 4 a second: about two more windows, not slower.
      expect(performance.now() - began).toBeLessThan(3_500);
    }

    it("debounce: 'replace' keeps one pending job with the last payload and run_at; a running one is left alone and a new one follows", async () => {
      const later = new Date(Date.now() + 60_000);
      const a = await enqueue(h.db, { kind: 'index', payload: { v: 1 }, dedupeKey: 'doc-9', dedupeMode: 'replace' });
      const b = await enqueue(h.db, {
        kind: 'index',
        payload: { v: 2 },
        dedupeKey: 'doc-9',
        dedupeMode: 'replace',
        runAt: later,
      });
      expect(b).toMatchObject({ id: a.id, deduplicated: true, replaced: true });
      expect(
        await h.query(`SELECT payload, run_at = $1::timestamptz AS moved FROM pgdrain.jobs`, [later.toISOString()]),
      ).toEqual([{ payload: { v: 2 }, moved: true }]);
      // 'keep' (the default) leaves it as it is.
      expect(await enqueue(h.db, { kind: 'index', payload: { v: 3 }, dedupeKey: 'doc-9' })).toMatchObject({
        id: a.id,
        deduplicated: true,
      });
      await h.query(
        `UPDATE pgdrain.jobs SET status = 'running', locked_at = now(), locked_by = 'busy:1', attempts = 1`,
      );
      const c = await enqueue(h.db, { kind: 'index', payload: { v: 4 }, dedupeKey: 'doc-9', dedupeMode: 'replace' });
      expect(c.id).not.toBe(a.id);
      expect(c).toMatchObject({ deduplicated: false, status: 'pending' });
      expect(
        await h.query(`SELECT id::text, status, payload, dedupe_key, locked_by FROM pgdrain.jobs ORDER BY id`),
      ).toEqual([
        { id: a.id, status: 'running', payload: { v: 2 }, dedupe_key: null, locked_by: 'busy:1' },
        { id: c.id, status: 'pending', payload: { v: 4 }, dedupe_key: 'doc-9', locked_by: null },
      ]);
      // A key held by another kind's job is not that kind's to replace.
      const other = await enqueue(h.db, { kind: 'mail', payload: { v: 5 }, dedupeKey: 'doc-9', dedupeMode: 'replace' });
      expect(other).toMatchObject({ id: c.id, deduplicated: true });
      expect(await h.query(`SELECT payload FROM pgdrain.jobs WHERE id = $1`, [c.id])).toEqual([{ payload: { v: 4 } }]);
    });

    it("limits per group key from data: a key with its own concurrency or rate gets it, the others the kind's, changed at the next claim", async () => {
      const kind = 'tenant-job';
      await enqueueMany(
        h.db,
        ['paying', 'free'].flatMap((key) => Array.from({ length: 6 }, () => ({ kind, payload: {}, groupKey: key }))),
      );
      await setGroupLimits(h.db, { kind, groupKey: 'paying', concurrency: 3 });
      const byKey = (jobs: { groupKey: string | null }[]) =>
        jobs.reduce<Record<string, number>>((n, j) => {
          n[j.groupKey!] = (n[j.groupKey!] ?? 0) + 1;
          return n;
        }, {});
      const claimed = (token: string) =>
        claimLimited(h.db, { kind, limits: { groupConcurrency: 1 }, batchSize: 20, lockToken: token });
      expect(byKey((await claimed('t:1')).jobs)).toEqual({ paying: 3, free: 1 });
      // Raised: the next claim takes two more of it; the other key is still at its kind's 1.
      await setGroupLimits(h.db, { kind, groupKey: 'paying', concurrency: 5 });
      expect(byKey((await claimed('t:2')).jobs)).toEqual({ paying: 2 });
      // Removed: back to the kind's 1, which its 5 running jobs exceed.
      expect(await removeGroupLimits(h.db, { kind, groupKey: 'paying' })).toBe(true);
      expect(await removeGroupLimits(h.db, { kind, groupKey: 'paying' })).toBe(false);
      expect((await claimed('t:3')).jobs).toEqual([]);

      // A key's own rate, for a kind limited per group: 3 starts a minute for it, the kind's 1 for the other.
      const rated = 'tenant-rated';
      await enqueueMany(
        h.db,
        ['big', 'small'].flatMap((key) =>
          Array.from({ length: 5 }, () => ({ kind: rated, payload: {}, groupKey: key })),
        ),
      );
      await setGroupLimits(h.db, { kind: rated, groupKey: 'big', rateLimit: { limit: 3, periodSeconds: 60 } });
      const rate = { rateLimit: { limit: 1, periodSeconds: 60, perGroup: true } };
      const first = await claimLimited(h.db, { kind: rated, limits: rate, batchSize: 20, lockToken: 'r:1' });
      expect(byKey(first.jobs)).toEqual({ big: 3, small: 1 });
      const second = await claimLimited(h.db, { kind: rated, limits: rate, batchSize: 20, lockToken: 'r:2' });
      expect(second.jobs).toEqual([]);
      expect(second.nextStartAt!.getTime()).toBeGreaterThan(Date.now() + 50_000);

      // In SQL: the same function, the same bounds; all limits NULL removes the key's.
      expect(await h.query(`SELECT pgdrain.set_group_limits('tenant-job', 'free', concurrency => 2) AS set`)).toEqual([
        { set: true },
      ]);
      expect(
        await h.query(`SELECT group_key, concurrency FROM pgdrain.group_limits WHERE kind = 'tenant-job'`),
      ).toEqual([{ group_key: 'free', concurrency: 2 }]);
      expect(await h.query(`SELECT pgdrain.set_group_limits('tenant-job', 'free') AS set`)).toEqual([{ set: false }]);
      await expect(h.query(`SELECT pgdrain.set_group_limits('tenant-job', 'free', 0)`)).rejects.toThrow(
        /concurrency must be a whole number from 1 to 100000/,
      );
      await expect(h.query(`SELECT pgdrain.set_group_limits('tenant-job', 'free', rate_limit => 5)`)).rejects.toThrow(
        /go together/,
      );
      await expect(setGroupLimits(h.db, { kind, groupKey: '', concurrency: 1 })).rejects.toThrow(
        /groupKey must be 1 to 200 characters/,
      );
      await expect(setGroupLimits(h.db, { kind, groupKey: 'x' })).rejects.toThrow(
        /give concurrency, rateLimit or both/,
      );
      await expect(
        setGroupLimits(h.db, { kind, groupKey: 'x', rateLimit: { limit: 1, periodSeconds: 0 } }),
      ).rejects.toThrow(/rateLimit.periodSeconds/);
      // A period shorter than a millisecond would hold no start: no limit at all.
      await expect(
        setGroupLimits(h.db, { kind, groupKey: 'x', rateLimit: { limit: 1, periodSeconds: 5e-324 } }),
      ).rejects.toThrow(/rateLimit.periodSeconds must be from 0.001 to 86400/);
      await expect(
        h.query(`SELECT pgdrain.set_group_limits('tenant-job', 'x', rate_limit => 1, rate_period_seconds => 5e-324)`),
      ).rejects.toThrow(/rate_period_seconds from 0.001 to 86400/);
      expect(await h.query(`SELECT count(*)::int AS n FROM pgdrain.group_limits`)).toEqual([{ n: 1 }]);
    });

    it("fair: true: keys take turns — a backlog of one key holds another's jobs back one round at most — with priority first, in one drainer or three", async () => {
      const order: string[] = [];
      const fairKind = (extra: object = {}) =>
        defineJob({
          kind: 'fair-job',
          schema: z.object({ tag: z.string() }),
          fair: true,
          ...extra,
          handler: async ({ tag }) => {
            order.push(tag);
            await sleep(2);
          },
        });
      const backlog = async () => {
        // Key A's 30 jobs were enqueued first; B's and C's 3 each after them; D has no key.
        await enqueueMany(
          h.db,
          Array.from({ length: 30 }, (_, i) => ({ kind: 'fair-job', payload: { tag: `A${i}` }, groupKey: 'A' })),
        );
        await enqueueMany(
          h.db,
          ['B', 'C'].flatMap((key) =>
            Array.from({ length: 3 }, (_, i) => ({ kind: 'fair-job', payload: { tag: `${key}${i}` }, groupKey: key })),
          ),
        );
        await enqueueMany(h.db, [{ kind: 'fair-job', payload: { tag: 'D0' } }]);
      };
      await backlog();
      await drain(h.db, new JobRegistry([fairKind()]), { workerId: 'fair', batchSize: 1, concurrency: 1 });
      expect(order).toHaveLength(37);
      // Rounds of A, B, C and the keyless D: each key's first job within the first round, B's and C's last by the third.
      expect(order.slice(0, 4).sort()).toEqual(['A0', 'B0', 'C0', 'D0']);
      expect(order.indexOf('B2')).toBeLessThan(11);
      expect(order.indexOf('C2')).toBeLessThan(11);
      // Within a key, its own order.
      expect(order.filter((t) => t.startsWith('A'))).toEqual(Array.from({ length: 30 }, (_, i) => `A${i}`));

      // Priority still first: a job of A at priority 10 goes before every turn of the others.
      order.length = 0;
      await h.query('TRUNCATE pgdrain.fair_turns');
      await backlog();
      await enqueue(h.db, { kind: 'fair-job', payload: { tag: 'A-urgent' }, groupKey: 'A', priority: 10 });
      await drain(h.db, new JobRegistry([fairKind()]), { workerId: 'fair', batchSize: 1, concurrency: 1 });
      expect(order[0]).toBe('A-urgent');

      // Three drainers at once, claiming five at a time, with groupConcurrency 1: still turns, and each key one at a time.
      order.length = 0;
      await h.query('TRUNCATE pgdrain.fair_turns');
      await backlog();
      const registry = new JobRegistry([fairKind({ groupConcurrency: 1 })]);
      for (
        let round = 0;
        round < 100 && Number((await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`))[0]!.n) > 0;
        round++
      )
        await drainers(3, registry);
      expect(order).toHaveLength(37);
      expect(order.indexOf('B2')).toBeLessThan(15);
      expect(order.indexOf('C2')).toBeLessThan(15);
    });

    it("a fair claim's cost follows its size, not the backlog: every scan of the jobs table in its plan is bounded by a condition", async () => {
      // 20,000 ready jobs over 1,000 keys, analyzed: the backlog where its round was once joined to
      // the table by hashing every row.
      for (let chunk = 0; chunk < 2; chunk++)
        await enqueueMany(
          h.db,
          Array.from({ length: 10_000 }, (_, i) => ({
            kind: 'fair-scan',
            payload: {},
            groupKey: `tenant-${i % 1_000}`,
          })),
        );
      await h.query('ANALYZE pgdrain.jobs');
      const plan = await explainLimitedClaim(h.db, {
        kind: 'fair-scan',
        limits: { fair: true },
        batchSize: 50,
        lockToken: 'explain:fair',
      });
      const scans: { node: string; index?: string; bounded: boolean }[] = [];
      const visit = (node: Record<string, unknown>) => {
        if (node['Relation Name'] === 'jobs' && /Scan/.test(String(node['Node Type'])))
          scans.push({
            node: String(node['Node Type']),
            index: node['Index Name'] as string | undefined,
            bounded: node['Index Cond'] !== undefined || node['TID Cond'] !== undefined,
          });
        for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) visit(child);
      };
      visit((plan as { Plan: Record<string, unknown> }[])[0]!.Plan);
      expect(scans.length).toBeGreaterThan(0);
      expect(scans.filter((s) => !s.bounded)).toEqual([]);
      expect(scans).toContainEqual({ node: 'Index Scan', index: 'jobs_pkey', bounded: true });
    });

    it("a fair claim behind an older backlog of another kind at the same priority does not walk that backlog: it passes over none of that kind's jobs", async () => {
      // 20,000 ready jobs of another kind, enqueued first (ahead in claim order), then 200 of a fair kind over 100 keys.
      for (let chunk = 0; chunk < 2; chunk++)
        await enqueueMany(
          h.db,
          Array.from({ length: 10_000 }, () => ({ kind: 'bulk-before', payload: {} })),
        );
      await enqueueMany(
        h.db,
        Array.from({ length: 200 }, (_, i) => ({ kind: 'fair-behind', payload: {}, groupKey: `tenant-${i % 100}` })),
      );
      await h.query('ANALYZE pgdrain.jobs');
      // Run (and rolled back) as the prepared claim runs after its first few: a plan made without its values.
      const plan = (await explainLimitedClaim(
        h.db,
        { kind: 'fair-behind', limits: { fair: true }, batchSize: 50, lockToken: 'explain:behind' },
        { analyze: true, generic: true },
      )) as { Plan: Record<string, unknown> }[];
      expect(plan[0]!.Plan['Actual Rows']).toBe(50);
      let passedOver = 0;
      const visit = (node: Record<string, unknown>) => {
        if (node['Relation Name'] === 'jobs')
          passedOver += Number(node['Rows Removed by Filter'] ?? 0) * Number(node['Actual Loops'] ?? 1);
        for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) visit(child);
      };
      visit(plan[0]!.Plan);
      // Finding the kind's top priority in claim order passed over all 20,000.
      expect(passedOver).toBeLessThan(200);
    });

    it("a fair round: each claim takes the next keys after the last turn, one job each, passing over keys with only delayed jobs, the keyless turn after the last key, then around again; with fewer keys, more of each key's jobs", async () => {
      // Keys k1..k8 with two ready jobs each, except k3 and k6: one job each, an hour away. Two jobs without a key.
      const later = new Date(Date.now() + 3_600_000);
      await enqueueMany(
        h.db,
        [1, 2, 3, 4, 5, 6, 7, 8].flatMap((k) =>
          k === 3 || k === 6
            ? [{ kind: 'fair-round', payload: { tag: `k${k}.later` }, groupKey: `k${k}`, runAt: later }]
            : [0, 1].map((n) => ({ kind: 'fair-round', payload: { tag: `k${k}.${n}` }, groupKey: `k${k}` })),
        ),
      );
      await enqueueMany(
        h.db,
        [0, 1].map((n) => ({ kind: 'fair-round', payload: { tag: `none.${n}` } })),
      );
      const claim = async (batchSize: number) => {
        const { jobs, heldBack } = await claimLimited(h.db, {
          kind: 'fair-round',
          limits: { fair: true },
          batchSize,
          lockToken: 'round',
        });
        expect(heldBack).toBe(false);
        // Settled at once, as a drain would: the next claim starts from where this one ended.
        await h.query(`DELETE FROM pgdrain.jobs WHERE id = ANY($1::bigint[])`, [jobs.map((j) => String(j.id))]);
        return jobs.map((j) => (j.payload as { tag: string }).tag).sort();
      };
      expect(await claim(3)).toEqual(['k1.0', 'k2.0', 'k4.0']);
      expect(await claim(3)).toEqual(['k5.0', 'k7.0', 'k8.0']);
      // The end of the keys: the keyless turn, then from the first key again.
      expect(await claim(3)).toEqual(['k1.1', 'k2.1', 'none.0']);
      expect(await claim(3)).toEqual(['k4.1', 'k5.1', 'k7.1']);
      // Left: k8.1 and none.1 ready, the two delayed ones. A claim of 4 over two turns takes two of each turn's jobs, all there is.
      expect(await claim(4)).toEqual(['k8.1', 'none.1']);
      expect(
        (await h.query(`SELECT payload->>'tag' AS tag FROM pgdrain.jobs WHERE kind = 'fair-round' ORDER BY 1`)).map(
          (r) => r.tag,
        ),
      ).toEqual(['k3.later', 'k6.later']);

      // Priorities around the last turn's: a delayed job above it hides nothing below; a ready one goes first.
      await enqueueMany(h.db, [
        { kind: 'fair-round', payload: { tag: 'p5.later' }, groupKey: 'k1', priority: 5, runAt: later },
        { kind: 'fair-round', payload: { tag: 'p0.now' }, groupKey: 'k2' },
      ]);
      expect(await claim(3)).toEqual(['p0.now']);
      await enqueueMany(h.db, [
        { kind: 'fair-round', payload: { tag: 'p0.again' }, groupKey: 'k4' },
        { kind: 'fair-round', payload: { tag: 'p5.now' }, groupKey: 'k9', priority: 5 },
      ]);
      expect(await claim(1)).toEqual(['p5.now']);
      expect(await claim(1)).toEqual(['p0.again']);
    });

    it('a batch kind: 200 jobs in 200/size calls, one outcome per item; a failing item alone is retried; results kept per item', async () => {
      const calls: number[][] = [];
      let failedOnce = false;
      const registry = new JobRegistry([
        defineBatchJob({
          kind: 'batch-mail',
          schema: z.object({ n: z.number() }),
          size: 50,
          keepCompletedSeconds: 600,
          // Retried well after this drain is over (the test brings the retry forward).
          backoff: { baseSeconds: 10, capSeconds: 10 },
          handler: async (items) => {
            calls.push(items.map((i) => i.payload.n));
            return items.map(({ payload: { n } }) => {
              if (n === 7 && !failedOnce) {
                failedOnce = true;
                return new Error('bounced');
              }
              return { sent: n };
            });
          },
        }),
      ]);
      await enqueueMany(
        h.db,
        Array.from({ length: 200 }, (_, n) => ({ kind: 'batch-mail', payload: { n }, keepSeconds: 600 })),
      );
      const first = await drain(h.db, registry, { workerId: 'batch', batchSize: 10, concurrency: 4 });
      expect(first).toMatchObject({ claimed: 200, completed: 199, failed: 1 });
      expect(calls.map((c) => c.length)).toEqual([50, 50, 50, 50]);
      expect(calls.flat().sort((a, b) => a - b)).toEqual(Array.from({ length: 200 }, (_, n) => n));
      expect(await h.query(`SELECT status, attempts, last_error FROM pgdrain.jobs WHERE payload->>'n' = '7'`)).toEqual([
        { status: 'pending', attempts: 1, last_error: 'bounced' },
      ]);
      await h.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE payload->>'n' = '7'`);
      expect(await drain(h.db, registry, { workerId: 'batch' })).toMatchObject({ claimed: 1, completed: 1 });
      expect(calls.at(-1)).toEqual([7]);
      const kept = await h.query<{ n: string; result: unknown }>(
        `SELECT payload->>'n' AS n, result FROM pgdrain.jobs_and_history WHERE kind = 'batch-mail' AND payload->>'n' IN ('3', '7') ORDER BY 1`,
      );
      expect(kept).toEqual([
        { n: '3', result: { sent: 3 } },
        { n: '7', result: { sent: 7 } },
      ]);
    });

    it('a batch that throws, or answers the wrong number of outcomes, fails every item; waitMs gathers a fuller batch; a cancelled item ends cancelled alone', async () => {
      let mode: 'throw' | 'short' | 'ok' = 'throw';
      const calls: number[] = [];
      let cancelDuringCall: string | null = null;
      /** What the handler saw of the signals after that cancel. */
      let seen: { item: unknown; other: boolean; call: boolean } | null = null;
      const registry = new JobRegistry([
        defineBatchJob({
          kind: 'batch-strict',
          schema: z.object({ n: z.number() }),
          size: 10,
          waitMs: 400,
          maxAttempts: 3,
          // Retried well after each drain is over (the test brings the retries forward).
          backoff: { baseSeconds: 10, capSeconds: 10 },
          handler: async (items, { signal }) => {
            calls.push(items.length);
            // Someone cancels one of them while the call runs: its own signal aborts (the lease
            // keeper's next renewal hears of it), the call's and the others' do not; the statement
            // that completes it ends it cancelled.
            const cancelled = items.find((i) => i.job.id === cancelDuringCall);
            if (cancelled) {
              await cancel(h.db, cancelled.job.id);
              for (let waited = 0; !cancelled.signal.aborted && waited < 5_000; waited += 20) await sleep(20);
              const other = items.find((i) => i !== cancelled)!;
              seen = { item: cancelled.signal.reason, other: other.signal.aborted, call: signal.aborted };
            }
            if (mode === 'throw') throw new Error('the mail service is down');
            if (mode === 'short') return items.slice(1).map(() => 'ok');
            return items.map(() => 'ok');
          },
        }),
      ]);
      const run = () => drain(h.db, registry, { workerId: 'strict', visibilityTimeoutSeconds: 3 });
      await enqueueMany(
        h.db,
        Array.from({ length: 3 }, (_, n) => ({ kind: 'batch-strict', payload: { n } })),
      );
      expect(await run()).toMatchObject({ failed: 3 });
      expect(await h.query(`SELECT DISTINCT last_error FROM pgdrain.jobs`)).toEqual([
        { last_error: 'the mail service is down' },
      ]);
      await h.query(`UPDATE pgdrain.jobs SET run_at = now()`);
      mode = 'short';
      expect(await run()).toMatchObject({ failed: 3 });
      expect((await h.query(`SELECT DISTINCT last_error FROM pgdrain.jobs`))[0]!.last_error).toMatch(
        /answered 2 outcomes for 3 jobs; it must answer one outcome per job, in order/,
      );

      // waitMs: 3 ready, 4 more enqueued while the batch waits: one call of 7.
      await h.query('TRUNCATE pgdrain.jobs');
      calls.length = 0;
      mode = 'ok';
      await enqueueMany(
        h.db,
        Array.from({ length: 3 }, (_, n) => ({ kind: 'batch-strict', payload: { n } })),
      );
      const draining = run();
      await sleep(150);
      await enqueueMany(
        h.db,
        Array.from({ length: 4 }, (_, n) => ({ kind: 'batch-strict', payload: { n: 10 + n } })),
      );
      expect(await draining).toMatchObject({ completed: 7 });
      expect(calls).toEqual([7]);

      // A cancel of one item while the call runs: it ends cancelled, the others complete.
      const [one, two] = await enqueueMany(h.db, [
        { kind: 'batch-strict', payload: { n: 1 } },
        { kind: 'batch-strict', payload: { n: 2 } },
      ]);
      cancelDuringCall = one!.id;
      expect(await run()).toMatchObject({ completed: 1, cancelled: 1 });
      expect(seen).toEqual({ item: expect.objectContaining({ name: 'JobCancelledError' }), other: false, call: false });
      expect(
        await h.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE id IN ($1, $2)`, [one!.id, two!.id]),
      ).toEqual([{ n: 0 }]);
    });

    it('bad limits are refused by defineJob; a bad group key is refused before anything is stored', async () => {
      const kind = { kind: 'k', schema: z.unknown(), handler: () => {} };
      expect(() => defineJob({ ...kind, globalConcurrency: 0 })).toThrow(
        'globalConcurrency must be a positive integer, not 0',
      );
      expect(() => defineJob({ ...kind, groupConcurrency: 1.5 })).toThrow(
        'groupConcurrency must be a positive integer, not 1.5',
      );
      expect(() => defineJob({ ...kind, rateLimit: { limit: -1, periodSeconds: 1 } })).toThrow(
        'rateLimit.limit must be a positive integer',
      );
      expect(() => defineJob({ ...kind, rateLimit: { limit: 5, periodSeconds: 0 } })).toThrow(
        'rateLimit.periodSeconds must be a number of seconds from 0.001 to 86400, not 0',
      );
      expect(() => defineJob({ ...kind, rateLimit: { limit: 5, periodSeconds: 5e-324 } })).toThrow(
        'rateLimit.periodSeconds must be a number of seconds from 0.001 to 86400, not 5e-324',
      );
      expect(() => defineJob({ ...kind, fair: 'yes' as unknown as boolean })).toThrow('fair must be true or false');
      const batch = { kind: 'b', schema: z.unknown(), handler: (items: unknown[]) => items };
      expect(() => defineBatchJob({ ...batch, size: 0 })).toThrow('size must be a whole number from 1 to 1000, not 0');
      expect(() => defineBatchJob({ ...batch, size: 1001 })).toThrow(
        'size must be a whole number from 1 to 1000, not 1001',
      );
      expect(() => defineBatchJob({ ...batch, size: 10, waitMs: 60_001 })).toThrow(
        'waitMs must be a whole number of milliseconds from 0 to 60000, not 60001',
      );
      const typed = defineJob(kind);
      // Validation throws before anything is sent to the database.
      expect(() => enqueueTyped(h.db, typed, {}, { groupKey: '' })).toThrow(JobValidationError);
      expect(() => enqueueTyped(h.db, typed, {}, { groupKey: 'x'.repeat(201) })).toThrow(
        'groupKey must be 1 to 200 characters',
      );
      await expect(h.query(`SELECT pgdrain.enqueue('k', '{}', group_key => '')`)).rejects.toThrow(
        /group_key is 0 characters long/,
      );
      await expect(
        h.query(`SELECT pgdrain.enqueue('k', '{}', dedupe_key => 'x', dedupe_mode => 'merge')`),
      ).rejects.toThrow(/dedupe_mode is 'merge'/);
      await expect(
        h.query(`INSERT INTO pgdrain.jobs (kind, payload, group_key) VALUES ('k', '{}', '')`),
      ).rejects.toThrow(/jobs_group_key_valid/);
      expect(await h.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
    });
  });
}
