// One timer for the deadlines of every handler a drain runs (their timeouts, clipped to its
// budget), where each attempt used to set and clear a timer of its own. In a Worker, a timer is
// workerd's Node-compatible Timeout: setting and clearing one per job was a fifth of the Worker's
// CPU per job (a profile of scheduled() over 5,000 noop jobs). Here an attempt is an entry in a
// binary heap ordered by its deadline, and the one timer is armed for the earliest.
//
// An attempt that ends before its deadline (nearly all) is only marked: the heap drops it when it
// reaches the top, and is rebuilt from the entries still waiting once they are under half of it.
// When no entry waits, the heap is emptied but the timer left armed (it fires on nothing): attempts
// come and go in waves, and re-arming for each wave cost as much as the timers it replaced. The
// drain clears it when it ends (clear()): nothing outlives it, and a Worker's invocation ends with
// nothing pending. The timer is the drain's own, never shared between drains: a Worker's timer
// belongs to the invocation that set it.

/** A deadline waiting in a Deadlines: `cancel()` it when its attempt ends first. */
export interface Deadline {
  cancel(): void;
}

class Entry implements Deadline {
  readonly at: number;
  readonly fire: () => void;
  readonly #owner: Deadlines;
  done = false;

  constructor(owner: Deadlines, at: number, fire: () => void) {
    this.#owner = owner;
    this.at = at;
    this.fire = fire;
  }

  cancel(): void {
    if (this.done) return;
    this.done = true;
    this.#owner.cancelled();
  }
}

export class Deadlines {
  readonly #heap: Entry[] = [];
  /** Entries neither fired nor cancelled. */
  #waiting = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** The deadline the timer is armed for (Infinity: none). */
  #armedFor = Infinity;

  /** Calls `fire` at `at` (ms since the epoch), unless cancelled first. */
  add(at: number, fire: () => void): Deadline {
    const entry = new Entry(this, at, fire);
    this.#waiting++;
    this.#push(entry);
    if (at < this.#armedFor) this.#arm(at);
    return entry;
  }

  /** How many deadlines wait (for tests and reports). */
  get size(): number {
    return this.#waiting;
  }

  /** Drops every deadline and the timer (the drain has ended). */
  clear(): void {
    for (const entry of this.#heap) entry.done = true;
    this.#heap.length = 0;
    this.#waiting = 0;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedFor = Infinity;
  }

  /** Called by an entry that was cancelled. */
  cancelled(): void {
    this.#waiting--;
    if (this.#waiting === 0) this.#heap.length = 0;
    else if (this.#heap.length > 64 && this.#waiting * 2 < this.#heap.length) {
      this.#rebuild();
    }
  }

  #fireDue(): void {
    this.#timer = undefined;
    this.#armedFor = Infinity;
    const now = Date.now();
    const due: Entry[] = [];
    while (this.#heap.length > 0 && (this.#heap[0]!.done || this.#heap[0]!.at <= now)) {
      const top = this.#pop();
      if (top.done) continue;
      top.done = true;
      this.#waiting--;
      due.push(top);
    }
    // Armed before the calls, and each call made even if one before it throws (that error is
    // thrown afterwards, as a timer of its own would have): no deadline is left unwatched.
    if (this.#heap.length > 0) this.#arm(this.#heap[0]!.at);
    let failure: { error: unknown } | undefined;
    for (const entry of due) {
      try {
        entry.fire();
      } catch (error) {
        failure ??= { error };
      }
    }
    if (failure) throw failure.error;
  }

  #arm(at: number): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#armedFor = at;
    this.#timer = setTimeout(() => this.#fireDue(), Math.max(0, at - Date.now()));
  }

  #rebuild(): void {
    const live = this.#heap.filter((e) => !e.done);
    this.#heap.length = 0;
    for (const entry of live) this.#push(entry);
  }

  #push(entry: Entry): void {
    const heap = this.#heap;
    let i = heap.push(entry) - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent]!.at <= entry.at) break;
      heap[i] = heap[parent]!;
      i = parent;
    }
    heap[i] = entry;
  }

  #pop(): Entry {
    const heap = this.#heap;
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        if (left >= heap.length) break;
        const right = left + 1;
        const child = right < heap.length && heap[right]!.at < heap[left]!.at ? right : left;
        if (heap[child]!.at >= last.at) break;
        heap[i] = heap[child]!;
        i = child;
      }
      heap[i] = last;
    }
    return top;
  }
}
