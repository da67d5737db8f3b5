// The claimer: sends the claims the planner decides on, and nothing else. Three statements:
//   - a kind limited across drainers: the limited claim, under the kind's own lock
//     (queries/claim-limited.ts);
//   - far from the database, with completions waiting: one statement that settles them and claims
//     (queries/complete-and-claim.ts), so a cycle costs one round trip instead of two — the settler
//     hands them over and hears back which it settled;
//   - otherwise the plain claim (queries/claim.ts).
import {
  type ClaimLimits,
  type ClaimOptions,
  type Db,
  claim,
  claimLimited,
  claimReportingNextDue,
  completeAndClaim,
} from '../queries/index.ts';
import type { ClaimOutcome } from './claim-planner.ts';
import type { Settler } from './settler.ts';

export interface ClaimerOptions {
  recordCounts: boolean;
  /** What a claim of these kinds lists: each kind's versions this drainer has (JobRegistry.claimNames). */
  claimNames: (kinds: readonly string[]) => string[];
}

export class Claimer {
  readonly #db: Db;
  readonly #settler: Settler;
  readonly #recordCounts: boolean;
  readonly #claimNames: ClaimerOptions['claimNames'];

  constructor(db: Db, settler: Settler, options: ClaimerOptions) {
    this.#db = db;
    this.#settler = settler;
    this.#recordCounts = options.recordCounts;
    this.#claimNames = options.claimNames;
  }

  /** A claim of `options.kinds` (the kinds' names: the versions this drainer has are added here). */
  async send(given: ClaimOptions, limits?: ClaimLimits): Promise<ClaimOutcome> {
    if (limits) {
      const { kinds, ...rest } = given;
      const kind = kinds![0]!;
      return claimLimited(this.#db, { ...rest, kind, names: this.#claimNames([kind]), limits });
    }
    const options = given.kinds ? { ...given, kinds: this.#claimNames(given.kinds) } : given;
    return this.#settler.carry(async (completed) => {
      if (completed.length === 0) {
        const answer = options.nextDue
          ? await claimReportingNextDue(this.#db, options)
          : { jobs: await claim(this.#db, options) };
        return { answer, completedIds: [] };
      }
      const result = await completeAndClaim(this.#db, completed, options, { recordCounts: this.#recordCounts });
      return {
        answer: { jobs: result.claimed, ...(options.nextDue ? { nextDueAt: result.nextDueAt } : {}) },
        completedIds: result.completed,
      };
    });
  }
}

let claimSequence = 0;
/** A claim's lock token: the drainer's id and a number no other claim of this process has, so that
 * settling under it fences exactly this claim's hold of its jobs. */
export const nextLockToken = (workerId: string): string => `${workerId}:${++claimSequence}`;
