// GET /metrics, GET /stats/throughput and the dashboard's page and assets, through app.request()
// against a real PostgreSQL. The page itself is driven in Chromium by dashboard.browser.test.ts.
import parsePrometheusTextFormat, { type MetricFamily } from 'parse-prometheus-text-format';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createApp } from '../src/http/app.ts';
import { z } from 'zod';
import { JobRegistry, createDefaultRegistry, defineJob } from '../src/jobs/index.ts';
import { claim, claimLimited, complete, enqueueMany, failMany } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { until } from './support/time.ts';
import { resetQueue } from './support/harness.ts';

const TOKEN = 'test-token-metrics-1';
const METRICS_TOKEN = 'scraper-token-2b8e41';
let t: TestDatabase;
let app: ReturnType<typeof createApp>;

beforeAll(async () => {
  t = await createTestDatabase();
  app = createApp({
    withDb: (fn) => fn(t.db),
    registry: createDefaultRegistry({}),
    apiToken: TOKEN,
    metricsToken: METRICS_TOKEN,
    oldestReadyWarnSeconds: 42,
  });
});
afterAll(() => t?.close());
beforeEach(async () => {
  await resetQueue(t);
});

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** Arranges a queue with every state, two kinds, and some history in the counters. */
async function arrange() {
  await enqueueMany(t.db, [
    ...Array.from({ length: 6 }, () => ({ kind: 'noop', payload: {} })),
    ...Array.from({ length: 3 }, () => ({ kind: 'mail "weekly"\\digest', payload: {}, maxAttempts: 1 })),
    { kind: 'noop', payload: {}, runAt: new Date(Date.now() + 3_600_000) },
  ]);
  const claimed = await claim(t.db, { batchSize: 9, lockToken: 'w:1' });
  const noop = claimed.filter((j) => j.kind === 'noop');
  const mail = claimed.filter((j) => j.kind !== 'noop');
  await complete(t.db, noop.slice(0, 4)); // 4 completed, 2 still running
  await failMany(
    t.db,
    mail.slice(0, 2).map((j) => ({ ...j, error: 'smtp down' })),
  ); // 2 dead
  await t.query(`UPDATE pgdrain.jobs SET run_at = now() - interval '90 seconds' WHERE id = $1`, [mail[2]!.id]);
  await t.query(`UPDATE pgdrain.jobs SET status = 'pending', locked_at = NULL, locked_by = NULL WHERE id = $1`, [
    mail[2]!.id,
  ]);
  // history folded into the totals long ago
  await t.query(
    `INSERT INTO pgdrain.job_totals (kind, completed, failed, dead, diverged) VALUES ('noop', 1000, 5, 1, 3)`,
  );
}

function sample(families: MetricFamily[], name: string, labels: Record<string, string>): number {
  const family = families.find((f) => f.name === name);
  if (!family) throw new Error(`no metric family ${name}`);
  const metric = family.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
  if (!metric) throw new Error(`no ${name} sample with ${JSON.stringify(labels)}`);
  return Number(metric.value);
}

describe('GET /metrics', () => {
  it('is Prometheus text whose numbers match the rows and the counters', async () => {
    await arrange();
    const res = await app.request('/metrics', { headers: bearer(METRICS_TOKEN) });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    const text = await res.text();
    const families = parsePrometheusTextFormat(text);
    expect(families.map((f) => [f.name, f.type])).toEqual([
      ['pgdrain_jobs', 'GAUGE'],
      ['pgdrain_jobs_ready', 'GAUGE'],
      ['pgdrain_oldest_ready_job_age_seconds', 'GAUGE'],
      ['pgdrain_jobs_completed_total', 'COUNTER'],
      ['pgdrain_jobs_failed_total', 'COUNTER'],
      ['pgdrain_jobs_dead_total', 'COUNTER'],
      ['pgdrain_workflow_diverged_total', 'COUNTER'],
      ['pgdrain_oldest_snapshot_age_seconds', 'GAUGE'],
      ['pgdrain_oldest_xmin_age_transactions', 'GAUGE'],
      ['pgdrain_jobs_table_dead_tuples', 'GAUGE'],
      ['pgdrain_jobs_table_live_tuples', 'GAUGE'],
      ['pgdrain_jobs_table_vacuums_total', 'COUNTER'],
    ]);

    // Every gauge against the table itself.
    const rows = await t.query<{ kind: string; status: string; n: number }>(
      `SELECT kind, status, count(*)::int AS n FROM pgdrain.jobs GROUP BY 1, 2`,
    );
    const mail = 'mail "weekly"\\digest';
    for (const kind of ['noop', mail, 'webhook']) {
      for (const status of ['pending', 'running', 'dead']) {
        const expected = rows.find((r) => r.kind === kind && r.status === status)?.n ?? 0;
        expect(sample(families, 'pgdrain_jobs', { kind, status }), `${kind} ${status}`).toBe(expected);
      }
    }
    expect(sample(families, 'pgdrain_jobs', { kind: 'noop', status: 'pending' })).toBe(1); // the delayed one
    expect(sample(families, 'pgdrain_jobs', { kind: 'noop', status: 'running' })).toBe(2);
    expect(sample(families, 'pgdrain_jobs', { kind: mail, status: 'dead' })).toBe(2);
    expect(sample(families, 'pgdrain_jobs_ready', { kind: 'noop' })).toBe(0);
    expect(sample(families, 'pgdrain_jobs_ready', { kind: mail })).toBe(1);
    const age = sample(families, 'pgdrain_oldest_ready_job_age_seconds', { kind: mail });
    expect(age).toBeGreaterThanOrEqual(90);
    expect(age).toBeLessThan(120);
    expect(sample(families, 'pgdrain_oldest_ready_job_age_seconds', { kind: 'noop' })).toBe(0);
    // A registered kind with no rows still has its series, at zero.
    expect(sample(families, 'pgdrain_jobs', { kind: 'webhook', status: 'pending' })).toBe(0);

    // Counters: the totals table plus the per-minute rows.
    expect(sample(families, 'pgdrain_jobs_completed_total', { kind: 'noop' })).toBe(1004);
    expect(sample(families, 'pgdrain_jobs_failed_total', { kind: 'noop' })).toBe(5);
    expect(sample(families, 'pgdrain_jobs_dead_total', { kind: 'noop' })).toBe(1);
    expect(sample(families, 'pgdrain_jobs_failed_total', { kind: mail })).toBe(2);
    expect(sample(families, 'pgdrain_jobs_dead_total', { kind: mail })).toBe(2);
    // Runs held because a deploy's code departed from their history: a kind's series once one was.
    expect(sample(families, 'pgdrain_workflow_diverged_total', { kind: 'noop' })).toBe(3);
    expect(families.find((f) => f.name === 'pgdrain_workflow_diverged_total')?.metrics).toHaveLength(1);
    // The label with a quote and a backslash is escaped as the format says.
    expect(text).toContain('kind="mail \\"weekly\\"\\\\digest"');
  });

  it('says what holds vacuum back: a transaction held open elsewhere, and the dead tuples the jobs table carries', async () => {
    const scrape = async () =>
      parsePrometheusTextFormat(await (await app.request('/metrics', { headers: bearer(TOKEN) })).text());
    const gauge = (families: MetricFamily[], name: string) => sample(families, name, {});
    const report = new pg.Client({ connectionString: t.url });
    await report.connect();
    try {
      // A report in another session: a snapshot held for as long as its transaction is open.
      await report.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await report.query('SELECT count(*) FROM pgdrain.jobs');
      await new Promise((r) => setTimeout(r, 1_200));
      await enqueueMany(
        t.db,
        Array.from({ length: 500 }, () => ({ kind: 'noop', payload: {} })),
      );
      await t.query('DELETE FROM pgdrain.jobs');
      await t.query('VACUUM pgdrain.jobs'); // cannot remove them: the report's snapshot may still see them
      const held = await until(
        scrape,
        (f) => gauge(f, 'pgdrain_jobs_table_dead_tuples') >= 500,
        5_000,
        'the dead tuples to be counted',
      );
      expect(gauge(held, 'pgdrain_oldest_snapshot_age_seconds')).toBeGreaterThanOrEqual(1);
      expect(gauge(held, 'pgdrain_oldest_xmin_age_transactions')).toBeGreaterThan(0);
      await report.query('COMMIT');
      await t.query('VACUUM pgdrain.jobs');
      const released = await until(
        scrape,
        (f) => gauge(f, 'pgdrain_jobs_table_dead_tuples') === 0,
        5_000,
        'vacuum to clean up',
      );
      // Both VACUUMs counted, as the server counts them (14's statistics arrive within moments).
      const [counted] = await t.query<{ manual: string; auto: string }>(
        `SELECT vacuum_count AS manual, autovacuum_count AS auto FROM pg_stat_user_tables
          WHERE relid = 'pgdrain.jobs'::regclass`,
      );
      expect(Number(counted!.manual)).toBeGreaterThanOrEqual(2);
      const vacuums = await until(
        scrape,
        (f) => sample(f, 'pgdrain_jobs_table_vacuums_total', { by: 'manual' }) >= Number(counted!.manual),
        5_000,
        'the VACUUMs to be counted',
      );
      expect(sample(vacuums, 'pgdrain_jobs_table_vacuums_total', { by: 'autovacuum' })).toBeGreaterThanOrEqual(
        Number(counted!.auto),
      );
      // The report's snapshot (over a second old) is gone; another session's statement in flight
      // at the scrape may hold one for a moment.
      expect(gauge(released, 'pgdrain_oldest_snapshot_age_seconds')).toBeLessThan(0.5);
    } finally {
      await report.end();
    }
  });

  it('takes the API token or the metrics token; the metrics token opens nothing else', async () => {
    expect((await app.request('/metrics', { headers: bearer(TOKEN) })).status).toBe(200);
    expect((await app.request('/metrics', { headers: bearer(METRICS_TOKEN) })).status).toBe(200);
    const wrong = await app.request('/metrics', { headers: bearer('nope-nope-nope-nope') });
    expect(wrong.status).toBe(401);
    expect((await wrong.json()).error.code).toBe('unauthorized');
    expect((await app.request('/metrics')).status).toBe(401);
    const stats = await app.request('/stats', { headers: bearer(METRICS_TOKEN) });
    expect(stats.status).toBe(401);
    const enqueue = await app.request('/jobs', {
      method: 'POST',
      headers: { ...bearer(METRICS_TOKEN), 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'noop', payload: {} }),
    });
    expect(enqueue.status).toBe(401);
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
  });
});

describe('limits across drainers in /stats and /metrics', () => {
  it("shows each limited kind's limits and how much of them is in use", async () => {
    const limited = createApp({
      withDb: (fn) => fn(t.db),
      registry: new JobRegistry([
        defineJob({
          kind: 'mailer',
          schema: z.unknown(),
          handler: () => {},
          globalConcurrency: 3,
          rateLimit: { limit: 10, periodSeconds: 60 },
        }),
        defineJob({ kind: 'ledger', schema: z.unknown(), handler: () => {}, groupConcurrency: 1 }),
        defineJob({ kind: 'plain', schema: z.unknown(), handler: () => {} }),
      ]),
      apiToken: TOKEN,
    });
    await enqueueMany(t.db, [
      ...Array.from({ length: 4 }, () => ({ kind: 'mailer', payload: {} })),
      ...['a', 'a', 'b', 'c'].map((groupKey) => ({ kind: 'ledger', payload: {}, groupKey })),
    ]);
    const mailer = await claimLimited(t.db, {
      kind: 'mailer',
      limits: { globalConcurrency: 3, rateLimit: { limit: 10, periodSeconds: 60 } },
      batchSize: 4,
      lockToken: 'm:1',
    });
    expect(mailer).toMatchObject({ heldBack: true });
    expect(mailer.jobs).toHaveLength(3);
    const stats = await (await limited.request('/stats', { headers: bearer(TOKEN) })).json();
    expect(stats.kinds.mailer.limits).toEqual({
      globalConcurrency: { limit: 3, running: 3 },
      rateLimit: { limit: 10, periodSeconds: 60, perGroup: false, startsInWindow: 3 },
    });
    expect(stats.kinds.ledger.limits).toEqual({ groupConcurrency: { limit: 1, keysWaiting: 3 } });
    expect(stats.kinds.plain).toBeUndefined(); // no jobs, no limits
    const families = parsePrometheusTextFormat(
      await (await limited.request('/metrics', { headers: bearer(TOKEN) })).text(),
    );
    expect(sample(families, 'pgdrain_kind_limit', { kind: 'mailer', limit: 'global_concurrency' })).toBe(3);
    expect(sample(families, 'pgdrain_kind_limit_in_use', { kind: 'mailer', limit: 'global_concurrency' })).toBe(3);
    expect(sample(families, 'pgdrain_kind_limit_in_use', { kind: 'mailer', limit: 'rate' })).toBe(3);
    expect(sample(families, 'pgdrain_kind_limit_in_use', { kind: 'ledger', limit: 'group_concurrency' })).toBe(3);
  });
});

describe('GET /stats/throughput', () => {
  it('returns completed, failed and dead per minute, oldest first, empty minutes as zeros', async () => {
    await arrange();
    const res = await app.request('/stats/throughput?minutes=10', { headers: bearer(TOKEN) });
    expect(res.status).toBe(200);
    const { minutes } = await res.json();
    expect(minutes).toHaveLength(10);
    const sum = (key: 'completed' | 'failed' | 'dead') =>
      minutes.reduce((s: number, m: Record<string, number>) => s + m[key]!, 0);
    const [db] = await t.query(
      `SELECT sum(completed)::int AS completed, sum(failed)::int AS failed, sum(dead)::int AS dead FROM pgdrain.job_counts`,
    );
    expect({ completed: sum('completed'), failed: sum('failed'), dead: sum('dead') }).toEqual(db);
    expect(db).toEqual({ completed: 4, failed: 2, dead: 2 });
    const times = minutes.map((m: { minute: string }) => Date.parse(m.minute));
    expect(times.every((v: number, i: number) => i === 0 || v - times[i - 1] === 60_000)).toBe(true);
    const byKind = await (
      await app.request('/stats/throughput?minutes=5&kind=noop', { headers: bearer(TOKEN) })
    ).json();
    expect(
      byKind.minutes.reduce((s: number, m: { completed: number; failed: number }) => s + m.completed + m.failed, 0),
    ).toBe(4);
  });

  it('refuses a bad window with a 400 naming the parameter', async () => {
    for (const query of ['minutes=0', 'minutes=1441', 'minutes=ten', 'window=5']) {
      const res = await app.request(`/stats/throughput?${query}`, { headers: bearer(TOKEN) });
      expect(res.status, query).toBe(400);
      const body = await res.json();
      expect(body.error.code).toBe('invalid_request');
      expect(body.error.message).toMatch(/^query\./);
    }
  });
});

describe('the dashboard page and assets', () => {
  it('GET / and /dashboard serve the page without a token; it holds no data and locks itself down', async () => {
    await arrange();
    for (const path of ['/', '/dashboard']) {
      const res = await app.request(path);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/html/);
      const csp = res.headers.get('content-security-policy') ?? '';
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("form-action 'none'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      const html = await res.text();
      expect(html).toContain('<script src="/dashboard/script.js" defer></script>');
      expect(html).toContain('data-warn-seconds="42"');
      expect(html).not.toContain('smtp down'); // no job data without the token
      expect(html).not.toContain(TOKEN);
      expect(html).not.toContain('Counting is off');
    }
  });

  it('serves its script and stylesheet with their types; the script is valid JavaScript', async () => {
    const script = await app.request('/dashboard/script.js');
    expect(script.status).toBe(200);
    expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    const source = await script.text();
    expect(() => new Function(source)).not.toThrow();
    const css = await app.request('/dashboard/style.css');
    expect(css.status).toBe(200);
    expect(css.headers.get('content-type')).toBe('text/css; charset=utf-8');
    expect(await css.text()).toContain('@media (max-width: 640px)');
  });
});
