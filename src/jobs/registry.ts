// The registry: the job kinds a drainer runs and the API accepts, by name. It validates at enqueue
// (through the enqueue pipeline: bad payloads are refused, never stored) and gives the drain loop
// each kind's handler, timeout and backoff. What a kind is, and the errors handlers throw, are in
// definition.ts (re-exported here).
import type { NewJob } from '../queries/index.ts';
import { type JobDefinition, type KindLimits, type KindLookup, claimName, limitsOf, versionOf } from './definition.ts';
import { type EnqueueRequest, prepareRequest } from './enqueue.ts';

export * from './definition.ts';

export class JobRegistry implements KindLookup {
  /** Each kind's highest version: what new jobs of it are enqueued on. */
  readonly #byKind = new Map<string, JobDefinition>();
  /** Every version registered of each kind. */
  readonly #versions = new Map<string, Map<number, JobDefinition>>();

  constructor(definitions: readonly JobDefinition<any>[]) {
    for (const d of definitions) {
      const versions = this.#versions.get(d.kind) ?? new Map<number, JobDefinition>();
      const version = versionOf(d);
      if (versions.has(version))
        throw new Error(
          `job kind ${d.kind} is registered twice${versions.size > 1 || version > 1 ? ` at version ${version}` : ''}`,
        );
      versions.set(version, d as JobDefinition);
      this.#versions.set(d.kind, versions);
      const latest = this.#byKind.get(d.kind);
      if (!latest || versionOf(latest) < version) this.#byKind.set(d.kind, d as JobDefinition);
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

  /** The kind's definition at `version` (a job's: null is the first); unset: its highest. */
  get(kind: string, version?: number | null): JobDefinition | undefined {
    return version === undefined ? this.#byKind.get(kind) : this.#versions.get(kind)?.get(version ?? 1);
  }

  /** The versions registered of `kind`, lowest first. */
  versions(kind: string): number[] {
    return [...(this.#versions.get(kind)?.keys() ?? [])].sort((a, b) => a - b);
  }

  /** What a claim of `kinds` lists (claim.sql): each kind's registered versions, the first by the
   * kind's name, a later one as `kind@version`. A kind not registered here is listed by its name. */
  claimNames(kinds: readonly string[]): string[] {
    return kinds.flatMap((kind) => {
      const versions = this.versions(kind);
      return versions.length === 0 ? [kind] : versions.map((v) => claimName(kind, v));
    });
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
