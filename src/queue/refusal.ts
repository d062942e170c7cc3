// No client imported here: main.ts says a refusal that reached it without loading ioredis.

/** Redis answered with an error (ioredis's ReplyError): the server is there and refused, not gone. */
export function answeredWithRefusal(err: unknown): err is Error {
  return err instanceof Error && err.name === "ReplyError";
}

/** How a failed command's Redis is said: it refused (it answered), or it is unavailable (no answer). */
export function refusedOrUnavailable(err: unknown): "refused" | "unavailable" {
  return answeredWithRefusal(err) ? "refused" : "unavailable";
}

/**
 * What a server that answered but refused means, and what fixes it: sent
 * again, such a command is refused again until someone changes the server
 * (its memory, its role, its ACL), so the operator needs the fix, not only
 * Redis's words. Found anywhere in `message` (a line that quotes Redis);
 * null for any other answer.
 */
export function refusalHint(message: string): string | null {
  if (/\bOOM command not allowed/.test(message)) return "redis is full: used_memory is over its maxmemory and its policy evicts nothing, so it refuses writes until maxmemory is raised (CONFIG SET maxmemory) or memory is freed";
  if (/\bREADONLY\b/.test(message)) return "this redis is a read-only replica: point --redis at its primary";
  if (/\bNOPERM\b|can't run this command|no permissions to (access|run)/.test(message)) return "this redis user may not run that command or touch that key (ACL): grant it (ACL SETUSER <user> +<command> ~<key pattern>) or connect as a user that may";
  if (/\bBUSY Redis is busy/.test(message)) return "redis is running another client's long script: it answers once that ends (or SCRIPT KILL)";
  if (/\bLOADING Redis is loading/.test(message)) return "redis is loading its data from disk: it answers once done";
  // A blocked take woken because its server became a replica (REPLICAOF, a failover): its writes are refused from now on.
  if (/\bUNBLOCKED\b.*master -> replica/.test(message)) return "this redis just became a replica: point --redis at its primary";
  if (/\bMASTERDOWN\b/.test(message)) return "this replica lost its link to its primary";
  if (/\bMISCONF\b/.test(message)) return "redis cannot save to disk and so refuses writes: fix its disk, or its stop-writes-on-bgsave-error";
  if (/max number of clients reached/.test(message)) return "redis is at its maxclients: raise it (CONFIG SET maxclients, from a connection already open) or close idle clients (CLIENT LIST shows them)";
  // It answers, and refuses who is asking (QA W 7: watch said "unreachable", as if it might come back by itself).
  if (/\bWRONGPASS\b/.test(message)) return "redis refuses this user or password: fix the one in --redis (redis://user:password@host:port) or DRILL_REDIS_URL";
  if (/\bNOAUTH\b/.test(message)) return "redis asks for a password: give it in --redis (redis://:password@host:port) or DRILL_REDIS_URL";
  return null;
}

/** The server refused the password given (or wants one): WRONGPASS, NOAUTH. No retry fixes that; a new --redis does. */
export function passwordRefused(message: string): boolean {
  return /\b(WRONGPASS|NOAUTH)\b/.test(message);
}

/** A server's answer as an operator reads it: Redis's words, then what they mean and the fix when it is a refusal. */
export function refusalText(err: Error): string {
  // A MULTI refused as a whole says only "EXECABORT"; the command refused inside it says why (ioredis's previousErrors).
  const inner = (err as Error & { previousErrors?: unknown[] }).previousErrors?.find((e): e is Error => e instanceof Error);
  // Redis names the script by its sha and line ("script: 14c2…, on @user_script:94."): drill's own, no help to an operator.
  const plain = (message: string) => message.replace(/\.? script: [0-9a-f]{40}, on @user_script:\d+\.?$/, ".");
  const said = inner ? `${err.message.replace(/\.$/, "")}: ${plain(inner.message)}` : plain(err.message);
  const hint = refusalHint(said);
  return hint ? `${said} (${hint})` : said;
}
