// TLS for tests: a certificate authority of the test's own and a server certificate it signed (for
// localhost and 127.0.0.1), made with openssl, and an embedded PostgreSQL with `ssl = on` that uses
// them. As root the server runs as the `postgres` user, which must own its key.
import { execFileSync } from 'node:child_process';
import { chmod, chown, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { type EmbeddedServer, startEmbeddedPostgres } from '../../src/db/embedded.ts';
import { postgresUser } from './pgbouncer.ts';

export interface TestCertificates {
  dir: string;
  /** The CA's certificate: what `sslrootcert` names. */
  ca: string;
  cert: string;
  key: string;
}

/** A CA and a server certificate for localhost and 127.0.0.1, in a new folder. */
export async function makeCertificates(): Promise<TestCertificates> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-tls-'));
  await chmod(dir, 0o755);
  const file = (name: string) => path.join(dir, name);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  openssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '2',
    '-subj',
    '/CN=pgdrain test CA',
    '-keyout',
    file('ca.key'),
    '-out',
    file('ca.crt'),
  );
  openssl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=localhost',
    '-keyout',
    file('server.key'),
    '-out',
    file('server.csr'),
  );
  await writeFile(file('san.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  openssl(
    'x509',
    '-req',
    '-in',
    file('server.csr'),
    '-CA',
    file('ca.crt'),
    '-CAkey',
    file('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    file('san.ext'),
    '-out',
    file('server.crt'),
  );
  await chmod(file('server.key'), 0o600);
  await chmod(file('ca.crt'), 0o644);
  await chmod(file('server.crt'), 0o644);
  return { dir, ca: file('ca.crt'), cert: file('server.crt'), key: file('server.key') };
}

/** An embedded PostgreSQL with `ssl = on` and `certificates` (its URL has no TLS setting). */
export async function startTlsPostgres(
  certificates: TestCertificates,
): Promise<EmbeddedServer & { remove(): Promise<void> }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-tls-server-'));
  await chmod(dir, 0o755);
  if (process.getuid?.() === 0) {
    // The package creates the `postgres` user at its first start; the key must be that user's.
    const { uid, gid } = postgresUser();
    await chown(certificates.key, uid, gid);
  }
  const server = await startEmbeddedPostgres({
    dataDir: path.join(dir, 'data'),
    password: 'tls-test-password',
    settings: { fsync: 'off', ssl: 'on', ssl_cert_file: certificates.cert, ssl_key_file: certificates.key },
  });
  return {
    ...server,
    remove: async () => {
      await server.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
