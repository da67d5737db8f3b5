// What the drains settled, in the log at its default level: the first jobs after a quiet spell at
// once (a newcomer's first curl shows up within moments: "1 job completed"), then at most one line
// per interval with the counts since the last one — one line per 10 s at 50,000 jobs a second.
import type { Logger } from 'pino';
import type { SettledCounts } from '../drain/job-record.ts';

const COUNTED = ['completed', 'failed', 'dead', 'cancelled', 'released', 'lost', 'unsettled'] as const;
type Counts = Record<(typeof COUNTED)[number], number>;
const none = (): Counts => ({ completed: 0, failed: 0, dead: 0, cancelled: 0, released: 0, lost: 0, unsettled: 0 });

export class SettledSummary {
  readonly #log: Logger;
  readonly #intervalMs: number;
  #counts = none();
  #since = Date.now();
  #lastLineAt = Number.NEGATIVE_INFINITY;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(log: Logger, intervalMs = 10_000) {
    this.#log = log;
    this.#intervalMs = intervalMs;
  }

  /** A drain's report: counted, and said at once after a quiet interval, else at the interval's end. */
  add(report: SettledCounts): void {
    let any = false;
    for (const name of COUNTED) {
      this.#counts[name] += report[name];
      any ||= report[name] > 0;
    }
    if (!any || this.#timer) return;
    const wait = this.#lastLineAt + this.#intervalMs - Date.now();
    if (wait <= 0) this.flush();
    else this.#timer = setTimeout(() => this.flush(), wait).unref?.() ?? undefined;
  }

  /** The line for what was counted since the last one (none when nothing was). */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const counts = this.#counts;
    const total = COUNTED.reduce((n, name) => n + counts[name], 0);
    if (total === 0) return;
    const seconds = Math.max(1, Math.round((Date.now() - this.#since) / 1000));
    const said = COUNTED.filter((name) => counts[name] > 0).map((name) =>
      name === 'unsettled' ? `${counts[name]} not settled (left to the reaper)` : `${counts[name]} ${name}`,
    );
    this.#log.info(
      { ...counts, seconds },
      `jobs settled: ${said.join(', ')}${this.#lastLineAt === Number.NEGATIVE_INFINITY ? '' : ` in ${seconds} s`}`,
    );
    this.#counts = none();
    this.#since = Date.now();
    this.#lastLineAt = Date.now();
  }

  /** At shutdown: the last counts said, the timer gone. */
  stop(): void {
    this.flush();
  }
}
