// Waiting in tests, the same in Node and inside workerd (the conformance suites run in both).
/** Resolves after `ms`. */
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
