// The Worker's default budget follows its cron: the time until the same cron's next invocation,
// less a second, within the platform's 15 minutes of wall-clock time.
import { expect, it } from 'vitest';
import { MAX_CRON_WALL_MS, cronBudgetMs } from '../../src/worker/cron-budget.ts';

const at = (iso: string) => Date.parse(iso);

it('every minute: the budget runs until a second before the next tick', () => {
  expect(cronBudgetMs('* * * * *', at('2026-11-30T10:00:00Z'), at('2026-11-30T10:00:00.200Z'))).toBe(58_800);
  // An invocation that started late still ends before the next tick.
  expect(cronBudgetMs('* * * * *', at('2026-11-30T10:00:00Z'), at('2026-11-30T10:00:20Z'))).toBe(39_000);
});

it('every five minutes: about five minutes; hourly: capped at the 15-minute wall-clock limit', () => {
  expect(cronBudgetMs('*/5 * * * *', at('2026-11-30T10:05:00Z'), at('2026-11-30T10:05:00Z'))).toBe(299_000);
  expect(cronBudgetMs('0 * * * *', at('2026-11-30T10:00:00Z'), at('2026-11-30T10:00:00Z'))).toBe(
    MAX_CRON_WALL_MS - 1_000,
  );
});

it('an expression it cannot read falls back to 25 s; never less than a second', () => {
  expect(cronBudgetMs('not a cron', 0, 0)).toBe(25_000);
  expect(cronBudgetMs('* * * * *', at('2026-11-30T10:00:00Z'), at('2026-11-30T10:00:59.500Z'))).toBe(1_000);
});
