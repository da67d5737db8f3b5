// Every error class pgdrain defines extends PgdrainError with a stable code (docs/adopting.md's
// table): checked by importing each and by scanning src/ for a class that extends Error directly.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { PgdrainApiError } from '../../src/client/index.ts';
import { PgdrainError as FromClient } from '../../src/entry/client.ts';
import {
  EventValidationError,
  JobCancelledError,
  JobValidationError,
  LeaseLostError,
  MigrationWaitError,
  NamedStatementsLost,
  PermanentJobError,
  PgdrainError,
  RetryLaterError,
  StepTimeoutError,
  UnknownDependencyError,
} from '../../src/entry/index.ts';
import { HandlerAbandonedError } from '../../src/drain/run-handler.ts';
import { SettingsError } from '../../src/settings.ts';

it('every error class the docs list is a PgdrainError with its stable code', () => {
  const cases: [Error, string][] = [
    [new JobValidationError('invalid_payload', 'x'), 'invalid_payload'],
    [new UnknownDependencyError(['1']), 'unknown_dependency'],
    [new EventValidationError('key', 'x'), 'invalid_event'],
    [new PermanentJobError('x'), 'permanent_failure'],
    [new StepTimeoutError('x'), 'step_timeout'],
    [new RetryLaterError('x', 5), 'retry_later'],
    [new JobCancelledError('x'), 'job_cancelled'],
    [new LeaseLostError('x'), 'lease_lost'],
    [new HandlerAbandonedError('x'), 'handler_abandoned'],
    [new MigrationWaitError('x'), 'migration_wait'],
    [new NamedStatementsLost(new Error('x')), 'named_statements_lost'],
    [new SettingsError([{ env: 'PORT', message: 'x' }]), 'invalid_settings'],
    [new PgdrainApiError(404, 'not_found', 'x'), 'not_found'],
  ];
  for (const [error, code] of cases) {
    expect(error).toBeInstanceOf(PgdrainError);
    expect(error).toBeInstanceOf(Error);
    expect((error as PgdrainError).code).toBe(code);
    expect(error.name).toBe(error.constructor.name); // last_error keeps its "Name: message" form
  }
  expect(FromClient).toBe(PgdrainError);
});

// The dashboard's browser script (src/http/dashboard/browser) runs in the page, not in the package.
it('no class in src/ extends Error (or TypeError, RangeError) directly but PgdrainError', () => {
  const src = fileURLToPath(new URL('../../src', import.meta.url));
  const files = (dir: string): string[] =>
    readdirSync(dir).flatMap((e) =>
      statSync(path.join(dir, e)).isDirectory()
        ? files(path.join(dir, e))
        : e.endsWith('.ts')
          ? [path.join(dir, e)]
          : [],
    );
  const packaged = files(src).filter((file) => !file.includes(`${path.sep}dashboard${path.sep}browser${path.sep}`));
  const direct = packaged.flatMap((file) =>
    [...readFileSync(file, 'utf8').matchAll(/class (\w+) extends (?:Error|TypeError|RangeError)\b/g)]
      .map((m) => `${path.relative(src, file)}: ${m[1]}`)
      .filter((found) => !found.endsWith(': PgdrainError')),
  );
  expect(direct).toEqual([]);
});
