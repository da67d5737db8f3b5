// Every error the API answers is `{"error": {"code", "message"}}` with a 4xx or 5xx status. A route
// throws an ApiError for what the caller did wrong; a value the database refused is a 400 or 413
// (logged, unless one of pgdrain's SQL functions refused it on purpose); anything else is logged
// (without secrets) and answered 503 when the database is out of reach, 500 otherwise.
import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { databaseFailure, databaseRefusal } from '../db/errors.ts';
import type { AppEnv } from './context.ts';
import { PgdrainError } from '../errors.ts';

export class ApiError extends PgdrainError {
  readonly status: ContentfulStatusCode;
  readonly code: string;
  constructor(status: ContentfulStatusCode, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const jobNotFound = (id: string) =>
  new ApiError(404, 'not_found', `job ${id} does not exist (completed jobs are deleted)`);

/** app.onError: the error as JSON with its status. */
export function answerError(error: Error, c: Context<AppEnv>): Response {
  if (error instanceof ApiError) {
    // The rest of an oversized body was never read: a keep-alive client's next request on this
    // connection would be read from the middle of it. Say the connection ends here.
    const headers: Record<string, string> = error.status === 413 ? { Connection: 'close' } : {};
    return c.json({ error: { code: error.code, message: error.message } }, error.status, headers);
  }
  const refusal = databaseRefusal(error);
  if (!refusal?.expected) c.get('api')?.onError?.(error, `${c.req.method} ${c.req.routePath}`);
  if (refusal) return c.json({ error: { code: refusal.code, message: refusal.message } }, refusal.status);
  const failure = databaseFailure(error);
  if (failure) return c.json({ error: { code: failure.code, message: failure.message } }, failure.status);
  return c.json(
    {
      error: {
        code: 'internal',
        message: 'an unexpected error occurred; nothing was changed if the request was an enqueue',
      },
    },
    500,
  );
}
