// Waiting in tests, the same in Node and inside workerd (the conformance suites run in both).
/** Resolves after `ms`. */
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `probe` every 20 ms until `ok` holds for what it returns (by default: until it is truthy);
 * resolves with that value, or throws after `timeoutMs` saying what it waited for and what it last saw. */
export async function until<T>(
  probe: () => T | Promise<T>,
  ok: (value: T) => boolean = Boolean,
  timeoutMs = 15_000,
  what = 'condition',
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (ok(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last value: ${JSON.stringify(value)}`);
    await sleep(20);
  }
}
