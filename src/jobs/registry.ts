// The registry: the job kinds a drainer runs and the API accepts, by name. It validates at enqueue
// (through the enqueue pipeline: bad payloads are refused, never stored) and gives the drain loop
// each kind's handler, timeout and backoff. What a kind is, and the errors handlers throw, are in
// definition.ts (re-exported here).
import type { NewJob } from '../queries/index.ts';
import { type JobDefinition, type KindLimits, type KindLookup, limitsOf } from './definition.ts';
import { type EnqueueRequest, prepareRequest } from './enqueue.ts';

export * from './definition.ts';

export class JobRegistry implements KindLookup {
  readonly #byKind = new Map<string, JobDefinition>();

  constructor(definitions: readonly JobDefinition<any>[]) {
    for (const d of definitions) {
      if (this.#byKind.has(d.kind)) throw new Error(`job kind ${d.kind} is registered twice`);
      this.#byKind.set(d.kind, d as JobDefinition);
    }
    this.#refuseDeadLetterCycles();
  }

  /** A kind cannot dead-letter into itself, directly or through a chain of registered kinds. */
  #refuseDeadLetterCycles(): void {
    for (const start of this.#byKind.values()) {
      const chain = [start.kind];
      for (let next = start.deadLetter; next !== undefined; next = this.#byKind.get(next)?.deadLetter) {
        if (chain.includes(next))
          throw new Error(
            `job kind ${start.kind}: its dead letters go round in a circle: ${[...chain, next].join(' → ')}`,
          );
        chain.push(next);
      }
    }
  }

  get(kind: string): JobDefinition | undefined {
    return this.#byKind.get(kind);
  }

  kinds(): string[] {
    return [...this.#byKind.keys()];
  }

  /** The kinds limited across drainers, with their limits. */
  limitedKinds(): { kind: string; limits: KindLimits }[] {
    return [...this.#byKind.values()].flatMap((d) => {
      const limits = limitsOf(d);
      return limits ? [{ kind: d.kind, limits }] : [];
    });
  }

  /** Checks kind, payload and options and fills in the kind's settings (the enqueue pipeline's
   * check: src/jobs/enqueue.ts); throws JobValidationError. */
  prepare(request: EnqueueRequest): NewJob {
    return prepareRequest(request, this, 'refuse');
  }
}
