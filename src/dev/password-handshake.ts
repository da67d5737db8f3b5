// The local WebSocket proxy's side of a connection's start-up, done the way Neon's own proxy does
// it: the client authenticates to the proxy with a cleartext password (which lets Neon's driver
// send its start-up message, the password and its first query at once: `pipelineConnect`), and
// the proxy authenticates to PostgreSQL itself (SCRAM-SHA-256, MD5 or cleartext, whichever the
// server asks for), next to the database. Without it a local connection pays SCRAM's round trips
// across the proxy's added delay and its key derivation inside the Worker, which Neon's endpoint
// does not. Node only, never deployed; the proxy listens on 127.0.0.1 only.
//
//   ClientGreeting  reads the client's start-up message and password (asking for it in cleartext)
//   ServerLogin     logs in to PostgreSQL with them and keeps what the server says once logged in
//                   (parameters, backend key, ready): the "hello" a pooled backend replays to its
//                   next client
import { createHash, createHmac, pbkdf2Sync, randomBytes, timingSafeEqual } from 'node:crypto';

const PROTOCOL_3 = 196608;
const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;

const AUTH_OK = 0;
const AUTH_CLEARTEXT = 3;
const AUTH_MD5 = 5;
const AUTH_SASL = 10;
const AUTH_SASL_CONTINUE = 11;
const AUTH_SASL_FINAL = 12;

export interface Greeting {
  /** The client's StartupMessage, as sent. */
  startup: Buffer;
  user: string;
  password: string;
  /** What the client sent after its password (a pipelined first query). */
  rest: Buffer;
}

/** The client's side of the start-up, until its password is known. A CancelRequest is passed on
 * as it is (`onCancel`): it carries its own key, no password. */
export class ClientGreeting {
  #bytes = Buffer.alloc(0);
  #startup: Buffer | null = null;
  #user = '';
  #finished = false;
  readonly #toClient: (bytes: Buffer) => void;
  readonly #onGreeting: (greeting: Greeting) => void;
  readonly #onCancel: (request: Buffer) => void;
  readonly #fail: (why: string) => void;

  constructor(handlers: {
    toClient(bytes: Buffer): void;
    onGreeting(greeting: Greeting): void;
    onCancel(request: Buffer): void;
    fail(why: string): void;
  }) {
    this.#toClient = handlers.toClient;
    this.#onGreeting = handlers.onGreeting;
    this.#onCancel = handlers.onCancel;
    this.#fail = handlers.fail;
  }

  get finished(): boolean {
    return this.#finished;
  }

  read(chunk: Buffer): void {
    this.#bytes = Buffer.concat([this.#bytes, chunk]);
    while (!this.#finished && this.#startup === null && this.#bytes.length >= 8) {
      const length = this.#bytes.readInt32BE(0);
      if (this.#bytes.length < length) return;
      const code = this.#bytes.readInt32BE(4);
      const message = this.#bytes.subarray(0, length);
      this.#bytes = this.#bytes.subarray(length);
      if (code === SSL_REQUEST || code === GSSENC_REQUEST) {
        this.#toClient(Buffer.from('N')); // no encryption on the loopback
      } else if (code === CANCEL_REQUEST) {
        this.#finished = true;
        this.#onCancel(message);
      } else if (code === PROTOCOL_3) {
        this.#startup = message;
        const params = message.subarray(8).toString('utf8').split('\0');
        for (let i = 0; i + 1 < params.length; i += 2) if (params[i] === 'user') this.#user = params[i + 1]!;
        this.#toClient(authRequest(AUTH_CLEARTEXT));
      } else {
        this.#finished = true;
        this.#fail(`unsupported start-up code ${code}`);
      }
    }
    if (this.#finished || this.#startup === null || this.#bytes.length < 5) return;
    const length = this.#bytes.readInt32BE(1);
    if (this.#bytes.length < 1 + length) return;
    this.#finished = true;
    if (this.#bytes[0] !== 0x70) {
      this.#fail('the client did not send a password');
      return;
    }
    const password = this.#bytes.subarray(5, length).toString('utf8');
    this.#onGreeting({ startup: this.#startup, user: this.#user, password, rest: this.#bytes.subarray(1 + length) });
  }
}

/** Logs in to PostgreSQL for a greeted client. `onLoggedIn` gets the server's hello (from
 * AuthenticationOk to the first ReadyForQuery) and any bytes after it; an error or notice before
 * that goes to the client as the server sent it. */
export class ServerLogin {
  #bytes = Buffer.alloc(0);
  #hello: Buffer | null = null;
  #finished = false;
  #scram: { nonce: string; clientFirstBare: string; serverSignature?: Buffer } | null = null;
  readonly #greeting: Greeting;
  readonly #toServer: (bytes: Buffer) => void;
  readonly #toClient: (bytes: Buffer) => void;
  readonly #onLoggedIn: (hello: Buffer, rest: Buffer) => void;
  readonly #fail: (why: string) => void;

  constructor(
    greeting: Greeting,
    handlers: {
      toServer(bytes: Buffer): void;
      toClient(bytes: Buffer): void;
      onLoggedIn(hello: Buffer, rest: Buffer): void;
      fail(why: string): void;
    },
  ) {
    this.#greeting = greeting;
    this.#toServer = handlers.toServer;
    this.#toClient = handlers.toClient;
    this.#onLoggedIn = handlers.onLoggedIn;
    this.#fail = handlers.fail;
    this.#toServer(greeting.startup);
  }

  get finished(): boolean {
    return this.#finished;
  }

  read(chunk: Buffer): void {
    this.#bytes = Buffer.concat([this.#bytes, chunk]);
    while (!this.#finished && this.#bytes.length >= 5) {
      const length = this.#bytes.readInt32BE(1);
      if (this.#bytes.length < 1 + length) return;
      const message = this.#bytes.subarray(0, 1 + length);
      this.#bytes = this.#bytes.subarray(1 + length);
      const type = String.fromCharCode(message[0]!);
      if (this.#hello !== null) {
        this.#hello = Buffer.concat([this.#hello, message]);
        if (type === 'Z') {
          this.#finished = true;
          this.#onLoggedIn(this.#hello, this.#bytes);
        }
      } else if (type === 'R' && message.readInt32BE(5) === AUTH_OK) {
        this.#hello = message;
      } else if (type === 'R') {
        this.#answer(message.readInt32BE(5), message.subarray(9));
      } else {
        // An error (a bad password, an unknown database) or a notice: the client reads it as it would.
        this.#toClient(message);
      }
    }
  }

  #answer(code: number, data: Buffer): void {
    const { password, user } = this.#greeting;
    if (code === AUTH_CLEARTEXT) {
      this.#toServer(passwordMessage(Buffer.from(`${password}\0`)));
    } else if (code === AUTH_MD5) {
      const inner = createHash('md5')
        .update(password + user)
        .digest('hex');
      const outer = createHash('md5').update(inner).update(data.subarray(0, 4)).digest('hex');
      this.#toServer(passwordMessage(Buffer.from(`md5${outer}\0`)));
    } else if (code === AUTH_SASL) {
      if (!data.toString('utf8').split('\0').includes('SCRAM-SHA-256')) {
        this.#fail('the server offers no SCRAM-SHA-256');
        return;
      }
      const nonce = randomBytes(18).toString('base64');
      const clientFirstBare = `n=,r=${nonce}`;
      this.#scram = { nonce, clientFirstBare };
      const first = Buffer.from(`n,,${clientFirstBare}`);
      const length = Buffer.alloc(4);
      length.writeInt32BE(first.length);
      this.#toServer(passwordMessage(Buffer.concat([Buffer.from('SCRAM-SHA-256\0'), length, first])));
    } else if (code === AUTH_SASL_CONTINUE && this.#scram) {
      const serverFirst = data.toString('utf8');
      const fields = Object.fromEntries(serverFirst.split(',').map((pair) => [pair[0], pair.slice(2)]));
      if (!fields.r?.startsWith(this.#scram.nonce) || !fields.s || !fields.i) {
        this.#fail('SCRAM: a malformed server-first message');
        return;
      }
      const salted = pbkdf2Sync(password, Buffer.from(fields.s, 'base64'), Number(fields.i), 32, 'sha256');
      const clientKey = hmac(salted, 'Client Key');
      const withoutProof = `c=biws,r=${fields.r}`;
      const authMessage = `${this.#scram.clientFirstBare},${serverFirst},${withoutProof}`;
      const signature = hmac(createHash('sha256').update(clientKey).digest(), authMessage);
      const proof = Buffer.from(clientKey.map((byte, i) => byte ^ signature[i]!));
      this.#scram.serverSignature = hmac(hmac(salted, 'Server Key'), authMessage);
      this.#toServer(passwordMessage(Buffer.from(`${withoutProof},p=${proof.toString('base64')}`)));
    } else if (code === AUTH_SASL_FINAL && this.#scram?.serverSignature) {
      const verifier = Buffer.from(data.toString('utf8').replace(/^v=/, ''), 'base64');
      if (verifier.length !== 32 || !timingSafeEqual(verifier, this.#scram.serverSignature))
        this.#fail('SCRAM: the server signature does not match');
    } else {
      this.#fail(`unsupported authentication request ${code}`);
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
