// Who is waiting for which job (GET /jobs/:id?waitSeconds), told when the listener hears the job
// announced on pgdrain_finished. A request subscribes before it first reads the job, so an
// announcement between the read and the wait is not missed.
import type { FinishedJobs } from '../http/app.ts';

export class FinishedJobsHub implements FinishedJobs {
  readonly #listeners = new Map<string, Set<() => void>>();

  subscribe(id: string, listener: () => void): () => void {
    let set = this.#listeners.get(id);
    if (!set) this.#listeners.set(id, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.#listeners.get(id) === set) this.#listeners.delete(id);
    };
  }

  /** Job `id` reached a final state. */
  announce(id: string): void {
    for (const listener of this.#listeners.get(id) ?? []) listener();
  }

  /** The listener was down: anything may have finished meanwhile, so every waiter looks again. */
  announceAll(): void {
    for (const set of this.#listeners.values()) for (const listener of set) listener();
  }
}
