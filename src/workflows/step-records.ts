// step-records: the completed steps' records of the runs going on over one database, written
// together. A step's record is durable before its run goes on (pgdrain.record_steps() commits
// durably, whatever the connection's default), and a durable commit waits for a WAL flush. So
// while one statement of records is in flight, the steps that finish meanwhile — of any run —
// wait for it and go together in the next: one round trip and one flush for all of them. With
// nothing in flight a record goes at once: a lone run waits for no timer.
import {
  type CompletedStep,
  type Db,
  type NotHeld,
  type StepRecord,
  recordStepCompleted,
  recordStepsCompleted,
} from '../queries/index.ts';

/** At most this many records, or about this much result JSON, in one statement. */
const MAX_RECORDS = 500;
const MAX_RESULT_CHARS = 1024 * 1024;
/** A record whose result is longer goes alone, at once (pgdrain.record_step(), durable as well):
 * its cost is its bytes, not its round trip, and in an array of text it costs the server more than
 * as a value of its own (64 KiB results: 129–136 runs/s batched against 161–240 alone). */
const ALONE_ABOVE_CHARS = 16 * 1024;

interface Pending extends CompletedStep {
  resolve: (outcome: NotHeld | null) => void;
  reject: (error: unknown) => void;
}

class StepRecordWriter {
  readonly #db: Db;
  #pending: Pending[] = [];
  #inFlight = false;

  constructor(db: Db) {
    this.#db = db;
  }

  write(step: StepRecord, resultJson: string | null): Promise<NotHeld | null> {
    if (resultJson !== null && resultJson.length > ALONE_ABOVE_CHARS)
      return recordStepCompleted(this.#db, step, resultJson);
    return new Promise((resolve, reject) => {
      this.#pending.push({ step, resultJson, resolve, reject });
      if (!this.#inFlight) this.#send();
    });
  }

  #send(): void {
    const batch = this.#take();
    if (batch.length === 0) return;
    this.#inFlight = true;
    void this.#written(batch).finally(() => {
      this.#inFlight = false;
      this.#send();
    });
  }

  /** The next statement's records: in order, a step named twice (a record of an attempt that lost
   * the job beside the one that holds it) left for the next statement. */
  #take(): Pending[] {
    const batch: Pending[] = [];
    const left: Pending[] = [];
    const steps = new Set<string>();
    let chars = 0;
    for (const record of this.#pending) {
      const step = `${record.step.jobId}\u0000${record.step.name}`;
      const size = record.resultJson?.length ?? 0;
      const full = batch.length >= MAX_RECORDS || (batch.length > 0 && chars + size > MAX_RESULT_CHARS);
      if (full || steps.has(step)) {
        left.push(record);
        continue;
      }
      steps.add(step);
      chars += size;
      batch.push(record);
    }
    this.#pending = left;
    return batch;
  }

  async #written(batch: Pending[]): Promise<void> {
    try {
      const outcomes = await recordStepsCompleted(this.#db, batch);
      for (const [i, record] of batch.entries()) record.resolve(outcomes[i]!);
    } catch (error) {
      if (batch.length === 1) {
        batch[0]!.reject(error);
        return;
      }
      // One record the server refuses (a result jsonb will not take) must not fail the steps of
      // other runs: each goes again alone, and only its own error reaches its step.
      await Promise.all(
        batch.map((record) =>
          recordStepsCompleted(this.#db, [record]).then(
            ([outcome]) => record.resolve(outcome!),
            (alone: unknown) => record.reject(alone),
          ),
        ),
      );
    }
  }
}

const writers = new WeakMap<Db, StepRecordWriter>();

/** A completed step's record, written with the others that finish while one is in flight on `db`
 * (fenced; durable before it resolves). */
export function writeStepRecord(db: Db, step: StepRecord, resultJson: string | null): Promise<NotHeld | null> {
  let writer = writers.get(db);
  if (!writer) writers.set(db, (writer = new StepRecordWriter(db)));
  return writer.write(step, resultJson);
}
