// The sidecar's settings from its environment, read through the one settings schema
// (src/settings.ts): a bad value stops the start with a message naming the variable.
import { readSettings } from '../settings.ts';
import type { SidecarOptions } from './index.ts';

export function sidecarOptionsFromEnv(env: Record<string, string | undefined>): SidecarOptions {
  const s = readSettings(env, 'sidecar');
  return {
    databaseUrl: s.databaseUrl,
    dataDir: s.dataDir,
    port: s.port,
    host: s.host,
    apiToken: s.apiToken,
    metricsToken: s.metricsToken,
    scopedTokens: s.scopedTokens,
    oldestReadyWarnSeconds: s.oldestReadyWarnSeconds,
    recordCounts: s.recordCounts,
    batchSize: s.batchSize,
    concurrency: s.concurrency,
    kinds: s.kinds && s.kinds.length > 0 ? s.kinds : undefined,
    pollIntervalMs: s.pollIntervalMs,
    reapIntervalMs: s.reapIntervalMs,
    visibilityTimeoutSeconds: s.visibilityTimeoutSeconds,
    shutdownGraceMs: s.shutdownGraceMs,
    poolSize: s.poolSize,
    maxBodyBytes: s.maxBodyBytes,
    httpHeadersTimeoutMs: s.httpHeadersTimeoutMs,
    httpRequestTimeoutMs: s.httpRequestTimeoutMs,
    httpMaxConnections: s.httpMaxConnections,
    webhookAllowedHosts: s.webhookAllowedHosts,
    webhookSigningSecret: s.webhookSigningSecret,
    logLevel: s.logLevel,
    logFormat: s.logFormat,
  };
}
