// OpenTelemetry with the real SDK (a tracer provider, an in-memory exporter, the AsyncLocalStorage
// context manager): the enqueue's `create` span, the claim's `receive` span and the handler's
// `process` span, linked across processes through the job's stored trace context; and nothing at
// all loaded when the app has not registered anything. The Worker's side is
// test/workers/tracing.test.ts.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { drain } from '../src/drain/index.ts';
import { createApp } from '../src/http/app.ts';
import { JobRegistry, defineJob } from '../src/jobs/registry.ts';
import { enqueue, enqueueMany } from '../src/jobs/enqueue.ts';
import { defineWorkflow } from '../src/workflows/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { startSidecarProcess } from './support/sidecar-process.ts';
import { until } from './support/time.ts';

import { type ExportedSpan, registerTracing } from './support/tracing.ts';
import { resetQueue } from './support/harness.ts';

const SIDECAR = fileURLToPath(new URL('./fixtures/tracing/sidecar.ts', import.meta.url));
const UNTRACED = fileURLToPath(new URL('./fixtures/tracing/untraced.ts', import.meta.url));
const TOKEN = 'tracing-test-token-0123456789';

let t: TestDatabase;
let tracing: ReturnType<typeof registerTracing>;
beforeAll(async () => {
  t = await createTestDatabase();
  tracing = registerTracing();
});
afterAll(async () => {
  await tracing?.unregister();
  await t?.close();
});
beforeEach(async () => {
  await resetQueue(t);
  tracing.exporter.reset();
});

const byName = (spans: ExportedSpan[], name: string) => spans.filter((s) => s.name === name);
const one = (spans: ExportedSpan[], name: string) => {
  const found = byName(spans, name);
  expect(
    found.map((s) => s.name),
    `one span named ${name} among ${spans.map((s) => s.name).join(', ')}`,
  ).toEqual([name]);
  return found[0]!;
};

const mail = defineJob({
  kind: 'mail',
  schema: z.object({ fail: z.boolean().default(false) }),
  maxAttempts: 2,
  handler: async ({ fail }) => {
    await trace.getTracer('app').startActiveSpan('smtp', async (span) => span.end());
    if (fail) throw new Error('smtp said 451');
  },
});
const registry = new JobRegistry([mail]);

describe('in one process', () => {
  it('an enqueue inside a span is a create span; the handler runs in a process span under its claim, linked to it, with its own spans nested', async () => {
    const tracer = trace.getTracer('app');
    const job = await tracer.startActiveSpan('POST /checkout', async (request) => {
      try {
        return await enqueue(t.db, mail, { fail: false });
      } finally {
        request.end();
      }
    });
    expect(await drain(t.db, registry, { workerId: 'traced' })).toMatchObject({ completed: 1 });
    const spans = tracing.spans();
    const request = one(spans, 'POST /checkout');
    const create = one(spans, 'create mail');
    const receive = one(spans, 'receive mail');
    const processed = one(spans, 'process mail');
    const smtp = one(spans, 'smtp');
    expect(create).toMatchObject({ kind: SpanKind.PRODUCER, traceId: request.traceId, parentSpanId: request.spanId });
    expect(create.attributes).toEqual({
      'messaging.system': 'pgdrain',
      'messaging.operation.type': 'create',
      'messaging.operation.name': 'create',
      'messaging.destination.name': 'mail',
      'messaging.message.id': job.id,
    });
    expect(receive).toMatchObject({ kind: SpanKind.CLIENT, parentSpanId: null });
    expect(receive.attributes).toMatchObject({
      'messaging.operation.type': 'receive',
      'messaging.batch.message_count': 1,
    });
    expect(processed).toMatchObject({
      kind: SpanKind.CONSUMER,
      traceId: receive.traceId,
      parentSpanId: receive.spanId,
      links: [{ traceId: create.traceId, spanId: create.spanId }],
    });
    expect(processed.attributes).toMatchObject({
      'messaging.system': 'pgdrain',
      'messaging.operation.type': 'process',
      'messaging.destination.name': 'mail',
      'messaging.message.id': job.id,
      'pgdrain.job.attempt': 1,
      'pgdrain.job.outcome': 'completed',
    });
    expect(smtp).toMatchObject({ traceId: processed.traceId, parentSpanId: processed.spanId });
  });

  it('a failing attempt records the error on its process span and says whether it will be retried; the last one says dead', async () => {
    const [job] = await enqueueMany(t.db, mail, [{ fail: true }]);
    await drain(t.db, registry, { workerId: 'traced' });
    await t.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE id = $1`, [job!.id]);
    await drain(t.db, registry, { workerId: 'traced' });
    const attempts = byName(tracing.spans(), 'process mail');
    expect(
      attempts.map((s) => [s.attributes['pgdrain.job.attempt'], s.attributes['pgdrain.job.outcome'], s.status]),
    ).toEqual([
      [1, 'retry', { code: SpanStatusCode.ERROR, message: 'smtp said 451' }],
      [2, 'dead', { code: SpanStatusCode.ERROR, message: 'smtp said 451' }],
    ]);
    expect(attempts.every((s) => s.events.includes('exception'))).toBe(true);
    // No span was active at the enqueue: no create span, and nothing to link to.
    expect(byName(tracing.spans(), 'create mail')).toEqual([]);
    expect(attempts.every((s) => s.links.length === 0)).toBe(true);
    expect(await t.query(`SELECT traceparent FROM pgdrain.jobs WHERE id = $1`, [job!.id])).toEqual([
      { traceparent: null },
    ]);
  });

  it("a workflow step that runs is a step span under the run's process span, its own spans nested; a stored step has none; a sleep says parked and its attempt snoozed", async () => {
    const flow = defineWorkflow({
      kind: 'traced_flow',
      schema: z.object({}),
      maxAttempts: 1,
      run: async (_p, step) => {
        await step.run('fetch', async () => {
          await trace.getTracer('app').startActiveSpan('http GET', async (span) => span.end());
          return 1;
        });
        await step.sleep('nap', 0.05);
        await step.run('broken', () => {
          throw new Error('step said no');
        });
      },
    });
    const flows = new JobRegistry([flow]);
    await enqueue(t.db, flow, {});
    expect(await drain(t.db, flows, { workerId: 'traced' })).toMatchObject({ snoozed: 1 });
    await new Promise((r) => setTimeout(r, 80));
    await drain(t.db, flows, { workerId: 'traced' });
    const spans = tracing.spans();
    const [first, second] = byName(spans, 'process traced_flow');
    expect(first!.attributes['pgdrain.job.outcome']).toBe('snoozed');
    // Ran once, in the first attempt, under it, with the step's own span nested.
    const fetched = one(spans, 'step fetch');
    expect(fetched).toMatchObject({
      traceId: first!.traceId,
      parentSpanId: first!.spanId,
      attributes: { 'pgdrain.step.outcome': 'completed', 'pgdrain.step.name': 'fetch' },
    });
    expect(one(spans, 'http GET')).toMatchObject({ parentSpanId: fetched.spanId });
    const naps = byName(spans, 'step nap');
    // Parked in the first attempt; the second, claimed at the sleep's end, completes it.
    expect(naps.map((s) => [s.parentSpanId, s.attributes['pgdrain.step.outcome']])).toEqual([
      [first!.spanId, 'parked'],
      [second!.spanId, 'completed'],
    ]);
    const broken = one(spans, 'step broken');
    expect(broken).toMatchObject({
      parentSpanId: second!.spanId,
      status: { code: SpanStatusCode.ERROR, message: 'step said no' },
    });
    expect(broken.attributes['pgdrain.step.outcome']).toBe('failed');
  });

  it("POST /jobs continues the caller's trace from its traceparent header; pgdrain.enqueue() in SQL takes one", async () => {
    const app = createApp({ withDb: (fn) => fn(t.db), registry, apiToken: TOKEN });
    const caller = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const res = await app.request('/jobs', {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json', traceparent: caller },
      body: JSON.stringify({ kind: 'mail', payload: {} }),
    });
    expect(res.status).toBe(201);
    const { id } = (await res.json()) as { id: string };
    const fromSql = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    await t.query(`SELECT pgdrain.enqueue('mail', '{}', traceparent => $1)`, [fromSql]);
    await expect(t.query(`SELECT pgdrain.enqueue('mail', '{}', traceparent => 'not-a-trace')`)).rejects.toThrow(
      /traceparent 'not-a-trace' is not a W3C trace context/,
    );
    await drain(t.db, registry, { workerId: 'traced' });
    const spans = tracing.spans();
    const create = one(spans, 'create mail');
    expect(create).toMatchObject({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', parentSpanId: '00f067aa0ba902b7' });
    expect(create.attributes['messaging.message.id']).toBe(id);
    const links = byName(spans, 'process mail').map((s) => s.links[0]);
    expect(links).toEqual(
      expect.arrayContaining([
        { traceId: create.traceId, spanId: create.spanId },
        { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331' },
      ]),
    );
  });
});

describe('across processes', () => {
  it('the enqueue here and the handler in a `pgdrain start` process are one linked trace, exported by each process', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-tracing-'));
    const spansFile = path.join(dir, 'spans.json');
    const sidecar = await startSidecarProcess(
      { DATABASE_URL: t.url, API_TOKEN: TOKEN, SPANS_FILE: spansFile },
      SIDECAR,
    );
    try {
      const traced = defineJob({
        kind: 'traced',
        schema: z.object({ fail: z.boolean().default(false) }),
        handler: () => {},
      });
      const _job = await trace.getTracer('app').startActiveSpan('nightly import', async (span) => {
        try {
          return await context.with(trace.setSpan(context.active(), span), () =>
            enqueue(t.db, traced, { fail: false }),
          );
        } finally {
          span.end();
        }
      });
      await until(
        async () => (await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs`))[0]!.n,
        (n) => n === 0,
        15_000,
        'the job to run',
      );
    } finally {
      sidecar.child.kill('SIGTERM');
      await sidecar.exited;
    }
    const theirs = JSON.parse(await readFile(spansFile, 'utf8')) as ExportedSpan[];
    await rm(dir, { recursive: true, force: true });
    const create = one(tracing.spans(), 'create traced');
    const processed = one(theirs, 'process traced');
    expect(processed.links).toEqual([{ traceId: create.traceId, spanId: create.spanId }]);
    expect(processed.attributes).toMatchObject({ 'messaging.system': 'pgdrain', 'pgdrain.job.outcome': 'completed' });
    expect(one(theirs, 'send the receipt')).toMatchObject({
      parentSpanId: processed.spanId,
      traceId: processed.traceId,
    });
    expect(one(theirs, 'receive traced').spanId).toBe(processed.parentSpanId);
  }, 60_000);

  it('with nothing registered, a process that enqueues (in TypeScript and over HTTP) and drains never loads @opentelemetry/api', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [UNTRACED], {
      env: { ...process.env, DATABASE_URL: t.url },
    });
    expect(JSON.parse(stdout.trim().split('\n').at(-1)!)).toEqual({ posted: 201, completed: 2, loaded: [] });
  }, 30_000);
});
