// The sidecar's log: readable lines when a person is watching (stdout is a terminal), JSON lines
// for everything else (a pipe, a file, a log collector). LOG_FORMAT=json|pretty overrides.
// pino-pretty runs as a plain stream in this process (not pino's worker-thread transport), so a
// line is written before the process can exit on a signal.
import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';

export type LogFormat = 'json' | 'pretty';

/** The format a logger without an explicit one writes: readable on a terminal, JSON otherwise. */
export const logFormatFor = (format?: LogFormat): LogFormat => format ?? (process.stdout.isTTY ? 'pretty' : 'json');

export function createLogger(options: { level?: string; format?: LogFormat } = {}): Logger {
  const format = logFormatFor(options.format);
  const settings = { level: options.level ?? 'info', base: { app: 'pgdrain' } };
  if (format === 'json') return pino(settings);
  return pino(
    settings,
    pretty({
      colorize: process.stdout.isTTY === true,
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname,app',
      sync: true,
    }),
  );
}
