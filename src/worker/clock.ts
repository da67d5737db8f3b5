// The queue's clock (Workers): a Durable Object, one per queue, that knows when something is next
// due — a pending job's run_at, a lease's end, a schedule's slot, the next housekeeping — and
// sleeps until then on its alarm, so that an idle Worker sends its database nothing at all (a Neon
// compute suspends after 5 minutes without a query) and still starts every job on time.
//
// PostgreSQL stays the only source of truth; the clock is a cache of "when next", and every path
// that learns such a moment tells it: the API's enqueues and retries (POST /jobs…), a drain that
// ends (the database says what is next in the claim it already sends), a retry's backoff, a lease
// taken, your own code that enqueues in its own transaction (tellQueueClock). What the Worker
// cannot see — SQL from other programs — the cron finds: an invocation asks the clock first, and
// touches the database only when something is due or BACKSTOP_POLL_SECONDS have passed since the
// last look. A clock that lost its state looks at the next cron; a lost or late tell costs at most
// one backstop interval, never a job. Two looks at once (an alarm and a cron) are harmless: every
// claim is fenced, nothing runs twice.
//
//   cron ──► clock.decide(now) ──nothing due──► done, no connection opened
//                              └──due────────► look: schedules, housekeeping when due, drain
//                                              ──► clock.looked(what is next)
//   alarm (at the earliest moment known) ──────► look (in the Durable Object) ──► clock.looked(…) ──► next alarm
//
// The state is one small record in the object's SQLite-backed storage (on the Workers Free plan).
// The object is called with fetch() (a path per method, JSON in and out) rather than Workers RPC, so
// that this module — and createWorker with it — loads outside workerd too (`cloudflare:workers`
// exists only there): the tests, the typed package and a Node app importing pgdrain/worker.

/** The part of a Durable Object's state (the runtime's DurableObjectState) that the clock uses. */
export interface DurableObjectState {
  storage: {
    get<T>(key: string): Promise<T | undefined>;
    put<T>(key: string, value: T): Promise<void>;
    deleteAll(): Promise<void>;
    setAlarm(scheduledTime: number | Date): Promise<void>;
    deleteAlarm(): Promise<void>;
  };
  blockConcurrencyWhile<T>(callback: () => Promise<T>): Promise<T>;
}

/** What the clock knows, kept in its storage. Times are ms since the epoch. */
export interface ClockState {
  /** The earliest moment a drain has something to do; null: it knows of nothing. */
  drainAt: number | null;
  /** The earliest moment housekeeping has something to do (a lease's end, a prune); null:
   * unknown, until a look with housekeeping says. */
  housekeepAt: number | null;
  /** When a look last asked the database; 0: never (a new or reset clock looks at once). */
  lookedAt: number;
  /** Moments told recently, [when told, the moment]: a look that ends keeps those told after it
   * began, which its database reads may not have seen. */
  told: [number, number][];
  /** Lease ends told recently, [when told, the moment], kept for the same reason for housekeeping. */
  leasesTold?: [number, number][];
}

/** What a cron or an alarm should do now. */
export interface ClockDecision {
  drain: boolean;
  housekeep: boolean;
  /** Why: 'due', 'backstop' (BACKSTOP_POLL_SECONDS passed, or set to 0), or 'idle' (nothing). */
  reason: 'due' | 'backstop' | 'idle';
}

/** What a look found out, for the clock to sleep on. */
export interface LookResult {
  /** When the look began (before its first statement). */
  startedAt: number;
  /** The next moment for a drain it knows of (the drain's nextDueAt, the next schedule slot);
   * undefined when the look did not drain (it learnt nothing of the jobs: the clock keeps what it knew). */
  drainAt?: number | null;
  /** Set when the look ran housekeeping: its next moment. */
  housekeepAt?: number | null;
}

/** Tells older than this are dropped (no look lasts longer: an alarm's drain ends within its budget). */
const TOLD_KEPT_MS = 15 * 60_000;

export const emptyClock = (): ClockState => ({ drainAt: null, housekeepAt: null, lookedAt: 0, told: [] });

/** The earliest of the moments known (null: none is). */
export const earliest = (...times: (number | null | undefined)[]): number | null => {
  const known = times.filter((t): t is number => typeof t === 'number' && Number.isFinite(t));
  return known.length > 0 ? Math.min(...known) : null;
};

/** Something is due at `at` (told at `now`). Of the tells, only what a look ending later may
 * ask for is kept — the earliest moment told since any time: a tell is dropped once a later one
 * names an earlier or equal moment, so the list stays short however many jobs are enqueued. */
export function told(state: ClockState, at: number, now: number): ClockState {
  return { ...state, drainAt: earliest(state.drainAt, at), told: remember(state.told, at, now) };
}

/** A drain took leases that end at `at`: if it is killed, housekeeping reaps them then. */
export function leaseTaken(state: ClockState, at: number, now: number): ClockState {
  return {
    ...state,
    housekeepAt: earliest(state.housekeepAt, at),
    leasesTold: remember(state.leasesTold ?? [], at, now),
  };
}

/** The tells worth keeping, with [now, at]: those still recent that name an earlier moment. */
const remember = (list: [number, number][], at: number, now: number): [number, number][] => [
  ...list.filter(([t, m]) => t >= now - TOLD_KEPT_MS && m < at),
  [now, at],
];

const toldSince = (list: [number, number][] | undefined, since: number) =>
  (list ?? []).filter(([t]) => t >= since).map(([, at]) => at);
const recent = (list: [number, number][] | undefined, now: number) =>
  (list ?? []).filter(([t]) => t >= now - TOLD_KEPT_MS);

/** What to do at `now`, given the backstop interval (0: look every time, as without a clock). */
export function decide(state: ClockState, now: number, backstopMs: number): ClockDecision {
  // A clock that never looked (new, or reset) looks at once.
  const backstop = backstopMs <= 0 || state.lookedAt === 0 || now - state.lookedAt >= backstopMs;
  const drainDue = state.drainAt !== null && state.drainAt <= now;
  // Unknown (a new or reset clock): housekeeping runs with the first look, and says when next.
  const housekeepDue = state.housekeepAt === null ? backstop || drainDue : state.housekeepAt <= now;
  if (drainDue || housekeepDue) return { drain: drainDue || backstop, housekeep: housekeepDue, reason: 'due' };
  return backstop
    ? { drain: true, housekeep: false, reason: 'backstop' }
    : { drain: false, housekeep: false, reason: 'idle' };
}

/** A look ended at `now`: what it found is next, and what was told after it began. */
export function looked(state: ClockState, result: LookResult, now: number): ClockState {
  return {
    drainAt:
      result.drainAt === undefined
        ? state.drainAt
        : earliest(result.drainAt, ...toldSince(state.told, result.startedAt)),
    housekeepAt:
      result.housekeepAt === undefined
        ? state.housekeepAt
        : earliest(result.housekeepAt, ...toldSince(state.leasesTold, result.startedAt)),
    lookedAt: Math.max(state.lookedAt, result.startedAt),
    told: recent(state.told, now),
    leasesTold: recent(state.leasesTold, now),
  };
}

/** When the alarm should ring: the earliest moment known, or the backstop (a clock that knows of
 * nothing still looks once per backstop interval, as the cron would). */
export function alarmAt(state: ClockState, backstopMs: number): number | null {
  return earliest(
    state.drainAt,
    state.housekeepAt,
    backstopMs > 0 && state.lookedAt > 0 ? state.lookedAt + backstopMs : null,
  );
}

/** The clock's methods, as the Worker calls them (through the object's fetch: clockStub()). */
export interface QueueClockApi {
  told(at: number): Promise<void>;
  leaseTaken(at: number): Promise<void>;
  decide(now: number, backstopMs: number): Promise<ClockDecision>;
  looked(result: LookResult): Promise<void>;
  state(): Promise<ClockState>;
  reset(): Promise<void>;
}

type ClockMethod = keyof QueueClockApi;
const CLOCK_METHODS: readonly ClockMethod[] = ['told', 'leaseTaken', 'decide', 'looked', 'state', 'reset'];

interface FetchStub {
  fetch(input: string, init?: RequestInit): Promise<Response>;
}

/** The methods as requests to the object: POST /<method> with the arguments as a JSON array. */
function clockStub(stub: FetchStub): QueueClockApi {
  const call = async (method: ClockMethod, args: unknown[]) => {
    const res = await stub.fetch(`https://pgdrain-clock/${method}`, { method: 'POST', body: JSON.stringify(args) });
    if (!res.ok) throw new Error(`the queue's clock answered ${res.status} to ${method}: ${await res.text()}`);
    return res.json();
  };
  return Object.fromEntries(
    CLOCK_METHODS.map((m) => [m, (...args: unknown[]) => call(m, args)]),
  ) as unknown as QueueClockApi;
}

/** The Worker's binding for the clock (wrangler.toml: durable_objects.bindings). */
export const CLOCK_BINDING = 'PGDRAIN_CLOCK';
/** One clock per queue: the object's name. */
const CLOCK_NAME = 'pgdrain';

export interface ClockEnv {
  PGDRAIN_CLOCK?: { idFromName(name: string): unknown; get(id: unknown): unknown };
  /** "false": the binding is left alone, the Worker polls every cron (src/settings.ts). */
  QUEUE_CLOCK?: string;
}

/** The clock is used: the binding is there and QUEUE_CLOCK is not "false". */
const clockOn = (env: ClockEnv) => env[CLOCK_BINDING] !== undefined && env.QUEUE_CLOCK?.trim() !== 'false';

/** The queue's clock, when the Worker has the binding (and QUEUE_CLOCK is not "false"); null
 * without it (the Worker polls every cron). */
export function queueClock(env: ClockEnv): QueueClockApi | null {
  const namespace = env[CLOCK_BINDING];
  if (!namespace || !clockOn(env)) return null;
  return clockStub(namespace.get(namespace.idFromName(CLOCK_NAME)) as FetchStub);
}

/**
 * Tells the queue's clock that something is due at `runAt` (default: now) — for jobs your own
 * Worker code enqueued in its own transaction (`enqueue(tx, …)`), after it commits. Without the
 * clock binding it does nothing (the cron finds them). Never throws: a lost tell costs at most
 * one backstop interval.
 */
export async function tellQueueClock(env: ClockEnv, runAt: Date | number = Date.now()): Promise<void> {
  const clock = queueClock(env);
  if (!clock) return;
  await clock.told(typeof runAt === 'number' ? runAt : runAt.getTime()).catch(() => {});
}

/**
 * For a drain's onLeaseTaken: tells the clock when the leases it takes end, so that if the
 * invocation is killed, the housekeeping that reaps them (and the drain that runs them again) looks
 * then. Once per lease: while a moment told is still ahead and no later than the new lease's end,
 * the look at that moment reads the leases as they are then (renewed or not) and the clock sleeps
 * until the earliest.
 */
export function leaseTeller(clock: QueueClockApi): (leaseEndsAt: number) => void {
  let told = 0;
  return (leaseEndsAt) => {
    if (told > Date.now() && told <= leaseEndsAt) return;
    told = leaseEndsAt;
    clock.leaseTaken(leaseEndsAt).catch(() => {});
  };
}

/** How the Durable Object runs a look when its alarm rings (create-worker.ts gives it). */
export type AlarmLook = (env: unknown, decision: ClockDecision) => Promise<LookResult>;

/** The backstop interval in ms from the env (BACKSTOP_POLL_SECONDS), as the look reads it. */
export type BackstopOf = (env: unknown) => number;

/** A look that failed is tried again after this long (the database may be waking or down). */
export const FAILED_LOOK_RETRY_MS = 30_000;

/**
 * The Durable Object class, bound to the Worker's own look (its job kinds, schedules and settings):
 * `export const QueueClock = queue.QueueClock` next to `export default queue`.
 */
/** Answers clockStub()'s request with the method it names. */
async function serveClockCall(clock: QueueClockApi, request: Request): Promise<Response> {
  const method = new URL(request.url).pathname.slice(1) as ClockMethod;
  if (request.method !== 'POST' || !CLOCK_METHODS.includes(method))
    return new Response('no such method', { status: 404 });
  const args = (await request.json()) as unknown[];
  const result = await (clock[method] as (...a: unknown[]) => Promise<unknown>).apply(clock, args);
  return Response.json(result ?? null);
}

/** A queue's clock object, as the Workers runtime calls it: the Worker's calls through fetch(),
 * its alarm through alarm(). */
export interface QueueClockObject extends QueueClockApi {
  fetch(request: Request): Promise<Response>;
  alarm(): Promise<void>;
}

/** The Durable Object class (its constructor is the runtime's: state and env). */
export type QueueClockClass = new (ctx: DurableObjectState, env: unknown) => QueueClockObject;

export function queueClockClass(look: AlarmLook, backstopOf: BackstopOf): QueueClockClass {
  return class QueueClock implements QueueClockObject {
    #state: ClockState = emptyClock();
    readonly ctx: DurableObjectState;
    readonly env: unknown;

    constructor(ctx: DurableObjectState, env: unknown) {
      this.ctx = ctx;
      this.env = env;
      void ctx.blockConcurrencyWhile(async () => {
        this.#state = (await ctx.storage.get<ClockState>('state')) ?? emptyClock();
      });
    }

    /** The Worker's calls (clockStub): POST /<method>, the arguments as a JSON array. */
    fetch(request: Request): Promise<Response> {
      return serveClockCall(this, request);
    }

    async told(at: number): Promise<void> {
      await this.#save(told(this.#state, at, Date.now()));
    }

    async leaseTaken(at: number): Promise<void> {
      await this.#save(leaseTaken(this.#state, at, Date.now()));
    }

    async decide(now: number, backstopMs: number): Promise<ClockDecision> {
      const decision = decide(this.#state, now, backstopMs);
      // A cron that looks counts as the look having begun: another cron meanwhile need not.
      if (decision.drain) await this.#save({ ...this.#state, lookedAt: Math.max(this.#state.lookedAt, now) });
      return decision;
    }

    async looked(result: LookResult): Promise<void> {
      await this.#save(looked(this.#state, result, Date.now()));
    }

    async state(): Promise<ClockState> {
      return this.#state;
    }

    /** Forgets everything (as a lost object would): the next cron looks. */
    async reset(): Promise<void> {
      await this.ctx.storage.deleteAll();
      await this.ctx.storage.deleteAlarm();
      this.#state = emptyClock();
    }

    async alarm(): Promise<void> {
      // Turned off since the alarm was set: the crons look, the clock sleeps for good.
      if (!clockOn(this.env as ClockEnv)) return;
      const now = Date.now();
      const backstopMs = backstopOf(this.env);
      const decision = decide(this.#state, now, backstopMs);
      if (!decision.drain && !decision.housekeep) {
        await this.#save(this.#state);
        return;
      }
      try {
        const result = await look(this.env, decision);
        await this.#save(looked(this.#state, result, Date.now()));
      } catch (error) {
        console.error(
          JSON.stringify({ event: 'clock_look_failed', error: error instanceof Error ? error.message : String(error) }),
        );
        await this.#save({ ...this.#state, drainAt: earliest(this.#state.drainAt, Date.now() + FAILED_LOOK_RETRY_MS) });
      }
    }

    async #save(state: ClockState): Promise<void> {
      this.#state = state;
      await this.ctx.storage.put('state', state);
      const at = alarmAt(state, backstopOf(this.env));
      if (at === null) await this.ctx.storage.deleteAlarm();
      else await this.ctx.storage.setAlarm(Math.max(at, Date.now()));
    }
  };
}
