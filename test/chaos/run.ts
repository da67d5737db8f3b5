// npm run chaos [-- --long [--minutes N]]: the chaos suite by hand. Short by default (as in
// npm test); --long runs N minutes (default 10) at a steady enqueue rate and reports memory.
import { LONG_CHAOS, SHORT_CHAOS, runChaos } from './chaos.ts';

const args = process.argv.slice(2);
const long = args.includes('--long');
const minutes = args.includes('--minutes') ? Number(args[args.indexOf('--minutes') + 1]) : 10;
const report = await runChaos(
  long
    ? { ...LONG_CHAOS, durationMs: minutes * 60_000, log: (l) => console.log(l) }
    : { ...SHORT_CHAOS, log: (l) => console.log(l) },
);
console.log(JSON.stringify(report, null, 2));
const ok =
  report.lost.length === 0 &&
  report.duplicatedOutsideFaults.length === 0 &&
  report.leftRunning === 0 &&
  report.leftPending === 0 &&
  report.leftWaiting === 0 &&
  report.stuckAtStop.length === 0 &&
  report.countersMatch &&
  report.flowsNotCompleted.length === 0 &&
  report.transactionalWritesNotOnce.length === 0 &&
  report.plainStepsRepeatedOutsideFaults.length === 0 &&
  report.limitsExceeded.length === 0 &&
  report.flows.completed === report.flows.runs &&
  report.batch.completed + report.batch.dead === report.batch.items;
console.log(ok ? 'chaos: nothing lost' : 'chaos: FAILED');
process.exit(ok ? 0 : 1);
