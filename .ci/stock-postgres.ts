// CI on a stock server: Debian's PostgreSQL (apt-get install -y postgresql; 15 on Debian 12, with its
// LLVM JIT on) started with its default settings (test/support/stock-postgres.ts), then the queue's
// conformance suite, the HTTP contract, the SQL face, the workflow suites, the flow-control and
// workflow process tests and the stock-server checks (no statement JIT-compiled, serial kinds back
// to back) against it through DATABASE_URL, then `bench --quick --server stock`. Exits with the first
// failure's code. `node .ci/stock-postgres.ts --suites-only` skips the benchmark.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startStockPostgres } from '../test/support/stock-postgres.ts';

const SUITES = [
  'test/queue.node-postgres.test.ts',
  'test/http-api.test.ts',
  'test/sql-enqueue.test.ts',
  'test/flow-control-processes.test.ts',
  'test/workflow-processes.test.ts',
  'test/stock-server.test.ts',
  'test/queue-vacuum.test.ts',
];
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const suitesOnly = process.argv.includes('--suites-only');

const run = (cmd: string, args: string[], env: Record<string, string>) =>
  new Promise<number>((resolve) => {
    const child = spawn(cmd, args, { cwd: root, env: { ...process.env, ...env }, stdio: 'inherit' });
    child.on('exit', (code) => resolve(code ?? 1));
  });

const server = await startStockPostgres();
console.log(`stock-postgres: ${server.version} on 127.0.0.1:${server.port}, default settings (JIT on)`);
let code = 1;
try {
  const env = { DATABASE_URL: server.url, PGDRAIN_STOCK_SERVER: '1' };
  code = await run(path.join(root, 'node_modules', '.bin', 'vitest'), ['run', '--project', 'node', ...SUITES], env);
} finally {
  await server.stop();
}
// The benchmark starts a stock server of its own (it reads the postmaster's CPU), and fails when a
// statement of pgdrain's was JIT-compiled there.
if (code === 0 && !suitesOnly) code = await run(process.execPath, ['bench/run.ts', '--quick', '--server', 'stock'], {});
console.log(`stock-postgres: ${server.version}: ${code === 0 ? 'passed' : 'FAILED'}`);
process.exit(code);
