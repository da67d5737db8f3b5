// Why an attempt failed, as both runtimes' logs say it (src/runtime/attempt-failures.ts): a line per
// failure with its job, kind, attempt and error, the dead told apart, secrets masked, and at most a
// few lines per interval however fast a kind fails.
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import type { AttemptFailed } from '../../src/drain/index.ts';
import { type FailureLine, attemptFailureLog } from '../../src/runtime/attempt-failures.ts';

const said: { line: FailureLine; message: string }[] = [];
const muted: string[] = [];
const sink = {
  failed: (line: FailureLine, message: string) => void said.push({ line, message }),
  muted: (m: string) => void muted.push(m),
};
const failure = (over: Partial<AttemptFailed> = {}): AttemptFailed => ({
  id: '12',
  kind: 'charge',
  attempt: 1,
  maxAttempts: 3,
  error: 'card declined',
  runAt: new Date('2026-12-08T10:00:01.000Z'),
  ...over,
});

beforeEach(() => {
  vi.useFakeTimers();
  said.length = 0;
  muted.length = 0;
});
afterEach(() => vi.useRealTimers());

it('says which job of which kind failed which attempt, why, and when it runs again — or that it is dead', () => {
  const log = attemptFailureLog(sink);
  log(failure());
  log(failure({ id: '13', attempt: 3, runAt: null }));
  expect(said.map((s) => s.message)).toEqual([
    'job 12 (charge) attempt 1 of 3 failed: card declined; it runs again at 2026-12-08T10:00:01.000Z',
    'job 13 (charge) attempt 3 of 3 failed: card declined; it is dead (no attempt left, or a permanent error): pgdrain retry 13 runs it again',
  ]);
  expect(said[0]!.line).toEqual({
    jobId: '12',
    kind: 'charge',
    attempt: 1,
    maxAttempts: 3,
    retryAt: '2026-12-08T10:00:01.000Z',
    error: 'card declined',
  });
  expect(said[1]!.line.retryAt).toBeNull();
});

it("masks a connection string's password in the error, and cuts a long error short", () => {
  const log = attemptFailureLog(sink);
  log(failure({ error: 'could not reach postgres://app:s3cret-pw@db.internal:5432/orders' }));
  log(failure({ error: 'x'.repeat(4_000) }));
  expect(said[0]!.message).not.toContain('s3cret-pw');
  expect(said[0]!.line.error).toContain('db.internal');
  expect(said[1]!.line.error).toHaveLength(501);
});

it('says at most `lines` failures per interval and, once, that more failed; the next interval says them again', () => {
  const log = attemptFailureLog(sink, { lines: 3, intervalMs: 10_000 });
  for (let i = 0; i < 1_000; i++) log(failure({ id: String(i) }));
  expect(said.map((s) => s.line.jobId)).toEqual(['0', '1', '2']);
  expect(muted).toHaveLength(1);
  expect(muted[0]).toMatch(/^more attempts failed than the log shows \(3 every 10 s\)/);
  vi.advanceTimersByTime(10_000);
  log(failure({ id: 'next' }));
  expect(said.map((s) => s.line.jobId)).toEqual(['0', '1', '2', 'next']);
  expect(muted).toHaveLength(1);
});
