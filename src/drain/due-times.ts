// The moments a drain session's own settlements made jobs due again — a retry's backoff, a job its
// handler snoozed — so that its open drain claims their kinds then, not at the next poll, and its
// drainer drains again then (the session outlives each drain: session.ts). A min-heap: the loop
// reads the earliest at every turn. Beyond MAX_DUE_TIMES the later ones are not kept (the poll is
// the safety net, as for jobs other drainers make due).

export const MAX_DUE_TIMES = 10_000;

interface Due {
  at: number;
  kind: string;
}

export class DueTimes {
  readonly #heap: Due[] = [];

  get size(): number {
    return this.#heap.length;
  }

  /** The earliest moment known (ms since the epoch); Infinity when none. */
  get next(): number {
    return this.#heap[0]?.at ?? Infinity;
  }

  add(at: number, kind: string): void {
    if (!Number.isFinite(at) || this.#heap.length >= MAX_DUE_TIMES) return;
    const heap = this.#heap;
    heap.push({ at, kind });
    for (let i = heap.length - 1; i > 0; ) {
      const parent = (i - 1) >> 1;
      if (heap[parent]!.at <= heap[i]!.at) break;
      [heap[parent], heap[i]] = [heap[i]!, heap[parent]!];
      i = parent;
    }
  }

  /** Removes every moment at or before `now`; the kinds they were for. */
  takeDue(now: number): Set<string> {
    const kinds = new Set<string>();
    while (this.#heap.length > 0 && this.#heap[0]!.at <= now) kinds.add(this.#pop().kind);
    return kinds;
  }

  #pop(): Due {
    const heap = this.#heap;
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      for (let i = 0; ; ) {
        const left = 2 * i + 1;
        const right = left + 1;
        let least = i;
        if (left < heap.length && heap[left]!.at < heap[least]!.at) least = left;
        if (right < heap.length && heap[right]!.at < heap[least]!.at) least = right;
        if (least === i) break;
        [heap[least], heap[i]] = [heap[i]!, heap[least]!];
        i = least;
      }
    }
    return top;
  }
}
