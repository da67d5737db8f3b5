// Runs the sidecar as a real child process (test/fixtures/sidecar-with-test-kinds.ts).
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const FIXTURE = fileURLToPath(new URL('../fixtures/sidecar-with-test-kinds.ts', import.meta.url));
/** Loads drizzle-orm as the `pgdrain` command does (quick-drizzle.ts). */
export const QUICK_DRIZZLE = fileURLToPath(new URL('./quick-drizzle.ts', import.meta.url));

export interface SidecarProcess {
  child: ChildProcess;
  url: string;
  stdout: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** Ends the process if it is still running (for afterEach). */
  kill(): void;
}

/** `fixture`: another sidecar script (the chaos suite's); default the one with the `record` kind.
 * `untilStarted: false` returns at once (url ''), for a process that may stop before it says it started.
 * `args`: the script's arguments (`pgdrain start --jobs FILE`: the CLI as the script). */
export async function startSidecarProcess(
  env: Record<string, string>,
  fixture = FIXTURE,
  { untilStarted = true, args = [] }: { untilStarted?: boolean; args?: readonly string[] } = {},
): Promise<SidecarProcess> {
  const child = spawn(process.execPath, ['--import', QUICK_DRIZZLE, fixture, ...args], {
    env: {
      PATH: process.env.PATH ?? '',
      NODE_EXTRA_CA_CERTS: process.env.NODE_EXTRA_CA_CERTS ?? '',
      PORT: '0',
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const waiters = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    out += chunk.toString();
    for (const w of waiters) w();
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => {
      for (const w of waiters) w();
      resolve({ code, signal });
    });
  });
  const waitForOutput = (pattern: RegExp, timeoutMs = 20_000) =>
    new Promise<string>((resolve, reject) => {
      const check = () => {
        const m = pattern.exec(out);
        if (m) {
          cleanup();
          resolve(m[1] ?? m[0]);
        } else if (child.exitCode !== null || child.signalCode !== null) {
          cleanup();
          reject(new Error(`sidecar exited before printing ${pattern}:\n${out}`));
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`sidecar did not print ${pattern} within ${timeoutMs} ms:\n${out}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        waiters.delete(check);
      };
      waiters.add(check);
      check();
    });
  const url = untilStarted ? await waitForOutput(/"url":"(http:\/\/[^"]+)".*"msg":"sidecar started"/) : '';
  return {
    child,
    url,
    stdout: () => out,
    exited,
    waitForOutput,
    kill: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}
