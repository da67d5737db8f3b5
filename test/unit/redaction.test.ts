// Secrets never reach logs: connection strings inside error messages are masked, and a failed
// statement is told by the database's words, not by its text and parameters.
import { expect, it } from 'vitest';
import { DrizzleQueryError } from 'drizzle-orm/errors';
import { redactUrl, safeErrorMessage } from '../../src/db/url.ts';
import { errorText } from '../../src/json.ts';

it('masks the password of every connection string in an error message, and keeps the rest', () => {
  const error = new Error('connect to postgres://app:s3cr3t@db.internal:5432/app failed; also postgresql://u:pw2@h/d');
  const message = safeErrorMessage(error);
  expect(message).not.toContain('s3cr3t');
  expect(message).not.toContain('pw2');
  expect(message).toContain('postgres://app:***@db.internal:5432/app');
  expect(message).toContain('failed');
  expect(safeErrorMessage('plain text')).toBe('plain text');
  expect(redactUrl('not a url')).toBe('(unparseable database URL)');
});

it('masks the secrets a connection string can carry in its parameters, and those of key=value connection strings', () => {
  expect(redactUrl('postgres://u@db:5432/app?password=s3cr3t&sslmode=require')).toBe(
    'postgres://u@db:5432/app?password=***&sslmode=require',
  );
  expect(redactUrl('postgres://u:pw@db/app?PASSWORD=a&sslpassword=b')).toBe(
    'postgres://u:***@db/app?PASSWORD=***&sslpassword=***',
  );
  const message = safeErrorMessage(
    new Error(
      `bad "host=db user=app password=s3cr3t sslpassword='two words' dbname=x" and postgres://u@h/d?password=pw3`,
    ),
  );
  expect(message).toBe(
    `bad "host=db user=app password=*** sslpassword=*** dbname=x" and postgres://u@h/d?password=***`,
  );
  expect(safeErrorMessage('password = hunter2 and Password=x')).toBe('password = *** and Password=***');
});

it("a failed statement is told in the database's own words, never by its text or parameters", () => {
  const refused = Object.assign(new Error('sorry, too many clients already'), { name: 'error', code: '53300' });
  const wrapped = new DrizzleQueryError(
    "UPDATE pgdrain.jobs SET status = 'dead' WHERE id = $1",
    ['{"card": "4111 1111 1111 1111"}'],
    refused,
  );
  for (const text of [safeErrorMessage(wrapped), errorText(wrapped)]) {
    expect(text).toBe('sorry, too many clients already (SQLSTATE 53300)');
  }
  // A connection that went: the driver's words.
  const lost = new DrizzleQueryError('rollback', [], new Error('Connection terminated unexpectedly'));
  expect(errorText(lost)).toBe('Connection terminated unexpectedly');
  // A wrapper with no cause says so, and shows nothing of the statement.
  expect(safeErrorMessage(new DrizzleQueryError('SELECT secret', ['x'], undefined as never))).toBe(
    'a statement failed (the database gave no reason)',
  );
  // A handler's own error is as it was.
  expect(errorText(new TypeError('bad input'))).toBe('TypeError: bad input');
});
