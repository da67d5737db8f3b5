// The one base of every error class pgdrain defines. `code` is stable across releases: switch on it
// (or on `instanceof` the class) rather than on a message. The classes and their codes are listed
// in docs/adopting.md. Bounds checks still throw the built-in TypeError and RangeError, whose
// messages name the field.
export abstract class PgdrainError extends Error {
  /** A stable, machine-readable code (`lease_lost`, `invalid_payload`, …). */
  abstract readonly code: string;
}
