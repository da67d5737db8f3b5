// Events for durable workflows: POST /events answers every run waiting on the event and key
// (step.waitForEvent) and keeps the event for runs that reach their wait later. Sent through
// pgdrain.send_event() in its own transaction; an application that wants the event to commit with
// its own rows calls sendEvent(tx, …) in that transaction instead.
import type { Hono } from 'hono';
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
      checked = checkedEvent(input);
    } catch (error) {
      if (!(error instanceof EventValidationError)) throw error;
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
