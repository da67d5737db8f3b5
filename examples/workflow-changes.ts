// docs/workflows.md (Changing a workflow): a workflow changed while runs are parked — in place with
// step.patched(), or as a new version that runs beside the old one until the old runs are done.
import { z } from 'zod';
// In your app: import { defineWorkflow } from 'pgdrain';
import { defineWorkflow } from '../src/entry/index.ts';

/** Stands in for the warehouse: what each run did, in order. */
export const done: string[] = [];
const schema = z.object({ orderId: z.number().int() });
const delivered = (orderId: number) => ({ event: 'order.delivered', key: `order:${orderId}` });

// The first deploy.
export const fulfil = defineWorkflow({
  kind: 'fulfil',
  schema,
  run: async ({ orderId }, step) => {
    await step.run('reserve', () => done.push(`reserve ${orderId}`));
    await step.run('ship', () => done.push(`ship ${orderId}`));
    await step.waitForEvent('delivered', delivered(orderId));
  },
});

// 1. In place: a fraud check before shipping. Runs that shipped before this deploy take the old path
// (patched() is false for them), every run that reaches it fresh takes the new one.
export const fulfilPatched = defineWorkflow({
  kind: 'fulfil',
  schema,
  run: async ({ orderId }, step) => {
    await step.run('reserve', () => done.push(`reserve ${orderId}`));
    if (await step.patched('fraud-check')) await step.run('fraud-check', () => done.push(`check ${orderId}`));
    await step.run('ship', () => done.push(`ship ${orderId}`));
    await step.waitForEvent('delivered', delivered(orderId));
  },
});

// 2. A new version: new runs start on it; each run runs on the version it started on. Register both
// (jobs: [fulfilPatched, fulfilV2]) until no run of version 1 is left.
export const fulfilV2 = defineWorkflow({
  kind: 'fulfil',
  version: 2,
  schema,
  run: async ({ orderId }, step) => {
    await step.run('check-and-reserve', () => done.push(`check and reserve ${orderId}`));
    await step.run('ship', () => done.push(`ship ${orderId}`));
    await step.waitForEvent('delivered', delivered(orderId));
  },
});
