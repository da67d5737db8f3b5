// Events: POST /events starts a job of every kind subscribed to it (`on`; a payload one of this
// app's subscribers refuses is a 422 naming it, and nothing is sent), answers every run waiting on
// the event and key (step.waitForEvent) and keeps the event for runs that reach their wait later. Sent through
// pgdrain.send_event() in its own transaction; an application that wants the event to commit with
// its own rows calls sendEvent(tx, …) in that transaction instead.
import type { Hono } from 'hono';
import { eventsOf } from '../../jobs/definition.ts';
import { EventValidationError, checkedEvent } from '../../workflows/events.ts';
import { sendEvent } from '../../queries/index.ts';
import { access } from '../auth.ts';
import type { AppEnv } from '../context.ts';
import { eventInput } from '../contract.ts';
import { ApiError } from '../errors.ts';
import { parseInput, readJson } from '../input.ts';
import { describe } from '../openapi.ts';

export function eventRoutes(app: Hono<AppEnv>): void {
  app.post('/events', describe.sendEvent, access('enqueue'), async (c) => {
    const input = parseInput(eventInput, await readJson(c), '');
    let checked: ReturnType<typeof checkedEvent>;
    try {
      // Checked against the schemas of this app's kinds that subscribe to it.
      const { registry } = c.var.api;
      const subscribers = registry.kinds().flatMap((kind) => {
        const definition = registry.get(kind)!;
        return eventsOf(definition).includes(input.event) ? [definition] : [];
      });
      checked = checkedEvent(input, subscribers);
    } catch (error) {
      if (!(error instanceof EventValidationError)) throw error;
      if (error.subscriber !== undefined) throw new ApiError(422, 'invalid_payload', error.message);
      throw new ApiError(
        error.tooLarge ? 413 : 400,
        error.tooLarge ? 'payload_too_large' : 'invalid_request',
        error.message,
      );
    }
    const id = await c.var.api.withDb((db) => sendEvent(db, checked));
    // Runs it answered are pending now: whoever drains is told (the Worker's clock).
    c.var.api.jobsDue?.(new Date());
    return c.json({ id, event: checked.event, key: checked.key }, 201);
  });
}
