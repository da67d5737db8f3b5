// docs/events.md: kinds that subscribe to an event, started by every event of that name — sent
// from TypeScript in your transaction, or from a trigger on your own table.
import { z } from 'zod';
// In your app: import { defineJob, defineWorkflow, sendEvent, type Db } from 'pgdrain';
import { defineJob, defineWorkflow, sendEvent, type Db } from '../src/entry/index.ts';

export const receipts: number[] = [];
export const ledger: number[] = [];

const paid = z.object({ orderId: z.number().int(), total: z.number() });

export const sendReceipt = defineJob({
  kind: 'send-receipt-on-paid', schema: paid, on: 'order.paid',              // one job per order.paid
  handler: async ({ orderId }) => void receipts.push(orderId),
});
export const updateLedger = defineJob({
  kind: 'update-ledger', schema: paid, on: ['order.paid', 'order.refunded'],  // one per event of each
  handler: async ({ orderId }, ctx) => {
    const started = await ctx.event();                                       // { id, event, key }
    if (started?.event === 'order.paid') ledger.push(orderId);
  },
});

/** Paid, in the transaction that marks the order paid: a rollback starts nothing. */
export const orderPaid = (db: Db, orderId: number, total: number) =>
  db.transaction((tx) => sendEvent(tx, { event: 'order.paid', key: `order:${orderId}`, payload: { orderId, total } }));

/** The same from SQL: a trigger on your own table sends it, whoever updates the row. */
export const PAID_TRIGGER = `
  CREATE FUNCTION orders_paid() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF NEW.paid AND NOT OLD.paid THEN
      PERFORM pgdrain.send_event('order.paid', 'order:' || NEW.id, jsonb_build_object('orderId', NEW.id, 'total', NEW.total));
    END IF;
    RETURN NEW;
  END $$;
  CREATE TRIGGER orders_paid AFTER UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION orders_paid();`;

/** A run an order.refunded event for its order cancels, wherever it is. */
export const fulfilOrder = defineWorkflow({
  kind: 'fulfil-order',
  schema: z.object({ orderId: z.number().int() }),
  cancelOn: [{ event: 'order.refunded', key: (payload) => `order:${payload.orderId}` }],
  keepCompletedSeconds: 86_400,                                          // kept, cancelled or done
  run: async ({ orderId }, step) => {
    await step.sleep('wait-for-stock', 3_600);
    return step.run('ship', () => ({ orderId, shipped: true }));
  },
});
