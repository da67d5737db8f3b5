// Events: what a workflow's step.waitForEvent waits for. sendEvent() runs pgdrain.send_event() in
// the caller's database or transaction — the event is stored and its waiters are answered and made
// pending in that transaction, so a rollback sends nothing and wakes nothing. The same bounds hold
// for every way in (TypeScript, SQL, POST /events, the CLI): one check, eventProblem().
import { KIND_PATTERN, KIND_PATTERN_MESSAGE, MAX_DEDUPE_KEY_LENGTH, keyProblem } from '../db/constants.ts';
import { longerThan, toJson, utf8Length } from '../json.ts';
import { type Db, sendEvent as sendEventQuery } from '../queries/index.ts';
import { PgdrainError } from '../errors.ts';
import { type JobDefinition, definedSubscribersOf, describeIssues } from '../jobs/definition.ts';

/** An event's payload is at most this many bytes of JSON (as a job's result). */
export const MAX_EVENT_PAYLOAD_BYTES = 64 * 1024;
/** An event's key is 1 to this many characters (as a dedupe key). */
export const MAX_EVENT_KEY_LENGTH = MAX_DEDUPE_KEY_LENGTH;

export interface WorkflowEvent {
  /** Its name, like a job kind's: 1-100 letters, digits, or _ . : - */
  event: string;
  /** Which waits it answers (a user, an order): 1-500 characters. */
  key: string;
  /** What step.waitForEvent returns (JSON, at most 64 KiB). Default `{}`. */
  payload?: unknown;
  /** Its sender's id (a webhook's delivery id), 1-500 characters: sent again with the same name and
   * id while the first is kept (EVENT_RETENTION_SECONDS), it is dropped — nothing is answered or
   * started twice — and the first's id is returned. */
  id?: string;
}

/** Thrown by sendEvent when the event is out of bounds; `field` names what was wrong. Nothing is sent. */
export class EventValidationError extends PgdrainError {
  override name = 'EventValidationError';
  readonly code = 'invalid_event';
  readonly field: 'event' | 'key' | 'payload' | 'id';
  /** The payload is too large (HTTP 413) rather than malformed (400). */
  readonly tooLarge: boolean;
  /** The subscribed kind whose schema refused the payload, when that is what was wrong. */
  readonly subscriber: string | undefined;
  constructor(field: EventValidationError['field'], message: string, tooLarge = false, subscriber?: string) {
    super(message);
    this.field = field;
    this.tooLarge = tooLarge;
    this.subscriber = subscriber;
  }
}

/** The event's payload as JSON text, or throws EventValidationError naming the field — or, when a
 * kind that subscribes to it (`subscribers`: default, those defined in this process) refuses its
 * payload, naming that kind and the field, before anything is sent. */
export function checkedEvent(
  event: WorkflowEvent,
  subscribers: readonly JobDefinition<any>[] = typeof event?.event === 'string'
    ? definedSubscribersOf(event.event)
    : [],
): { event: string; key: string; payloadJson: string; id?: string } {
  if (typeof event.event !== 'string' || !KIND_PATTERN.test(event.event))
    throw new EventValidationError('event', `event: ${KIND_PATTERN_MESSAGE}`);
  const keyIssue = keyProblem(event.key, MAX_EVENT_KEY_LENGTH);
  if (keyIssue) throw new EventValidationError('key', `key ${keyIssue}`);
  const idIssue = event.id === undefined ? null : keyProblem(event.id, MAX_EVENT_KEY_LENGTH);
  if (idIssue) throw new EventValidationError('id', `id ${idIssue}`);
  let payloadJson: string;
  try {
    payloadJson = toJson(event.payload === undefined ? {} : event.payload, 'payload') ?? '{}';
  } catch (error) {
    throw new EventValidationError('payload', (error as Error).message);
  }
  if (longerThan(payloadJson, MAX_EVENT_PAYLOAD_BYTES)) {
    throw new EventValidationError(
      'payload',
      `payload is ${utf8Length(payloadJson)} bytes of JSON; an event carries at most ${MAX_EVENT_PAYLOAD_BYTES}`,
      true,
    );
  }
  for (const subscriber of subscribers) {
    const parsed = subscriber.schema.safeParse(event.payload === undefined ? {} : event.payload);
    if (!parsed.success)
      throw new EventValidationError(
        'payload',
        `payload refused by subscriber ${subscriber.kind}: ${describeIssues(parsed.error)}`,
        false,
        subscriber.kind,
      );
  }
  return { event: event.event, key: event.key, payloadJson, ...(event.id === undefined ? {} : { id: event.id }) };
}

/**
 * Sends an event in `db` — your Drizzle database, or better the transaction that makes it true:
 *
 *   await db.transaction(async (tx) => {
 *     await tx.update(users).set({ verified: true }).where(eq(users.id, 42));
 *     await sendEvent(tx, { event: 'email.verified', key: 'user:42', payload: { at } });
 *   });
 *
 * Every run waiting for this event and key (step.waitForEvent) gets `payload` and runs again when
 * the transaction commits; a run that reaches its wait later (enqueued before the event was sent)
 * finds it, for the retention window (EVENT_RETENTION_SECONDS, a day by default). Returns the
 * event's id. Throws EventValidationError, before anything is sent, when a field is out of bounds.
 */
export async function sendEvent(db: Db, event: WorkflowEvent): Promise<{ id: string }> {
  const checked = checkedEvent(event);
  return { id: await sendEventQuery(db, checked) };
}
