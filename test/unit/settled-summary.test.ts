// The sidecar's line for what its drains settled: the first jobs after a quiet spell at once, then
// at most one line per interval with the counts since the last.
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import type { Logger } from 'pino';
import { SettledSummary } from '../../src/sidecar/settled-summary.ts';

const lines: { fields: Record<string, number>; message: string }[] = [];
const log = {
  info: (fields: Record<string, number>, message: string) => void lines.push({ fields, message }),
} as unknown as Logger;
const report = (completed: number, failed = 0, dead = 0, unsettled = 0) => ({
  completed,
  failed,
  dead,
  cancelled: 0,
  released: 0,
  lost: 0,
  snoozed: 0,
  unsettled,
});

beforeEach(() => {
  vi.useFakeTimers();
  lines.length = 0;
});
afterEach(() => vi.useRealTimers());

it('says the first jobs at once, then one line per interval with the counts since the last', () => {
  const summary = new SettledSummary(log, 10_000);
  summary.add(report(0));
  expect(lines).toEqual([]);
  summary.add(report(1));
  expect(lines.map((l) => l.message)).toEqual(['jobs settled: 1 completed']);
  for (let i = 0; i < 1_000; i++) summary.add(report(50, i % 100 === 0 ? 1 : 0));
  expect(lines).toHaveLength(1);
  vi.advanceTimersByTime(10_000);
  expect(lines).toHaveLength(2);
  expect(lines[1]!.fields).toMatchObject({ completed: 50_000, failed: 10, dead: 0, seconds: 10 });
  expect(lines[1]!.message).toBe('jobs settled: 50000 completed, 10 failed in 10 s');
  // Quiet for longer than the interval: the next job is said at once again.
  vi.advanceTimersByTime(60_000);
  summary.add(report(0, 0, 1));
  expect(lines).toHaveLength(3);
  expect(lines[2]!.message).toMatch(/^jobs settled: 1 dead in \d+ s$/);
  summary.stop();
  expect(lines).toHaveLength(3);
});

it('says jobs whose settlement failed (left running for the reaper), so that the counts add up to the claims', () => {
  const summary = new SettledSummary(log, 10_000);
  summary.add(report(3, 0, 0, 2));
  expect(lines.map((l) => l.message)).toEqual(['jobs settled: 3 completed, 2 not settled (left to the reaper)']);
  expect(lines[0]!.fields).toMatchObject({ completed: 3, unsettled: 2 });
  summary.stop();
});
