// A free port is only free until someone binds it: a test or benchmark process beside this one can
// take it between freePort() and the server's own bind ("Address already in use"; CI under load
// failed that way). The starters of wrangler dev (fixture-worker.ts, worker-dev-process.ts,
// bench/wrangler-dev.ts) start again on another port when that is why they failed.

/** The message a server that lost its port leaves in its output (wrangler and workerd alike). */
export const PORT_TAKEN = 'Address already in use';

/** start(), tried again (`attempts` times in all) when it failed because its port was taken. */
export async function startOnFreePort<T>(start: () => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start();
    } catch (error) {
      if (attempt >= attempts || !String(error).includes(PORT_TAKEN)) throw error;
    }
  }
}
