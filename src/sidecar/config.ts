// The sidecar's environment variables, checked up front so a typo fails at start with a clear
// message instead of surfacing later as odd behaviour. The README lists each one.
import { z } from 'zod';
import { parseScopedTokens } from '../http/app.ts';
import type { SidecarOptions } from './index.ts';

function parseTokens(value: string | undefined) {
  try {
    return parseScopedTokens(value);
  } catch (error) {
    throw new Error(`invalid environment: ${error instanceof Error ? error.message : String(error)}`);
  }
}

const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max).optional();

const envSchema = z.object({
  DATABASE_URL: z.string().regex(/^postgres(ql)?:\/\//, 'must start with postgres:// or postgresql://').optional(),
  PGDRAIN_DATA_DIR: z.string().min(1).optional(),
  PORT: int(0, 65535),
  HOST: z.string().min(1).optional(),
  API_TOKEN: z.string().min(16, 'use at least 16 characters').optional(),
  METRICS_TOKEN: z.string().min(16, 'use at least 16 characters').optional(),
  API_TOKENS: z.string().optional(),
  OLDEST_READY_WARN_SECONDS: int(1, 604_800),
  RECORD_COUNTS: z.enum(['true', 'false'], 'must be true or false').optional(),
  BATCH_SIZE: int(1, 1000),
  CONCURRENCY: int(1, 10_000),
  KINDS: z.string().optional(),
  POLL_INTERVAL_MS: int(10, 3_600_000),
  REAP_INTERVAL_MS: int(100, 86_400_000),
  VISIBILITY_TIMEOUT_SECONDS: int(1, 604_800),
  SHUTDOWN_GRACE_MS: int(0, 3_600_000),
  PG_POOL_MAX: int(2, 1000),
  MAX_BODY_BYTES: int(1024, 100 * 1024 * 1024),
  WEBHOOK_ALLOWED_HOSTS: z.string().optional(),
  LOG_FORMAT: z.enum(['json', 'pretty'], 'must be json or pretty').optional(),
});

export function sidecarOptionsFromEnv(env: Record<string, string | undefined>): SidecarOptions {
  // An empty variable means unset, as in most shells' `VAR= command`.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = envSchema.safeParse(present);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
    throw new Error(`invalid environment: ${problems}`);
  }
  const e = parsed.data;
  const kinds = e.KINDS?.split(',').map((k) => k.trim()).filter(Boolean);
  return {
    databaseUrl: e.DATABASE_URL,
    dataDir: e.PGDRAIN_DATA_DIR,
    port: e.PORT,
    host: e.HOST,
    apiToken: e.API_TOKEN,
    metricsToken: e.METRICS_TOKEN,
    scopedTokens: parseTokens(e.API_TOKENS),
    oldestReadyWarnSeconds: e.OLDEST_READY_WARN_SECONDS,
    recordCounts: e.RECORD_COUNTS === undefined ? undefined : e.RECORD_COUNTS === 'true',
    batchSize: e.BATCH_SIZE,
    concurrency: e.CONCURRENCY,
    kinds: kinds && kinds.length > 0 ? kinds : undefined,
    pollIntervalMs: e.POLL_INTERVAL_MS,
    reapIntervalMs: e.REAP_INTERVAL_MS,
    visibilityTimeoutSeconds: e.VISIBILITY_TIMEOUT_SECONDS,
    shutdownGraceMs: e.SHUTDOWN_GRACE_MS,
    poolSize: e.PG_POOL_MAX,
    maxBodyBytes: e.MAX_BODY_BYTES,
    webhookAllowedHosts: e.WEBHOOK_ALLOWED_HOSTS,
    logFormat: e.LOG_FORMAT,
  };
}
