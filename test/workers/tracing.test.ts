// OpenTelemetry in workerd, with the real SDK and an in-memory exporter: a Worker created with
// `openTelemetry` (a Worker cannot load the API by name) traces POST /jobs from the caller's
// traceparent header and its cron's handlers, linked, on both of its database paths.
import * as openTelemetry from '@opentelemetry/api';
import { createExecutionContext, createScheduledController, env, waitOnExecutionContext } from 'cloudflare:test';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineJob } from '../../src/jobs/index.ts';
import { useOpenTelemetry } from '../../src/open-telemetry.ts';
import { createWorker, type Env } from '../../src/worker/create-worker.ts';
import { type Harness, resetQueue } from '../support/harness.ts';
import { type ExportedSpan, registerTracing } from '../support/tracing.ts';
import { createHyperdriveHarness } from './hyperdrive-harness.ts';
import { createNeonHarness } from './neon-harness.ts';

const receipt = defineJob({
  kind: 'receipt',
  schema: z.object({ orderId: z.number() }),
  handler: async ({ orderId }) => {
    await openTelemetry.trace.getTracer('app').startActiveSpan('render receipt', async (span) => {
      span.setAttribute('order', orderId);
      span.end();
    });
  },
});
const worker = createWorker({ jobs: [receipt], openTelemetry });

const PATHS = [
  {
    name: 'Neon',
    database: { DATABASE_URL: env.TRACING_DATABASE_URL },
    harness: () => createNeonHarness(env.TRACING_DATABASE_URL),
  },
  {
    name: 'Hyperdrive',
    database: { HYPERDRIVE: env.HYPERDRIVE_TRACING, DATABASE_URL: undefined },
    harness: () => createHyperdriveHarness(env.HYPERDRIVE_TRACING),
  },
] as const;

let tracing: ReturnType<typeof registerTracing>;
beforeAll(() => {
  tracing = registerTracing();
});
afterAll(async () => {
  useOpenTelemetry(null);
  await tracing.unregister();
});

for (const path of PATHS) {
  describe(`tracing in workerd, ${path.name} path`, () => {
    let h: Harness;
    const testEnv = (): Env => ({ ...(env as unknown as Env), ...path.database });
    beforeAll(async () => {
      h = await path.harness();
    });
    afterAll(() => h?.close());
    beforeEach(async () => {
      await resetQueue(h);
      tracing.exporter.reset();
    });

    it("POST /jobs continues the caller's trace; the cron's process span is linked to it, its handler's span nested", async () => {
      const caller = '00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01';
      const ctx = createExecutionContext();
      const res = await worker.fetch(
        new Request('http://worker/jobs', {
          method: 'POST',
          headers: {
            authorization: `Bearer ${env.API_TOKEN}`,
            'content-type': 'application/json',
            traceparent: caller,
          },
          body: JSON.stringify({ kind: 'receipt', payload: { orderId: 7 } }),
        }),
        testEnv(),
        ctx as never,
      );
      await waitOnExecutionContext(ctx);
      expect(res.status).toBe(201);
      const { id } = (await res.json()) as { id: string };
      expect(await h.query(`SELECT traceparent FROM pgdrain.jobs WHERE id = $1`, [id])).toEqual([
        { traceparent: expect.stringMatching(/^00-5bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-01$/) },
      ]);

      const sctx = createExecutionContext();
      await worker.scheduled(
        createScheduledController({ cron: '* * * * *', scheduledTime: Date.now() }) as never,
        testEnv(),
        sctx,
      );
      await waitOnExecutionContext(sctx);
      const spans = tracing.spans();
      const named = (name: string): ExportedSpan => {
        const found = spans.filter((s) => s.name === name);
        expect(found, `${name} among ${spans.map((s) => s.name).join(', ')}`).toHaveLength(1);
        return found[0]!;
      };
      const create = named('create receipt');
      const processed = named('process receipt');
      expect(create).toMatchObject({
        traceId: '5bf92f3577b34da6a3ce929d0e0e4736',
        parentSpanId: '10f067aa0ba902b7',
        kind: openTelemetry.SpanKind.PRODUCER,
      });
      expect(create.attributes).toMatchObject({
        'messaging.system': 'pgdrain',
        'messaging.destination.name': 'receipt',
        'messaging.message.id': id,
      });
      expect(processed).toMatchObject({
        kind: openTelemetry.SpanKind.CONSUMER,
        links: [{ traceId: create.traceId, spanId: create.spanId }],
      });
      expect(processed.attributes).toMatchObject({
        'messaging.message.id': id,
        'pgdrain.job.outcome': 'completed',
        'pgdrain.job.attempt': 1,
      });
      expect(named('receive receipt').spanId).toBe(processed.parentSpanId);
      expect(named('render receipt')).toMatchObject({ traceId: processed.traceId, parentSpanId: processed.spanId });
    });
  });
}
