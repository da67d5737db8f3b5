// Secrets never reach logs: connection strings inside error messages are masked.
import { expect, it } from 'vitest';
import { redactUrl, safeErrorMessage } from '../../src/db/url.ts';

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
