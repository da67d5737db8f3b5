// Events that start work, the way they are deployed: a trigger on the user's own table sends
// `shop.paid` in SQL, and the subscribed kinds are drained by the Worker's crons under `wrangler
// dev` (the Neon driver through the local WebSocket proxy) and by two `pgdrain start` processes, all
// on one database. First the Worker alone — it writes the subscriptions at its first drain, before
// any sidecar has started —, then all three at once, with cron invocations back to back. Whichever
// drainer claims a job runs it: what the test holds is that each event started exactly one job of
// each subscribed kind, that a rolled-back payment started nothing, and that every job of the
// failing kind went dead with exactly one dead letter.
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type FixtureWorker, startFixtureWorkerOnNeon } from './support/fixture-worker.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';

const SIDECAR = fileURLToPath(new URL('./fixtures/events/sidecar.ts', import.meta.url));
const WORKER_CONFIG = fileURLToPath(new URL('./fixtures/events/wrangler.toml', import.meta.url));
const TOKEN = 'events-test-token-0123456789';

let t: TestDatabase;
let dir: string;
let worker: FixtureWorker;
const sidecars: SidecarProcess[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  await t.query(`CREATE TABLE public.event_effects (job_id bigint NOT NULL, what text NOT NULL, ran_by text NOT NULL)`);
  await t.query('CREATE TABLE public.shop_orders (id int PRIMARY KEY, paid boolean NOT NULL DEFAULT false)');
  await t.query(`
    CREATE FUNCTION public.shop_orders_paid() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.paid AND NOT OLD.paid THEN
        PERFORM pgdrain.send_event('shop.paid', 'order:' || NEW.id, jsonb_build_object('orderId', NEW.id));
      END IF;
      RETURN NEW;
    END $$;
    CREATE TRIGGER shop_orders_paid AFTER UPDATE ON public.shop_orders FOR EACH ROW EXECUTE FUNCTION public.shop_orders_paid();`);
  dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-events-'));
  await chmod(dir, 0o755);
  worker = await startFixtureWorkerOnNeon({
    config: WORKER_CONFIG,
    databaseUrl: t.url,
    dir,
    env: { API_TOKEN: TOKEN, DRAIN_BUDGET_MS: '1500' },
  });
}, 60_000);
afterAll(async () => {
  for (const s of sidecars.splice(0)) {
    s.kill();
    await s.exited;
  }
  await worker?.stop();
  await t?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const effects = () =>
  t.query<{ what: string; n: number; ran_by: string[] }>(
    'SELECT what, count(*)::int AS n, array_agg(ran_by) AS ran_by FROM public.event_effects GROUP BY what',
  );
const pay = (ids: string) => t.query(`UPDATE public.shop_orders SET paid = true WHERE id ${ids}`);

it('events from a trigger on your own table, drained by the Worker and two `pgdrain start`: one job per event and subscriber, dead letters included', async () => {
  const orders = 40;
  await t.query(`INSERT INTO public.shop_orders (id) SELECT generate_series(1, ${orders})`);
  // Nothing is subscribed yet: no drainer has started. A payment now starts no job.
  await pay('= 40');
  expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`)).toEqual([{ n: 0 }]);
  await t.query('UPDATE public.shop_orders SET paid = false WHERE id = 40');

  // The Worker alone: its first cron invocation writes its kinds' subscriptions.
  await worker.scheduled();
  expect(
    await t.query(`SELECT event, kind FROM pgdrain.subscriptions WHERE event = 'shop.paid' ORDER BY kind`),
  ).toEqual([
    { event: 'shop.paid', kind: 'ev_broken' },
    { event: 'shop.paid', kind: 'ev_fulfil' },
  ]);
  await pay('<= 10');
  await t.query('BEGIN; UPDATE public.shop_orders SET paid = true WHERE id = 11; ROLLBACK;');
  const counted = async () => (await effects()).length;
  for (let i = 0; i < 20 && (await counted()) < 20; i++) await worker.scheduled();
  const alone = await effects();
  expect(alone).toHaveLength(20);
  expect(alone.every((e) => e.n === 1 && e.ran_by[0]!.startsWith('worker-'))).toBe(true);

  // Then the Worker's crons back to back and two sidecars at once, as payments keep coming.
  sidecars.push(await startSidecarProcess({ DATABASE_URL: t.url, API_TOKEN: TOKEN }, SIDECAR));
  sidecars.push(await startSidecarProcess({ DATABASE_URL: t.url, API_TOKEN: TOKEN }, SIDECAR));
  let crons = true;
  const cronLoop = (async () => {
    while (crons) await worker.scheduled();
  })();
  try {
    for (let id = 11; id <= orders; id += 5) await pay(`BETWEEN ${id} AND ${id + 4}`);
    await until(counted, (n) => n >= orders * 2, 60_000, 'every order fulfilled and every broken one dead-lettered');
    await new Promise((r) => setTimeout(r, 1_000)); // a duplicate would show by now
  } finally {
    crons = false;
    await cronLoop;
  }
  const rows = await effects();
  expect(rows).toHaveLength(orders * 2);
  expect(rows.filter((r) => r.n !== 1)).toEqual([]);
  const what = rows.map((r) => r.what);
  for (let id = 1; id <= orders; id++) {
    expect(what).toContain(`fulfil:${id}:shop.paid:order:${id}`);
    expect(what).toContain(`letter:ev_broken:${id}`);
  }
  expect(
    await t.query(
      `SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = 'ev_broken' AND status = 'dead' AND dead_letter_id IS NOT NULL`,
    ),
  ).toEqual([{ n: orders }]);
  // Each job is in exactly one state: the dead ones, and nothing else left.
  expect(await t.query(`SELECT kind, status, count(*)::int AS n FROM pgdrain.jobs GROUP BY 1, 2`)).toEqual([
    { kind: 'ev_broken', status: 'dead', n: orders },
  ]);
  const byWorker = rows.filter((r) => r.ran_by[0]!.startsWith('worker-')).length;
  console.log(`events process test: ${byWorker} of ${rows.length} jobs ran on the Worker, the rest on the sidecars`);
}, 120_000);
