// The sidecar's parts (src/sidecar/parts.ts): stopped last first, each once; a part that does not
// stop in its time is logged and left, so that a stop always ends (a sidecar once hung for ever on
// a pool whose end() waited for a leaked client; the leak is fixed, the bound stays).
import pino from 'pino';
import { expect, it } from 'vitest';
import { Parts } from '../../src/sidecar/parts.ts';

function recordingLog() {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { log, lines };
}

it('stops every part last first, once, and goes past one that never stops after its time', async () => {
  const { log, lines } = recordingLog();
  const parts = new Parts(log);
  const stopped: string[] = [];
  await parts.start('first', () => ({ stop: () => void stopped.push('first') }));
  await parts.start('stuck', () => ({ stop: () => new Promise<void>(() => {}) }), { stopWithinMs: 50 });
  await parts.start('failing', () => ({ stop: () => Promise.reject(new Error('boom')) }));
  await parts.start('last', () => ({ stop: () => void stopped.push('last') }));
  const startedAt = Date.now();
  await Promise.all([parts.stopAll(), parts.stopAll()]);
  expect(Date.now() - startedAt).toBeLessThan(5_000);
  expect(stopped).toEqual(['last', 'first']);
  expect(lines.map((l) => [l.part, l.msg])).toEqual([
    ['failing', 'a part of the sidecar did not stop cleanly'],
    ['stuck', 'a part of the sidecar did not stop in time: left behind so that the stop ends'],
  ]);
  await expect(parts.start('late', () => ({ stop: () => {} }))).rejects.toThrow(/stopping/);
});
