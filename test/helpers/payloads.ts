/**
 * A given-back payload as the worker took it: without the
 * `given_back_first_token_ts` a give-back keeps after a first token
 * (src/worker/plan.ts givenBackPayload), for tests that compare a give-back's
 * bytes with what was pushed.
 */
export function asTaken(payload: Buffer): Buffer {
  const text = payload.toString("latin1");
  const taken = text.replace(/,"given_back_first_token_ts":\d{1,16}(\s*\}\s*)$/, "$1");
  return taken === text ? payload : Buffer.from(taken, "latin1");
}
