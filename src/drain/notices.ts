// What a runtime hears about the queue as it happens (the sidecar's LISTEN), for whichever drains
// are open then: jobs that became ready (claimed at once, even while other handlers hold the drain
// open) and cancels of jobs a drain holds (checked at once instead of at the next lease renewal).
export interface NoticeListener {
  ready?: (kind: string | undefined) => void;
  cancelRequested?: (jobId: string) => void;
}

/** What a runtime hears about the queue as it happens, for whichever drains are open then. */
export class DrainNotices {
  readonly #listeners = new Set<NoticeListener>();

  /** Jobs of `kind` (any kind: undefined) may be ready to claim. */
  ready(kind?: string): void {
    for (const listener of this.#listeners) listener.ready?.(kind);
  }

  /** Someone asked to cancel the job. */
  cancelRequested(jobId: string): void {
    for (const listener of this.#listeners) listener.cancelRequested?.(jobId);
  }

  /** Returns the unsubscribe function. */
  subscribe(listener: NoticeListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
