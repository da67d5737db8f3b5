// The local WebSocket proxy's side of a connection's start-up, done the way Neon's own proxy does
// it: the client authenticates to the proxy with a cleartext password (which lets Neon's driver
// send its start-up message, the password and its first query at once: `pipelineConnect`), and
// the proxy authenticates to PostgreSQL itself (SCRAM-SHA-256, MD5 or cleartext, whichever the
// server asks for), next to the database. Without it a local connection pays SCRAM's round trips
// across the proxy's added delay and its key derivation inside the Worker, which Neon's endpoint
// does not. Node only, never deployed; the proxy listens on 127.0.0.1 only.
import { createHash, createHmac, pbkdf2Sync, randomBytes, timingSafeEqual } from 'node:crypto';

const PROTOCOL_3 = 196608;
const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;

const AUTH_OK = 0;
const AUTH_CLEARTEXT = 3;
const AUTH_MD5 = 5;
const AUTH_SASL = 10;
const AUTH_SASL_CONTINUE = 11;
const AUTH_SASL_FINAL = 12;

/** One connection's start-up. Feed it the client's and the server's bytes until `done`; from then
 * on the proxy pipes bytes both ways untouched. */
export class PasswordHandshake {
  #client = Buffer.alloc(0);
  #server = Buffer.alloc(0);
  #state: 'startup' | 'password' | 'authenticating' | 'done' = 'startup';
  #user = '';
  #password: string | null = null;
  /** What the client sent after its password (a pipelined first query): sent on once authenticated. */
  #held: Buffer[] = [];
  #scram: { nonce: string; clientFirstBare: string; serverSignature?: Buffer } | null = null;

  private readonly toClient: (bytes: Buffer) => void;
  private readonly toServer: (bytes: Buffer) => void;
  private readonly fail: (why: string) => void;

  constructor(toClient: (bytes: Buffer) => void, toServer: (bytes: Buffer) => void, fail: (why: string) => void) {
    this.toClient = toClient;
    this.toServer = toServer;
    this.fail = fail;
  }

  get done(): boolean {
    return this.#state === 'done';
  }

  fromClient(chunk: Buffer): void {
    if (this.#state === 'authenticating') {
      this.#held.push(chunk);
      return;
    }
    this.#client = Buffer.concat([this.#client, chunk]);
    if (this.#state === 'startup') this.#readStartup();
    if (this.#state === 'password') this.#readPassword();
  }

  fromServer(chunk: Buffer): void {
    this.#server = Buffer.concat([this.#server, chunk]);
    this.#readServer();
  }

  #readStartup(): void {
    while (this.#state === 'startup' && this.#client.length >= 8) {
      const length = this.#client.readInt32BE(0);
      if (this.#client.length < length) return;
      const code = this.#client.readInt32BE(4);
      const message = this.#client.subarray(0, length);
      this.#client = this.#client.subarray(length);
      if (code === SSL_REQUEST || code === GSSENC_REQUEST) {
        this.toClient(Buffer.from('N')); // no encryption on the loopback
      } else if (code === PROTOCOL_3) {
        const params = message.subarray(8).toString('utf8').split('\0');
        for (let i = 0; i + 1 < params.length; i += 2) if (params[i] === 'user') this.#user = params[i + 1]!;
        this.toServer(message);
        this.toClient(authRequest(AUTH_CLEARTEXT));
        this.#state = 'password';
      } else {
        this.fail(`unsupported start-up code ${code}`);
        return;
      }
    }
  }

  #readPassword(): void {
    if (this.#client.length < 5) return;
    const length = this.#client.readInt32BE(1);
    if (this.#client.length < 1 + length) return;
    if (this.#client[0] !== 0x70) {
      this.fail('the client did not send a password');
      return;
    }
    this.#password = this.#client.subarray(5, 1 + length - 1).toString('utf8');
    const rest = this.#client.subarray(1 + length);
    this.#client = Buffer.alloc(0);
    if (rest.length > 0) this.#held.push(rest);
    this.#state = 'authenticating';
    this.#readServer();
  }

  #readServer(): void {
    while (this.#state !== 'done' && this.#server.length >= 5) {
      const length = this.#server.readInt32BE(1);
      if (this.#server.length < 1 + length) return;
      const type = String.fromCharCode(this.#server[0]!);
      if (type === 'R' && this.#server.readInt32BE(5) !== AUTH_OK) {
        if (this.#password === null) return; // answered once the client's password is here
        const message = this.#server.subarray(0, 1 + length);
        this.#server = this.#server.subarray(1 + length);
        this.#answer(message.readInt32BE(5), message.subarray(9));
        continue;
      }
      if (type === 'R') {
        // Authenticated: the client gets AuthenticationOk and all that follows, and the server what
        // the client sent after its password.
        this.#state = 'done';
        this.toClient(this.#server);
        this.#server = Buffer.alloc(0);
        for (const bytes of this.#held.splice(0)) this.toServer(bytes);
        return;
      }
      // An error (bad password, unknown database) or a notice: the client reads it as it would.
      const message = this.#server.subarray(0, 1 + length);
      this.#server = this.#server.subarray(1 + length);
      this.toClient(message);
    }
  }

  #answer(code: number, data: Buffer): void {
    const password = this.#password!;
    if (code === AUTH_CLEARTEXT) {
      this.toServer(passwordMessage(Buffer.from(`${password}\0`)));
    } else if (code === AUTH_MD5) {
      const inner = createHash('md5').update(password + this.#user).digest('hex');
      const outer = createHash('md5').update(inner).update(data.subarray(0, 4)).digest('hex');
      this.toServer(passwordMessage(Buffer.from(`md5${outer}\0`)));
    } else if (code === AUTH_SASL) {
      if (!data.toString('utf8').split('\0').includes('SCRAM-SHA-256')) return this.fail('the server offers no SCRAM-SHA-256');
      const nonce = randomBytes(18).toString('base64');
      const clientFirstBare = `n=,r=${nonce}`;
      this.#scram = { nonce, clientFirstBare };
      const first = Buffer.from(`n,,${clientFirstBare}`);
      const length = Buffer.alloc(4);
      length.writeInt32BE(first.length);
      this.toServer(passwordMessage(Buffer.concat([Buffer.from('SCRAM-SHA-256\0'), length, first])));
    } else if (code === AUTH_SASL_CONTINUE && this.#scram) {
      const serverFirst = data.toString('utf8');
      const fields = Object.fromEntries(serverFirst.split(',').map((pair) => [pair[0], pair.slice(2)]));
      if (!fields.r?.startsWith(this.#scram.nonce) || !fields.s || !fields.i) return this.fail('SCRAM: a malformed server-first message');
      const salted = pbkdf2Sync(password, Buffer.from(fields.s, 'base64'), Number(fields.i), 32, 'sha256');
      const clientKey = hmac(salted, 'Client Key');
      const withoutProof = `c=biws,r=${fields.r}`;
      const authMessage = `${this.#scram.clientFirstBare},${serverFirst},${withoutProof}`;
      const signature = hmac(createHash('sha256').update(clientKey).digest(), authMessage);
      const proof = Buffer.from(clientKey.map((byte, i) => byte ^ signature[i]!));
      this.#scram.serverSignature = hmac(hmac(salted, 'Server Key'), authMessage);
      this.toServer(passwordMessage(Buffer.from(`${withoutProof},p=${proof.toString('base64')}`)));
    } else if (code === AUTH_SASL_FINAL && this.#scram?.serverSignature) {
      const verifier = Buffer.from(data.toString('utf8').replace(/^v=/, ''), 'base64');
      if (verifier.length !== 32 || !timingSafeEqual(verifier, this.#scram.serverSignature)) this.fail('SCRAM: the server signature does not match');
    } else {
      this.fail(`unsupported authentication request ${code}`);
    }
  }
}

const hmac = (key: Buffer, text: string) => createHmac('sha256', key).update(text).digest();

function authRequest(code: number): Buffer {
  const message = Buffer.alloc(9);
  message.write('R', 0);
  message.writeInt32BE(8, 1);
  message.writeInt32BE(code, 5);
  return message;
}

function passwordMessage(body: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.write('p', 0);
  header.writeInt32BE(body.length + 4, 1);
  return Buffer.concat([header, body]);
}
