// Secrets never reach logs: connection strings inside error messages are masked.
import { expect, it } from 'vitest';
import { redactUrl, safeErrorMessage } from '../src/db/url.ts';

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
