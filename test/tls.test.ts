// TLS as libpq means it, against a PostgreSQL with `ssl = on` and a certificate signed by a CA of
// the test's own (not one the system trusts): `sslmode=require` encrypts without verifying, as psql
// does (node-postgres alone refused it: "self-signed certificate"); `verify-full` with
// `sslrootcert` verifies, and without the CA refuses, saying why; PGSSLMODE and PGSSLROOTCERT are
// honoured. On the paths users take: `pgdrain migrate`, `pgdrain start` (every connection it opens
// encrypted), the operator's CLI. docs/postgres.md (TLS).
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { libpqUrl } from '../src/db/url.ts';
import { QUICK_DRIZZLE, startSidecarProcess } from './support/sidecar-process.ts';
import { type TestCertificates, makeCertificates, startTlsPostgres } from './support/tls.ts';

const CLI = fileURLToPath(new URL('../src/entry/cli.ts', import.meta.url));

let certificates: TestCertificates;
let server: Awaited<ReturnType<typeof startTlsPostgres>>;
/** The server's URL on `host`, with `params`. */
const urlWith = (params: Record<string, string>, host = '127.0.0.1') => {
  const url = new URL(server.url);
  url.hostname = host;
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  return url.toString();
};

beforeAll(async () => {
  certificates = await makeCertificates();
  server = await startTlsPostgres(certificates);
}, 120_000);
afterAll(async () => {
  await server?.remove();
  if (certificates) await rm(certificates.dir, { recursive: true, force: true });
});

/** `pgdrain <args>` with `env`: how it ended and what it said. */
function pgdrain(args: string[], env: Record<string, string>) {
  const child = spawn(process.execPath, ['--import', QUICK_DRIZZLE, CLI, ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return new Promise<{ code: number | null; output: string }>((resolve) =>
    child.on('exit', (code) => resolve({ code, output })),
  );
}

/** Whether a connection of `url`, opened as pgdrain opens one, is encrypted (pg_stat_ssl). */
async function encrypted(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: libpqUrl(url) });
  await client.connect();
  try {
    return (await client.query('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()')).rows[0].ssl;
  } finally {
    await client.end();
  }
}

describe('sslmode as libpq means it', () => {
  it('require encrypts without verifying; verify-ca and verify-full check the CA given by sslrootcert', async () => {
    expect(await encrypted(urlWith({ sslmode: 'require' }))).toBe(true);
    expect(await encrypted(urlWith({ sslmode: 'verify-ca', sslrootcert: certificates.ca }))).toBe(true);
    expect(await encrypted(urlWith({ sslmode: 'verify-full', sslrootcert: certificates.ca }, 'localhost'))).toBe(true);
    expect(await encrypted(urlWith({ sslmode: 'disable' }))).toBe(false);
    expect(await encrypted(urlWith({}))).toBe(false);
    // Verifying without the CA that signed the certificate is refused, saying why.
    await expect(encrypted(urlWith({ sslmode: 'verify-full' }, 'localhost'))).rejects.toThrow(/certificate/);
    // PGSSLMODE and PGSSLROOTCERT stand in for the URL's.
    const fromEnv = libpqUrl(urlWith({}, 'localhost'), { PGSSLMODE: 'verify-full', PGSSLROOTCERT: certificates.ca });
    expect(await encrypted(fromEnv)).toBe(true);
    expect(new URL(fromEnv).searchParams.get('sslrootcert')).toBe(certificates.ca);
  });

  it('pgdrain migrate, the operator CLI and pgdrain start work with sslmode=require, every connection encrypted', async () => {
    const url = urlWith({ sslmode: 'require' });
    const migrated = await pgdrain(['migrate'], { DATABASE_URL: url });
    expect(migrated, migrated.output).toMatchObject({ code: 0 });
    expect(migrated.output).toMatch(/(is|was) up to date/);
    // With PGSSLMODE instead of the URL's parameter, and verify-full against the CA.
    const stats = await pgdrain(['stats', '--json'], {
      DATABASE_URL: urlWith({}, 'localhost'),
      PGSSLMODE: 'verify-full',
      PGSSLROOTCERT: certificates.ca,
    });
    expect(stats, stats.output).toMatchObject({ code: 0 });
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-tls-sidecar-'));
    const sidecar = await startSidecarProcess({
      DATABASE_URL: url,
      PGDRAIN_DATA_DIR: dataDir,
      API_TOKEN: 'tls-test-token-0123',
      LOG_FORMAT: 'json',
    });
    try {
      const res = await fetch(`${sidecar.url}/jobs`, {
        method: 'POST',
        headers: { authorization: 'Bearer tls-test-token-0123', 'content-type': 'application/json' },
        body: JSON.stringify({ kind: 'noop', payload: {} }),
      });
      expect(res.status).toBe(201);
      const admin = new pg.Client({ connectionString: libpqUrl(url) });
      await admin.connect();
      try {
        // Its pools, listener and identity: every connection of the sidecar's process is encrypted.
        const { rows } = await admin.query(
          `SELECT a.application_name, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
            WHERE a.application_name LIKE 'pgdrain%' AND a.pid <> pg_backend_pid()`,
        );
        expect(rows.length).toBeGreaterThan(1);
        for (const row of rows) expect(row, row.application_name).toMatchObject({ ssl: true });
      } finally {
        await admin.end();
      }
    } finally {
      sidecar.child.kill('SIGTERM');
      await sidecar.exited;
      await rm(dataDir, { recursive: true, force: true });
    }
  }, 90_000);
});
