// Events that start work (npm run bench -- --only events): events per second sent through
// pgdrain.send_event() with 0, 1 and 10 kinds subscribed, by 4 clients at once, each event its own
// statement and transaction (as a trigger or POST /events sends them). With 10 subscribers each
// event is one statement that inserts 10 jobs.
import pg from 'pg';

export interface EventsTrial {
  subscribers: number;
  events: number;
  seconds: number;
  eventsPerSecond: number;
  jobs: number;
}

export async function benchEvents(url: string, subscribers: number, events: number): Promise<EventsTrial> {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  try {
    await pool.query('DELETE FROM pgdrain.subscriptions');
    await pool.query('TRUNCATE pgdrain.jobs, pgdrain.events');
    await pool.query(
      `INSERT INTO pgdrain.subscriptions (event, kind) SELECT 'bench.event', 'bench_sub_' || i FROM generate_series(1, $1::int) i`,
      [subscribers],
    );
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let i = next++; i < events; i = next++)
          await pool.query(`SELECT pgdrain.send_event('bench.event', $1, $2::jsonb)`, [
            `k:${i}`,
            JSON.stringify({ i }),
          ]);
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const [{ n }] = (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pgdrain.jobs')).rows as [
      { n: number },
    ];
    return { subscribers, events, seconds, eventsPerSecond: events / seconds, jobs: n };
  } finally {
    await pool.end();
  }
}
