// Every setting of pgdrain in one place: the environment variable that sets it, its bounds, its
// default and which runtimes read it. The sidecar reads them from its environment (a bad value
// stops the start with a message naming the variable), the Worker from its bindings (a bad value
// makes the API answer 503 naming the variable, and a cron invocation fail with the same message),
// the CLI from its environment. The README's configuration table is checked against this list by
// test/settings.test.ts, so the two cannot drift.
import { z } from 'zod';
import { DRAINER_ID_PATTERN } from './db/constants.ts';
import { DEFAULT_EVENT_RETENTION_SECONDS, DEFAULT_VACUUM_EVERY_JOBS, JOB_DEFAULTS } from './db/constants.ts';
import { DRAIN_PROFILES } from './drain/profiles.ts';
import { parseScopedTokens } from './http/tokens.ts';
import { parseSigningSecrets } from './jobs/webhook-signature.ts';
import { parseAllowedHosts } from './jobs/webhook.ts';
import { checkAllowList } from './jobs/webhook-targets.ts';
import { PgdrainError } from './errors.ts';

export type Runtime = 'sidecar' | 'worker';

interface Setting<T, E extends string = string> {
  /** The environment variable (on the Worker: the var or secret of that name). */
  env: E;
  runtimes: readonly Runtime[];
  /** Parses the variable's text; a refusal's message says what is allowed. */
  parse: z.ZodType<T, string> | { [R in Runtime]?: z.ZodType<T, string> };
  /** Used when the variable is unset or empty. */
  default?: T | { [R in Runtime]?: T };
  /** How the README states the default, where it is not a plain value. */
  documentedDefault?: string | { [R in Runtime]?: string };
}

const int = (min: number, max: number) =>
  z.coerce
    .number<string>({ error: 'must be a whole number' })
    .int('must be a whole number')
    .min(min, `must be at least ${min}`)
    .max(max, `must be at most ${max}`);
const token = z.string().min(16, 'use at least 16 characters');
const bool = z.enum(['true', 'false'], 'must be true or false').transform((v) => v === 'true');
const list = z.string().transform((v) =>
  v
    .split(',')
    .map((k) => k.trim())
    .filter(Boolean),
);
const scopedTokens = z.string().transform((value, ctx) => {
  try {
    return parseScopedTokens(value);
  } catch (error) {
    ctx.addIssue({ code: 'custom', message: (error as Error).message.replace(/^API_TOKENS /, '') });
    return z.NEVER;
  }
});

const allowedHosts = z.string().superRefine((value, ctx) => {
  try {
    checkAllowList(parseAllowedHosts(value));
  } catch (error) {
    ctx.addIssue({ code: 'custom', message: (error as Error).message.replace(/^WEBHOOK_ALLOWED_HOSTS: /, '') });
  }
});

const signingSecrets = z.string().superRefine((value, ctx) => {
  try {
    parseSigningSecrets(value);
  } catch (error) {
    ctx.addIssue({ code: 'custom', message: (error as Error).message });
  }
});

const setting = <T, const E extends string, const R extends readonly Runtime[]>(s: Setting<T, E> & { runtimes: R }) =>
  s;
const both = ['sidecar', 'worker'] as const;
const sidecarOnly = ['sidecar'] as const;
const workerOnly = ['worker'] as const;

/** Concurrency on the Worker: an invocation may hold 6 connections and the drain's statements take
 * one (two while a second claim is in flight: a fetch beyond six waits for one to close). */
export const WORKER_MAX_CONCURRENCY = 5;

export const SETTINGS = {
  databaseUrl: setting({
    env: 'DATABASE_URL',
    runtimes: both,
    documentedDefault: { sidecar: 'embedded PostgreSQL' },
    parse: z.string().regex(/^postgres(ql)?:\/\//, 'must start with postgres:// or postgresql://'),
  }),
  listenDatabaseUrl: setting({
    env: 'LISTEN_DATABASE_URL',
    runtimes: sidecarOnly,
    documentedDefault: 'DATABASE_URL',
    parse: z.string().regex(/^postgres(ql)?:\/\//, 'must start with postgres:// or postgresql://'),
  }),
  pooler: setting({
    env: 'DATABASE_POOLER',
    runtimes: sidecarOnly,
    parse: z.enum(['auto', 'none', 'session', 'transaction'], 'must be auto, none, session or transaction'),
    default: 'auto',
  }),
  pollOnly: setting({ env: 'POLL_ONLY', runtimes: sidecarOnly, parse: bool, default: false }),
  dataDir: setting({
    env: 'PGDRAIN_DATA_DIR',
    runtimes: sidecarOnly,
    parse: z.string(),
    default: '.pgdrain',
    documentedDefault: './.pgdrain',
  }),
  embeddedPort: setting({
    env: 'EMBEDDED_PORT',
    runtimes: sidecarOnly,
    parse: int(0, 65535),
    documentedDefault: 'a free port',
  }),
  drainerId: setting({
    env: 'DRAINER_ID',
    runtimes: sidecarOnly,
    documentedDefault: 'generated once, kept in the data folder',
    parse: z.string().regex(DRAINER_ID_PATTERN, 'must be 1 to 100 letters, digits, - or _'),
  }),
  port: setting({ env: 'PORT', runtimes: sidecarOnly, parse: int(0, 65535), default: 8080 }),
  host: setting({ env: 'HOST', runtimes: sidecarOnly, parse: z.string(), default: '127.0.0.1' }),
  apiToken: setting({ env: 'API_TOKEN', runtimes: both, parse: token, documentedDefault: { sidecar: 'generated' } }),
  metricsToken: setting({ env: 'METRICS_TOKEN', runtimes: both, parse: token }),
  scopedTokens: setting({ env: 'API_TOKENS', runtimes: both, parse: scopedTokens, default: [] }),
  oldestReadyWarnSeconds: setting({
    env: 'OLDEST_READY_WARN_SECONDS',
    runtimes: both,
    parse: int(1, 604_800),
    default: 60,
  }),
  recordCounts: setting({ env: 'RECORD_COUNTS', runtimes: both, parse: bool, default: true }),
  batchSize: setting({
    env: 'BATCH_SIZE',
    runtimes: both,
    parse: int(1, 1000),
    default: { sidecar: DRAIN_PROFILES.near.batchSize, worker: DRAIN_PROFILES.far.batchSize },
  }),
  maxBatchSize: setting({
    env: 'MAX_BATCH_SIZE',
    runtimes: workerOnly,
    parse: int(1, 10_000),
    default: DRAIN_PROFILES.far.maxBatchSize,
  }),
  concurrency: setting({
    env: 'CONCURRENCY',
    runtimes: both,
    parse: { sidecar: int(1, 10_000), worker: int(1, WORKER_MAX_CONCURRENCY) },
    default: { sidecar: DRAIN_PROFILES.near.concurrency, worker: DRAIN_PROFILES.far.concurrency },
  }),
  kinds: setting({ env: 'KINDS', runtimes: both, parse: list, documentedDefault: 'every registered kind' }),
  pollIntervalMs: setting({
    env: 'POLL_INTERVAL_MS',
    runtimes: sidecarOnly,
    parse: int(10, 3_600_000),
    default: DRAIN_PROFILES.near.pollIntervalMs,
  }),
  eventRetentionSeconds: setting({
    env: 'EVENT_RETENTION_SECONDS',
    runtimes: both,
    parse: int(60, 30 * 86_400),
    default: DEFAULT_EVENT_RETENTION_SECONDS,
  }),
  reapIntervalMs: setting({
    env: 'REAP_INTERVAL_MS',
    runtimes: sidecarOnly,
    parse: int(100, 86_400_000),
    default: 15_000,
  }),
  vacuumEveryJobs: setting({
    env: 'VACUUM_EVERY_JOBS',
    runtimes: sidecarOnly,
    parse: int(0, 100_000_000),
    default: DEFAULT_VACUUM_EVERY_JOBS,
  }),
  visibilityTimeoutSeconds: setting({
    env: 'VISIBILITY_TIMEOUT_SECONDS',
    runtimes: both,
    parse: int(1, 604_800),
    default: JOB_DEFAULTS.visibilityTimeoutSeconds,
  }),
  shutdownGraceMs: setting({
    env: 'SHUTDOWN_GRACE_MS',
    runtimes: sidecarOnly,
    parse: int(0, 3_600_000),
    default: 10_000,
  }),
  poolSize: setting({ env: 'PG_POOL_MAX', runtimes: sidecarOnly, parse: int(2, 1000), default: 10 }),
  maxBodyBytes: setting({
    env: 'MAX_BODY_BYTES',
    runtimes: both,
    parse: int(1024, 100 * 1024 * 1024),
    default: 1024 * 1024,
  }),
  httpHeadersTimeoutMs: setting({
    env: 'HTTP_HEADERS_TIMEOUT_MS',
    runtimes: sidecarOnly,
    parse: int(1000, 600_000),
    default: 10_000,
  }),
  httpRequestTimeoutMs: setting({
    env: 'HTTP_REQUEST_TIMEOUT_MS',
    runtimes: sidecarOnly,
    parse: int(1000, 3_600_000),
    default: 30_000,
  }),
  httpMaxConnections: setting({
    env: 'HTTP_MAX_CONNECTIONS',
    runtimes: sidecarOnly,
    parse: int(1, 100_000),
    default: 1000,
  }),
  webhookAllowedHosts: setting({
    env: 'WEBHOOK_ALLOWED_HOSTS',
    runtimes: both,
    parse: allowedHosts,
    default: '',
    documentedDefault: 'empty',
  }),
  webhookSigningSecret: setting({
    env: 'WEBHOOK_SIGNING_SECRET',
    runtimes: both,
    parse: signingSecrets,
    documentedDefault: 'unset (unsigned)',
  }),
  logLevel: setting({
    env: 'LOG_LEVEL',
    runtimes: sidecarOnly,
    default: 'info',
    parse: z.enum(
      ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
      'must be fatal, error, warn, info, debug, trace or silent',
    ),
  }),
  logFormat: setting({
    env: 'LOG_FORMAT',
    runtimes: sidecarOnly,
    parse: z.enum(['json', 'pretty'], 'must be json or pretty'),
    documentedDefault: 'by terminal',
  }),
  drainBudgetMs: setting({
    env: 'DRAIN_BUDGET_MS',
    runtimes: workerOnly,
    parse: int(1000, 900_000),
    documentedDefault: "until 1 s before the cron's next tick",
  }),
  backstopPollSeconds: setting({
    env: 'BACKSTOP_POLL_SECONDS',
    runtimes: workerOnly,
    parse: int(0, 86_400),
    // Every cron looks: a job enqueued behind the Worker's back (SQL, another program's enqueue in
    // its own transaction) starts within a cron interval. A positive value lets an idle database
    // sleep, at the cost of such a job waiting up to that long (docs/workers.md, the queue's clock).
    default: 0,
  }),
  queueClock: setting({ env: 'QUEUE_CLOCK', runtimes: workerOnly, parse: bool, default: true }),
} satisfies Record<string, Setting<any>>;

type Specs = typeof SETTINGS;
type ValueOf<S> = S extends Setting<infer T, any> ? T : never;
export type SettingName = keyof Specs;
/** Every setting, parsed; undefined where unset with no default, or not read by the runtime. */
export type Settings = { [K in SettingName]: ValueOf<Specs[K]> | undefined };
/** The settings `R` reads. */
export type SettingOf<R extends Runtime> = {
  [K in SettingName]: R extends Specs[K]['runtimes'][number] ? K : never;
}[SettingName];
/** What a runtime's settings are as options: each may be given, else its default applies. */
export type RuntimeSettings<R extends Runtime> = { [K in SettingOf<R>]?: ValueOf<Specs[K]> };
/** The environment variables `R` reads, as text (a Worker's vars and secrets). */
export type SettingVariables<R extends Runtime> = { [K in SettingOf<R> as Specs[K]['env']]?: string };

/** One or more settings are unusable; `problems` names each variable and what is allowed. */
export class SettingsError extends PgdrainError {
  override name = 'SettingsError';
  readonly code = 'invalid_settings';
  readonly problems: readonly { env: string; message: string }[];
  constructor(problems: { env: string; message: string }[]) {
    super(`invalid settings: ${problems.map((p) => `${p.env}: ${p.message}`).join('; ')}`);
    this.problems = problems;
  }
}

const forRuntime = <T>(
  value: T | { [R in Runtime]?: T } | undefined,
  runtime: Runtime,
  isPerRuntime: (v: unknown) => boolean,
): T | undefined =>
  value !== undefined && isPerRuntime(value) ? (value as { [R in Runtime]?: T })[runtime] : (value as T | undefined);

const isZod = (v: unknown) => v instanceof z.ZodType;
const hasRuntimeKeys = (v: unknown) =>
  typeof v === 'object' &&
  v !== null &&
  !Array.isArray(v) &&
  Object.keys(v).every((k) => k === 'sidecar' || k === 'worker');

/** The settings `runtime` reads, from `env` (an empty variable counts as unset, as in `VAR= cmd`). */
export function readSettings(env: Record<string, unknown>, runtime: Runtime): Settings {
  const out: Partial<Record<SettingName, unknown>> = {};
  const problems: { env: string; message: string }[] = [];
  for (const [name, spec] of Object.entries(SETTINGS) as [SettingName, Setting<unknown>][]) {
    if (!spec.runtimes.includes(runtime)) continue;
    const raw = env[spec.env];
    if (raw === undefined || raw === '') {
      out[name] = forRuntime(spec.default, runtime, hasRuntimeKeys);
      continue;
    }
    if (typeof raw !== 'string') {
      problems.push({ env: spec.env, message: 'must be text' });
      continue;
    }
    const parser = isZod(spec.parse) ? (spec.parse as z.ZodType) : (spec.parse as Record<Runtime, z.ZodType>)[runtime];
    const parsed = parser.safeParse(raw);
    if (parsed.success) out[name] = parsed.data;
    else problems.push({ env: spec.env, message: parsed.error.issues.map((i) => i.message).join(', ') });
  }
  if (problems.length > 0) throw new SettingsError(problems);
  return out as Settings;
}

/** A setting's default for `runtime`; throws for a setting that has none there. */
export function defaultFor<K extends SettingName>(name: K, runtime: Runtime): NonNullable<ValueOf<Specs[K]>> {
  const spec = SETTINGS[name] as Setting<unknown>;
  const value = forRuntime(spec.default, runtime, hasRuntimeKeys);
  if (value === undefined || value === null) throw new Error(`${spec.env} has no default on the ${runtime}`);
  return value as NonNullable<ValueOf<Specs[K]>>;
}

/** What a runtime runs with: the settings given (a sidecar's options), every one left unset that
 * `runtime` reads filled from its default here. The one place a setting's default is applied. */
export function withDefaults<R extends Runtime>(given: RuntimeSettings<R>, runtime: R): Settings {
  const out: Partial<Record<SettingName, unknown>> = {};
  for (const [name, spec] of Object.entries(SETTINGS) as [SettingName, Setting<unknown>][]) {
    if (!spec.runtimes.includes(runtime)) continue;
    const value = (given as Partial<Record<SettingName, unknown>>)[name];
    out[name] = value !== undefined ? value : forRuntime(spec.default, runtime, hasRuntimeKeys);
  }
  return out as Settings;
}

/** The variables `runtime` reads, in the order of SETTINGS. */
export const settingVariables = (runtime: Runtime): string[] =>
  Object.values(SETTINGS as Record<string, Setting<unknown>>)
    .filter((s) => s.runtimes.includes(runtime))
    .map((s) => s.env);

/** How the README shows a setting's default for `runtime`. */
export function documentedDefault(name: SettingName, runtime: Runtime): string {
  const spec = SETTINGS[name] as Setting<unknown>;
  const documented =
    typeof spec.documentedDefault === 'object' ? spec.documentedDefault[runtime] : spec.documentedDefault;
  if (documented !== undefined) return documented;
  const value = forRuntime(spec.default, runtime, hasRuntimeKeys);
  if (value === undefined) return 'unset';
  if (Array.isArray(value)) return value.length === 0 ? 'unset' : JSON.stringify(value);
  return String(value);
}
