// `pgdrain start` (src/entry/cli.ts): the sidecar configured from the environment, stopped
// gracefully by SIGINT/SIGTERM.
// A second signal exits at once; jobs still running then are returned later by the reaper. One that
// comes with the first is the same request: under `npm start` a Ctrl-C or a supervisor's SIGTERM to
// the process group reaches the sidecar twice, from the kernel and passed on by npm. A signal while
// it starts calls the start off: it exits within START_STOP_MS (15 s), at any stage.
import { safeErrorMessage } from '../db/url.ts';
import { PgdrainError } from '../errors.ts';
import type { JobDefinition } from '../jobs/index.ts';
import type { ScheduleDefinition } from '../schedules.ts';
import { sidecarOptionsFromEnv } from './config.ts';
import { startSidecar } from './index.ts';

/** A signal this soon after the first is the first one again, passed on by npm (see above). */
const SAME_SIGNAL_MS = 1_000;

export async function runSidecarCli(
  jobs: readonly JobDefinition<any>[] = [],
  schedules: readonly ScheduleDefinition[] = [],
): Promise<void> {
  let sidecar: Awaited<ReturnType<typeof startSidecar>> | undefined;
  let stopRequested = false;
  let firstSignalAt: number | undefined;
  const stop = (started: NonNullable<typeof sidecar>) =>
    started.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        console.error(`pgdrain: shutdown failed: ${safeErrorMessage(error)}`);
        process.exit(1);
      },
    );
  // Listening before the start: the drainer runs jobs before the rest has started (the HTTP
  // server last), and a signal in that window must stop it gracefully, not kill it mid-batch.
  // A signal while starting (migrating, waiting for another replica's migration) calls the start
  // off: what started is stopped, and the process exits within START_STOP_MS whatever it waited on.
  const starting = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => {
    if (firstSignalAt !== undefined) {
      if (performance.now() - firstSignalAt < SAME_SIGNAL_MS) return;
      console.error(`pgdrain: second ${signal}: exiting now; running jobs will be returned by the reaper`);
      process.exit(130);
    }
    firstSignalAt = performance.now();
    stopRequested = true;
    if (sidecar) void stop(sidecar);
    else {
      starting.abort(new StartCalledOff(`${signal} while starting`));
      setTimeout(() => {
        console.error(`pgdrain: ${signal} while starting: not stopped within ${START_STOP_MS / 1000} s; exiting now`);
        process.exit(1);
      }, START_STOP_MS).unref();
    }
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    sidecar = await startSidecar({
      ...sidecarOptionsFromEnv(process.env),
      jobs,
      schedules,
      signal: starting.signal,
    });
  } catch (error) {
    if (error instanceof StartCalledOff) {
      console.error(`pgdrain: ${error.message}: stopped before it had started`);
      process.exit(0);
    }
    console.error(`pgdrain: could not start: ${safeErrorMessage(error)}`);
    process.exit(1);
  }
  // A signal came while it was starting: stop now that there is something to stop.
  if (stopRequested) void stop(sidecar);
}

/** A stop asked for while the sidecar was starting, and how long it may take. */
class StartCalledOff extends PgdrainError {
  override name = 'StartCalledOff';
  readonly code = 'start_called_off';
}
const START_STOP_MS = 15_000;
