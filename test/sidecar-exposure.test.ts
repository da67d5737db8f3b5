// What someone holding a token, or only a socket, can make a `pgdrain start` process do — tried on
// the real process: point the webhook kind at addresses the allow-list does not name (through a
// DNS the test controls: test/fixtures/fake-dns.ts), make lists expensive with large payloads, make
// validation expensive with many values, and hold connections open by sending slowly.
import http from 'node:http';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type SidecarProcess, startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';
import { resetQueue } from './support/harness.ts';
import { startTcpProxy } from './support/tcp-proxy.ts';

const FAKE_DNS = fileURLToPath(new URL('./fixtures/fake-dns.ts', import.meta.url));
const TOKEN = 'exposure-test-token-0123456789';
const auth = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' };

let t: TestDatabase;
const running: SidecarProcess[] = [];
const start = async (env: Record<string, string>) => {
  const p = await startSidecarProcess({ DATABASE_URL: t.url, API_TOKEN: TOKEN, POLL_INTERVAL_MS: '200', ...env });
  running.push(p);
  return p;
};
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());
beforeEach(() => resetQueue(t));
afterEach(async () => {
  for (const p of running.splice(0)) {
    p.kill();
    await p.exited;
  }
});

describe('webhooks reach only what the allow-list names, after DNS', () => {
  let receiver: http.Server;
  let other: http.Server;
  let port: number;
  const received: string[] = [];
  beforeAll(async () => {
    receiver = http.createServer((req, res) => {
      received.push(`127.0.0.1${req.url}`);
      res.writeHead(204).end();
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    port = (receiver.address() as net.AddressInfo).port;
    other = http.createServer((req, res) => {
      received.push(`127.0.0.2${req.url}`);
      res.writeHead(204).end();
    });
    await new Promise<void>((r) => other.listen(port, '127.0.0.2', r));
  });
  afterAll(async () => {
    await new Promise((r) => receiver?.close(r));
    await new Promise((r) => other?.close(r));
  });
  beforeEach(() => void (received.length = 0));

  const withDns = (allowed: string) => ({
    WEBHOOK_ALLOWED_HOSTS: allowed,
    NODE_OPTIONS: `--import=${FAKE_DNS}`,
    PGDRAIN_TEST_DNS: JSON.stringify({ vm: ['127.0.0.1'], 'rebind.test': ['127.0.0.2', '127.0.0.1'] }),
  });
  const deliver = async (p: SidecarProcess, url: string) => {
    const res = await fetch(`${p.url}/jobs`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ kind: 'webhook', payload: { url } }),
    });
    expect(res.status).toBe(201);
    const { id } = (await res.json()) as { id: string };
    return until(
      async () => (await t.query(`SELECT status, last_error FROM pgdrain.jobs WHERE id = $1`, [id]))[0],
      (row) => row === undefined || (row.status !== 'pending' && row.status !== 'running'),
      10_000,
      'the delivery',
    );
  };

  it('a listed name that resolves to 127.0.0.1 is refused, with nothing sent; listing 127.0.0.1 lets it through', async () => {
    const strict = await start(withDns(`vm:${port}`));
    expect(await deliver(strict, `http://vm:${port}/internal-secret`)).toEqual({
      status: 'dead',
      last_error: expect.stringMatching(/^PermanentJobError: host vm resolved to an address that is not allowed/),
    });
    expect(received).toEqual([]);
    strict.kill();
    await strict.exited;
    const open = await start(withDns(`vm:${port}, 127.0.0.1`));
    expect(await deliver(open, `http://vm:${port}/allowed`)).toBeUndefined();
    expect(received).toEqual(['127.0.0.1/allowed']);
  });

  it('a name whose answer changes between lookups (DNS rebinding) is dialled at the address that was checked', async () => {
    const p = await start(withDns(`rebind.test:${port}, 127.0.0.2`));
    expect(await deliver(p, `http://rebind.test:${port}/hook`)).toBeUndefined();
    expect(received).toEqual(['127.0.0.2/hook']);
  });

  it('a port the list does not name is refused at enqueue, before anything is stored', async () => {
    const p = await start(withDns('hooks.example.com'));
    const res = await fetch(`${p.url}/jobs`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ kind: 'webhook', payload: { url: 'http://hooks.example.com:25901/' } }),
    });
    expect(res.status).toBe(422);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain(
      'port 25901 of host hooks.example.com is not allowed',
    );
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
  });
});

describe('responses and CPU an enqueuer can make expensive', () => {
  it('a list of jobs with 1 MB payloads answers their size and a preview, not the payloads; the job itself has its payload', async () => {
    const p = await start({});
    // Pending for an hour: what the dashboard lists every 5 s.
    await t.query(
      `SELECT pgdrain.enqueue('noop', jsonb_build_object('blob', repeat('x', 1000000), 'n', n), now() + interval '1 hour') FROM generate_series(1, 19) AS n`,
    );
    const res = await fetch(`${p.url}/jobs?status=pending&limit=50`, { headers: auth });
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text.length).toBeLessThan(30_000);
    const { jobs } = JSON.parse(text) as {
      jobs: { id: string; payloadBytes: number; payloadPreview: string; payload?: unknown }[];
    };
    expect(jobs).toHaveLength(19);
    for (const job of jobs) {
      expect(job.payload).toBeUndefined();
      expect(job.payloadBytes).toBeGreaterThan(1_000_000);
      expect(job.payloadPreview).toMatch(/^\{"n": \d+, "blob": "xxx.*…$/);
      expect(job.payloadPreview.length).toBe(120);
    }
    const one = (await (await fetch(`${p.url}/jobs/${jobs[0]!.id}`, { headers: auth })).json()) as {
      payload: { blob: string };
    };
    expect(one.payload.blob).toHaveLength(1_000_000);
  });

  it('a body of more than 100,000 JSON values is refused at once, naming the bound; nothing is stored', async () => {
    const p = await start({});
    const many = `{"kind":"noop","payload":[${Array.from({ length: 330_000 }, () => '{}').join(',')}]}`;
    const res = await fetch(`${p.url}/jobs`, { method: 'POST', headers: auth, body: many });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      error: { code: 'invalid_request', message: '(body): holds more than 100000 JSON values' },
    });
    const fine = await fetch(`${p.url}/jobs`, {
      method: 'POST',
      headers: auth,
      body: `{"kind":"noop","payload":[${Array.from({ length: 90_000 }, () => '0').join(',')}]}`,
    });
    expect(fine.status).toBe(201);
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 1 }]);
  });

  it('a batch of dependencies is bounded (10,000 in all), the legitimate 100 × 100 is stored, and one whose client left is rolled back', async () => {
    const p = await start({});
    const batch = (jobs: unknown[], signal?: AbortSignal) =>
      fetch(`${p.url}/jobs/batch`, { method: 'POST', headers: auth, body: JSON.stringify({ jobs }), signal });
    const parents = (await (
      await batch(Array.from({ length: 100 }, (_, i) => ({ kind: 'noop', payload: i, runAt: '2099-01-01T00:00:00Z' })))
    ).json()) as { ids: string[] };
    const after = parents.ids;
    const stored = async () => Number((await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs'))[0]!.n);
    // 950 jobs each after the same 100: 95,000 pairs, refused before anything is locked.
    const tooMany = await batch(Array.from({ length: 950 }, (_, i) => ({ kind: 'noop', payload: i, after })));
    expect(tooMany.status).toBe(400);
    expect(((await tooMany.json()) as { error: { message: string } }).error.message).toMatch(
      /wait for at most 10000 jobs in all/,
    );
    expect(await stored()).toBe(100);
    // A client that goes away while its batch goes one by one: nothing of it is stored.
    const leaving = new AbortController();
    const left = batch(
      Array.from({ length: 100 }, (_, i) => ({ kind: 'noop', payload: i, after })),
      leaving.signal,
    ).catch((error: Error) => error.name);
    setTimeout(() => leaving.abort(), 30);
    expect(await left).toBe('AbortError');
    await until(
      () =>
        t.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'`,
        ),
      (rows) => rows[0]!.n === 0,
      5_000,
      'the abandoned batch to end',
    );
    expect(await stored()).toBe(100);
    // 100 jobs after 100: stored, with their 10,000 dependencies.
    const legitimate = await batch(Array.from({ length: 100 }, (_, i) => ({ kind: 'noop', payload: i, after })));
    expect(legitimate.status).toBe(201);
    expect(await stored()).toBe(200);
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.job_dependencies')).toEqual([{ n: 10_000 }]);
  });
});

describe('input that would change or break silently', () => {
  it('a number JSON cannot hold (1e400) is refused with a 400 naming the field, in a job and in an event; nothing is stored', async () => {
    const p = await start({});
    const job = await fetch(`${p.url}/jobs`, {
      method: 'POST',
      headers: auth,
      body: '{"kind":"noop","payload":{"total":1e400}}',
    });
    expect(job.status).toBe(400);
    expect(((await job.json()) as { error: { message: string } }).error.message).toMatch(
      /^payload\.total: a number too large for JSON to hold/,
    );
    const event = await fetch(`${p.url}/events`, {
      method: 'POST',
      headers: auth,
      body: '{"event":"order.paid","key":"o1","payload":{"n":[-1e999]}}',
    });
    expect(event.status).toBe(400);
    expect(((await event.json()) as { error: { message: string } }).error.message).toMatch(
      /^payload\.n\[0\]: a number too large/,
    );
    expect(
      await t.query(
        'SELECT (SELECT count(*) FROM pgdrain.jobs)::int AS jobs, (SELECT count(*) FROM pgdrain.events)::int AS events',
      ),
    ).toEqual([{ jobs: 0, events: 0 }]);
  });

  it('a key in a URL is checked as a key in a body; every key counts characters as PostgreSQL does', async () => {
    const p = await start({});
    // A kind only other drainers register (this one cannot see its limits, so takes the row as it is).
    await t.query(`SELECT pgdrain.enqueue('elsewhere', '{}', run_at => now() + interval '1 hour')`);
    const limits = (key: string, method = 'PUT', kind = 'elsewhere') =>
      fetch(`${p.url}/kinds/${kind}/groups/${encodeURIComponent(key)}/limits`, {
        method,
        headers: auth,
        ...(method === 'PUT' ? { body: '{"concurrency":2}' } : {}),
      });
    for (const method of ['PUT', 'DELETE']) {
      const res = await limits('a\u0000b', method);
      expect(res.status, method).toBe(400);
      expect(await res.json()).toEqual({
        error: {
          code: 'invalid_request',
          message: 'groupKey: contains the NUL character (\\u0000), which PostgreSQL cannot store',
        },
      });
    }
    // 101 emoji are 101 characters (202 UTF-16 units): a group key that enqueues takes limits too.
    const emoji = '\u{1F600}'.repeat(101);
    const enqueued = await fetch(`${p.url}/jobs`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ kind: 'noop', payload: {}, groupKey: emoji }),
    });
    expect(enqueued.status).toBe(201);
    expect((await limits(emoji)).status).toBe(200);
    expect((await limits('\u{1F600}'.repeat(201))).status).toBe(400);
    // Dedupe keys and event keys: the same bound, counted the same way.
    const long = '\u{1F600}'.repeat(251);
    const deduped = await fetch(`${p.url}/jobs`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ kind: 'noop', payload: {}, dedupeKey: long }),
    });
    expect(deduped.status).toBe(201);
    const sent = await fetch(`${p.url}/events`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ event: 'order.paid', key: long }),
    });
    expect(sent.status).toBe(201);
    expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.group_limits WHERE group_key = $1`, [emoji])).toEqual([
      { n: 1 },
    ]);
  });

  it('limits for a key of a kind claimed without limits are refused, saying why: the row would do nothing', async () => {
    const p = await start({});
    for (const kind of ['noop', 'webhook', 'record']) {
      const res = await fetch(`${p.url}/kinds/${kind}/groups/tenant-1/limits`, {
        method: 'PUT',
        headers: auth,
        body: '{"concurrency":2}',
      });
      expect(res.status, kind).toBe(422);
      const { error } = (await res.json()) as { error: { code: string; message: string } };
      expect(error.code).toBe('not_limited');
      expect(error.message).toMatch(new RegExp(`^kind ${kind} is claimed without limits`));
    }
    expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.group_limits WHERE group_key = 'tenant-1'`)).toEqual([
      { n: 0 },
    ]);
  });
});

describe('connections a client can hold', () => {
  /** A connection that sends `head` and then a byte a second; resolves when the server closes it. */
  const trickle = (port: number, head: string) =>
    new Promise<{ closedAfterMs: number; answer: string }>((resolve) => {
      const started = Date.now();
      const socket = net.connect(port, '127.0.0.1', () => socket.write(head));
      let answer = '';
      socket.on('data', (d) => (answer += d));
      const timer = setInterval(() => socket.writable && socket.write('x'), 1_000);
      socket.on('error', () => {});
      socket.on('close', () => {
        clearInterval(timer);
        resolve({ closedAfterMs: Date.now() - started, answer });
      });
    });

  it('a client that hangs up mid-body is no error of the server: nothing at level 50, nothing stored', async () => {
    const p = await start({});
    const port = Number(new URL(p.url).port);
    for (let i = 0; i < 5; i++) {
      await new Promise<void>((resolve) => {
        const s = net.connect(port, '127.0.0.1', () => {
          s.write(
            `POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"kind":"noop",`,
          );
          setTimeout(() => {
            s.resetAndDestroy();
            resolve();
          }, 100);
        });
        s.on('error', () => {});
      });
    }
    expect((await fetch(`${p.url}/healthz`)).status).toBe(200);
    await new Promise((r) => setTimeout(r, 300));
    expect(
      p
        .stdout()
        .split('\n')
        .filter((line) => line.includes('"level":50')),
    ).toEqual([]);
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
  });

  it('headers and a body sent a byte a second are cut off at their timeouts; past the cap an idle socket makes room for a probe, and only a server full of requests refuses one', async () => {
    const p = await start({
      HTTP_HEADERS_TIMEOUT_MS: '1500',
      HTTP_REQUEST_TIMEOUT_MS: '3000',
      HTTP_MAX_CONNECTIONS: '4',
    });
    const port = Number(new URL(p.url).port);
    const [headers, body] = await Promise.all([
      trickle(port, 'POST /jobs HTTP/1.1\r\nHost: x\r\nX-Slow: '),
      trickle(
        port,
        `POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"kind":"noop","payload":"`,
      ),
    ]);
    expect(headers.closedAfterMs).toBeLessThan(1_500 + 2_500);
    expect(body.closedAfterMs).toBeGreaterThanOrEqual(1_500);
    expect(body.closedAfterMs).toBeLessThan(3_000 + 2_500);
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);

    // A health probe on a connection of its own (no keep-alive pool): its status, or 'closed'.
    const probe = () =>
      new Promise<number | 'closed'>((resolve) => {
        const req = http.get({ host: '127.0.0.1', port, path: '/healthz', agent: false }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('error', () => resolve('closed'));
      });
    const connect = () =>
      new Promise<{ socket: net.Socket; closed: () => boolean }>((resolve) => {
        let closed = false;
        const socket = net.connect(port, '127.0.0.1', () => resolve({ socket, closed: () => closed }));
        socket.on('error', () => {});
        socket.on('close', () => (closed = true));
      });
    // Four idle sockets fill the cap: a probe is still answered, the oldest idle socket making room.
    const idle: { socket: net.Socket; closed: () => boolean }[] = [];
    for (let i = 0; i < 4; i++) idle.push(await connect());
    await new Promise((r) => setTimeout(r, 200));
    expect(await probe()).toBe(200);
    await until(
      async () => idle.map((c) => c.closed()),
      (closed) => closed[0] === true,
      2_000,
      'the oldest idle socket closed',
    );
    expect(idle.slice(1).map((c) => c.closed())).toEqual([false, false, false]);
    for (const c of idle) c.socket.destroy();
    // Four requests under way (their bodies still arriving) fill it: nothing to close, a fifth connection is refused.
    const busy: { socket: net.Socket; closed: () => boolean }[] = [];
    for (let i = 0; i < 4; i++) {
      const c = await connect();
      c.socket.write(
        `POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`,
      );
      busy.push(c);
    }
    await new Promise((r) => setTimeout(r, 200));
    expect(await probe()).toBe('closed');
    expect(busy.map((c) => c.closed())).toEqual([false, false, false, false]);
    for (const c of busy) c.socket.destroy();
    await until(probe, (s) => s === 200, 5_000, 'the API after the busy connections went');
  });

  it('keep-alive clients polling /healthz do not hold the cap: a new connection is still answered, enqueue included', async () => {
    const p = await start({ HTTP_MAX_CONNECTIONS: '20' });
    const port = Number(new URL(p.url).port);
    // 20 keep-alive clients without a token, each asking for /healthz every 300 ms on its own socket.
    const agents = Array.from({ length: 20 }, () => new http.Agent({ keepAlive: true, maxSockets: 1 }));
    let polling = true;
    const ask = (agent: http.Agent) =>
      new Promise<void>((resolve) => {
        const req = http.get({ host: '127.0.0.1', port, path: '/healthz', agent }, (res) => {
          res.resume();
          res.on('end', resolve);
        });
        req.on('error', () => resolve());
      });
    const pollers = agents.map(async (agent) => {
      while (polling) {
        await ask(agent);
        await new Promise((r) => setTimeout(r, 300));
      }
    });
    try {
      await new Promise((r) => setTimeout(r, 1_000));
      for (let i = 0; i < 10; i++) {
        const health = await fetch(`${p.url}/healthz`, { headers: { connection: 'close' } });
        expect(health.status).toBe(200);
        const enqueued = await fetch(`${p.url}/jobs`, {
          method: 'POST',
          headers: { ...auth, connection: 'close' },
          body: JSON.stringify({ kind: 'noop', payload: { i } }),
        });
        expect(enqueued.status).toBe(201);
      }
      // The jobs ran, and the log says so at its default level: one line, not one per job.
      await p.waitForOutput(/"msg":"jobs settled: \d+ completed/, 15_000);
    } finally {
      polling = false;
      await Promise.all(pollers);
      for (const agent of agents) agent.destroy();
    }
  });
});

describe('what a delivery, a refusal or an outage may leave behind', () => {
  it('a receiver that answers 200 and streams its body forever: the job completes and the socket is closed at once', async () => {
    let closedAt = 0;
    let sentBytes = 0;
    const streamer = http.createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(64 * 1024, 120);
      const timer = setInterval(() => {
        sentBytes += chunk.length;
        res.write(chunk);
      }, 20);
      res.on('close', () => {
        clearInterval(timer);
        closedAt = Date.now();
      });
    });
    await new Promise<void>((r) => streamer.listen(0, '127.0.0.1', r));
    const port = (streamer.address() as net.AddressInfo).port;
    try {
      const p = await start({ WEBHOOK_ALLOWED_HOSTS: `127.0.0.1:${port}` });
      const res = await fetch(`${p.url}/jobs`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({ kind: 'webhook', payload: { url: `http://127.0.0.1:${port}/stream` } }),
      });
      expect(res.status).toBe(201);
      const { id } = (await res.json()) as { id: string };
      await until(
        () => t.query('SELECT 1 FROM pgdrain.jobs WHERE id = $1', [id]),
        (rows) => rows.length === 0,
        10_000,
        'the delivery to complete',
      );
      const completedAt = Date.now();
      await until(
        async () => closedAt,
        (at) => at > 0,
        2_000,
        "the receiver's socket to be closed",
      );
      expect(closedAt - completedAt).toBeLessThan(1_000);
      expect(sentBytes).toBeLessThan(10 * 1024 * 1024);
    } finally {
      streamer.closeAllConnections();
      await new Promise((r) => streamer.close(r));
    }
  });

  it('an event PostgreSQL prints above 64 KiB (but compact below): 413, nothing stored, nothing of it logged', async () => {
    const p = await start({});
    // 4,000 keys: compact JSON below 65,536 bytes, PostgreSQL's text (", " and ": ") above it.
    const payload = {
      ...Object.fromEntries(Array.from({ length: 4_000 }, (_, i) => [`k${i + 1000}`, `v${i + 1000}`])),
      note: 'SECRET-PAYLOAD-7',
    };
    expect(JSON.stringify(payload).length).toBeLessThan(65_536);
    const res = await fetch(`${p.url}/events`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ event: 'order.paid', key: 'o:1', payload }),
    });
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'payload_too_large',
      message: expect.stringMatching(/bytes of JSON as PostgreSQL prints it.*at most 65536/),
    });
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.events')).toEqual([{ n: 0 }]);
    await new Promise((r) => setTimeout(r, 200));
    expect(p.stdout()).not.toContain('SECRET-PAYLOAD');
  });

  it("with the database down, a webhook's secret header answers 503 and appears in no log line", async () => {
    const proxy = await startTcpProxy({ host: new URL(t.url).hostname, port: Number(new URL(t.url).port) });
    try {
      const p = await start({ DATABASE_URL: proxy.urlFor(t.url), WEBHOOK_ALLOWED_HOSTS: 'hooks.example.com' });
      await proxy.close();
      const res = await fetch(`${p.url}/jobs`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({
          kind: 'webhook',
          payload: {
            url: 'https://hooks.example.com/x',
            headers: { Authorization: 'Bearer RECEIVER-SECRET-HDR-42' },
            body: { note: 'BODY-SECRET-43' },
          },
        }),
      });
      expect(res.status).toBe(503);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('database_unavailable');
      await p.waitForOutput(/request failed|database/, 5_000).catch(() => '');
      await new Promise((r) => setTimeout(r, 300));
      expect(p.stdout()).not.toMatch(/RECEIVER-SECRET-HDR-42|BODY-SECRET-43|params:/);
    } finally {
      await proxy.close().catch(() => {});
    }
  });
});
