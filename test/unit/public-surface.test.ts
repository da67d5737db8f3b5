// The package's public surface, entry by entry: what each exports at run time is held here, so a
// new export is a decision (add it to this list and to docs/adopting.md's table), not an accident.
// Types are checked by the consumer fixture's tsc run (test/package.test.ts).
import { readFileSync } from 'node:fs';
import { expect, it } from 'vitest';

const SURFACE: Record<string, string[]> = {
  pgdrain: [
    'EventValidationError',
    'JobCancelledError',
    'JobRegistry',
    'JobValidationError',
    'LeaseLostError',
    'MAX_BATCH_SIZE',
    'MAX_BATCH_WAIT_MS',
    'MAX_EVENT_PAYLOAD_BYTES',
    'MAX_PROGRESS_BYTES',
    'MAX_RESULT_BYTES',
    'MAX_LOST_ATTEMPTS',
    'MAX_STEPS_PER_RUN',
    'MigrationWaitError',
    'NamedStatementsLost',
    'PermanentJobError',
    'PgdrainError',
    'RetryLaterError',
    'StepTimeoutError',
    'UnknownDependencyError',
    'cancel',
    'countTotals',
    'countsByMinute',
    'createDefaultRegistry',
    'createWebhookJob',
    'defineBatchJob',
    'defineJob',
    'defineSchedule',
    'defineWorkflow',
    'deleteDeadJobs',
    'deleteJob',
    'enqueue',
    'enqueueMany',
    'evaluateSchedules',
    'getDependencies',
    'getJob',
    'listJobs',
    'listPausedKinds',
    'migrate',
    'noopJob',
    'pauseKind',
    'removeGroupLimits',
    'resumeKind',
    'retry',
    'retryDead',
    'retryDeadJobs',
    'sendEvent',
    'setGroupLimits',
    'stats',
    'unsubscribe',
    'useOpenTelemetry',
  ],
  'pgdrain/sidecar': ['sidecarOptionsFromEnv', 'startSidecar'],
  'pgdrain/worker': ['DEFAULT_BUDGET_MS', 'createWorker', 'tellQueueClock'],
  'pgdrain/hono': ['DEFAULT_MAX_BODY_BYTES', 'MAX_BATCH', 'TOKEN_SCOPES', 'createApp', 'parseScopedTokens'],
  'pgdrain/client': ['PgdrainApiError', 'PgdrainError', 'createClient'],
  'pgdrain/testing': ['checkWorkflows', 'testWorkflow'],
  'pgdrain/sql': [
    'FINAL_STATUSES',
    'JOB_STATUSES',
    'NOTIFY_CHANNEL',
    'PGDRAIN_SCHEMA',
    'finishedJobs',
    'groupLimits',
    'jobCounts',
    'jobDependencies',
    'jobTotals',
    'jobs',
    'pausedKinds',
    'pgdrainSchema',
    'schedules',
    'workflowEvents',
    'workflowSteps',
  ],
};

const FILE: Record<string, string> = {
  pgdrain: 'index',
  'pgdrain/sidecar': 'sidecar',
  'pgdrain/worker': 'worker',
  'pgdrain/hono': 'hono',
  'pgdrain/client': 'client',
  'pgdrain/testing': 'testing',
  'pgdrain/sql': 'sql',
};

it("every entry of package.json's exports is listed here", () => {
  const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    exports: Record<string, unknown>;
  };
  const entries = Object.keys(manifest.exports)
    .filter((e) => e !== './package.json')
    .map((e) => (e === '.' ? 'pgdrain' : `pgdrain/${e.slice(2)}`));
  expect(entries.sort()).toEqual(Object.keys(SURFACE).sort());
});

for (const [entry, names] of Object.entries(SURFACE)) {
  it(`${entry} exports exactly its list, and docs/adopting.md names each`, async () => {
    const module = (await import(`../../src/entry/${FILE[entry]}.ts`)) as Record<string, unknown>;
    expect(Object.keys(module).sort()).toEqual([...names].sort());
    const adopting = readFileSync(new URL('../../docs/adopting.md', import.meta.url), 'utf8');
    const row = adopting.split('\n').find((line) => line.startsWith(`| \`${entry}\` |`));
    expect(row, `docs/adopting.md has a row for ${entry}`).toBeDefined();
    expect(names.filter((name) => !row!.includes(`\`${name}`))).toEqual([]);
  });
}
