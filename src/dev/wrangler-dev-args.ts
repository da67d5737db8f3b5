// The arguments of `wrangler dev` as pgdrain runs it locally (npm run dev:worker, the tests'
// fixture Workers, the benchmark's): on 127.0.0.1 at `port`, the cron handler reachable at
// /__scheduled, settings and secrets from an env file only the owner reads (never the command
// line), and the local state (the queue's clock's Durable Object) in `stateDir`, beside the
// database it caches rather than in a shared .wrangler/.
export function wranglerDevArgs(options: {
  port: number;
  envFile: string;
  stateDir: string;
  config?: string;
}): string[] {
  return [
    'dev',
    ...(options.config ? ['--config', options.config] : []),
    '--ip',
    '127.0.0.1',
    '--port',
    String(options.port),
    '--test-scheduled',
    '--env-file',
    options.envFile,
    '--persist-to',
    options.stateDir,
  ];
}
