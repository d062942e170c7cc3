import { script } from "../queue/scripts.js";
import { queueKeys, validateKeyPart, type QueueKeys } from "../queue/keys.js";

/**
 * The worker's keys beyond queue/keys.ts (derived from the queue name the same way):
 * - `<q>:first_token` hash: job id → first-token ts (ms), set at the first
 *   token, deleted when the job is done or given back. The payload in
 *   `<q>:working:<worker>` is also marked with `first_token_ts` (what the
 *   sidecar's firstTokenSeen reads), in the same script.
 * - `<q>:workers:<worker>` string with a TTL: the worker's heartbeat; its
 *   value is the running instance's token. Only a worker whose heartbeat is
 *   gone has its working list recovered by another.
 * - `<q>:workers` hash: worker id → JSON {pid, start_time, host, token, ...},
 *   with `ready_at` (ms) once its weights are written and it takes jobs
 *   (what `drill up` waits for before its schedule starts).
 */
export interface WorkerKeys {
  queue: QueueKeys;
  firstToken: string;
  workers: string;
  heartbeat(worker: string): string;
}

export function workerKeys(queue: string): WorkerKeys {
  const keys = queueKeys(queue);
  return {
    queue: keys,
    firstToken: `${queue}:first_token`,
    workers: `${queue}:workers`,
    heartbeat: (worker) => `${queue}:workers:${validateKeyPart(worker, "--worker-id")}`,
  };
}

/**
 * First token: mark the payload in the working list and record the time.
 * KEYS: working first_token · ARGV: payload marked id ts
 * → 1, or 0 when the job is no longer in the working list (recovered by another worker).
 */
export const firstTokenScript = script(
  "worker-first-token",
  2,
  `
local bad = wrong_type(KEYS[1], 'list', KEYS[2], 'hash') or acl_refusal('LSET', KEYS[1], 'HSET', KEYS[2])
if bad then return bad end
local i = redis.call('LPOS', KEYS[1], ARGV[1])
if not i then return 0 end
redis.call('LSET', KEYS[1], i, ARGV[2])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
return 1
`,
);

/**
 * Done, in one step: off the working list, onto the done list, counters, and
 * the job's packed tokens released (HDEL inflight), so the gate's cap is
 * released exactly once: a re-run after a lost reply finds nothing to remove.
 * KEYS: working done stats inflight first_token
 * ARGV: payload record id late(0|1) retried(0|1)
 * → 1, or 0 when the job is gone (recovered by another worker: it runs there).
 */
export const doneScript = script(
  "worker-done",
  5,
  `
local bad = wrong_type(KEYS[1], 'list', KEYS[2], 'list', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'hash')
  or acl_refusal('LREM', KEYS[1], 'RPUSH', KEYS[2], 'HINCRBY', KEYS[3], 'HDEL', KEYS[4], 'HDEL', KEYS[5])
if bad then return bad end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[3], 'jobs_done', 1)
-- By 0 too: every field of DESIGN's stats hash exists once a job is done (HGET jobs_late is 0, not nil).
redis.call('HINCRBY', KEYS[3], 'jobs_late', ARGV[4] == '1' and 1 or 0)
redis.call('HINCRBY', KEYS[3], 'retry_count', ARGV[5] == '1' and 1 or 0)
redis.call('HDEL', KEYS[4], ARGV[3])
redis.call('HDEL', KEYS[5], ARGV[3])
return 1
`,
);

/**
 * A payload in the working list that is not a job: to the dead list with its
 * reason, and its packed tokens released (HDEL inflight by the id it carries,
 * when it has one) in the same step, as done does: it left the worker, and
 * tokens left counted would lower the gate's cap until a rollback (QA).
 * KEYS: working dead stats inflight · ARGV: payload entry id ('' = none read)
 */
export const workerDeadScript = script(
  "worker-dead",
  4,
  `
local bad = wrong_type(KEYS[1], 'list', KEYS[2], 'list', KEYS[3], 'hash', KEYS[4], 'hash')
  or acl_refusal('LREM', KEYS[1], 'RPUSH', KEYS[2], 'HINCRBY', KEYS[3], 'HDEL', KEYS[4])
if bad then return bad end
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[3], 'dead', 1)
if ARGV[3] ~= '' then redis.call('HDEL', KEYS[4], ARGV[3]) end
return 1
`,
);

/**
 * Gives a worker's working list back to the HEAD of the admitted list, in the
 * order it was taken. Allowed when the heartbeat is gone, or holds `token`
 * (the worker itself, starting or stopping). The first-token mark is
 * dropped from first_token (the job starts over and waits for its first token
 * again; its payload keeps the time as given_back_first_token_ts); its
 * inflight tokens stay held: it is still admitted.
 * Only working or admitted of another type refuse it. A key it only records
 * in (first_token, stats, workers) of another type is left unwritten and named
 * in the reply, the jobs going back as taken: refused, the list would wait
 * where nobody reads it (every worker's recovery is refused the same) until a
 * rollback's re-drain. The others are still written: no stale first_token.
 * KEYS: heartbeat working admitted first_token stats workers
 * ARGV: token worker_id, then triples (payload_in_working, payload_for_admitted, id)
 * → {moved, unrecorded}: moved -1 when another instance's heartbeat is alive;
 *   unrecorded '' or each refusal of a key left unwritten, '; '-joined.
 */
export const recoverWorkingScript = script(
  "worker-recover",
  6,
  `
local heartbeat, working, admitted, first_token, stats, workers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local token, worker = ARGV[1], ARGV[2]
local alive = redis.call('GET', heartbeat)
if alive and alive ~= token then return {-1, ''} end
local bad = wrong_type(working, 'list', admitted, 'list') or acl_refusal('LREM', working, 'LPUSH', admitted)
if bad then return bad end
local unrecorded = {}
local function records_in(key, command)
  local refusal = refused_record(key, 'hash', command)
  if refusal then table.insert(unrecorded, refusal) end
  return not refusal
end
local marks, counts, registry = records_in(first_token, 'HDEL'), records_in(stats, 'HINCRBY'), records_in(workers, 'HDEL')
local moved = 0
for i = #ARGV - 2, 3, -3 do
  local old, new, id = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('LREM', working, 1, old) > 0 then
    redis.call('LPUSH', admitted, new)
    if marks and id ~= '' then redis.call('HDEL', first_token, id) end
    moved = moved + 1
  end
end
if counts and moved > 0 then redis.call('HINCRBY', stats, 'worker_recovered', moved) end
if registry and not alive and redis.call('LLEN', working) == 0 then redis.call('HDEL', workers, worker) end
return {moved, table.concat(unrecorded, '; ')}
`,
);

/**
 * Claims the heartbeat: set when free or already ours; otherwise returns the
 * holder's token so the caller can check whether that instance is dead.
 * KEYS: heartbeat · ARGV: token ttl_ms expected_stale_token ('' = none)
 * → {'ok'} | {'held', token}
 */
export const claimHeartbeatScript = script(
  "worker-claim",
  1,
  `
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] and current ~= ARGV[3] then return {'held', current} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {'ok'}
`,
);

/**
 * Renews the heartbeat only while it is still ours (a worker that stalled past
 * its TTL and was recovered must not resurrect its claim silently).
 * KEYS: heartbeat · ARGV: token ttl_ms → 1 renewed | 0 lost
 */
export const renewHeartbeatScript = script(
  "worker-renew",
  1,
  `
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if current then return 1 end
return 0
`,
);

/**
 * A stopping worker lets go of its id: heartbeat deleted if still ours, and
 * unlisted when nothing is left in its working list.
 * KEYS: heartbeat working workers · ARGV: token worker_id → 1 released | 0 not ours
 */
export const releaseHeartbeatScript = script(
  "worker-release",
  3,
  `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
-- An empty list does not exist. A registry of another type lists nobody to unlist.
if redis.call('EXISTS', KEYS[2]) == 0 and redis.call('TYPE', KEYS[3])['ok'] == 'hash' then redis.call('HDEL', KEYS[3], ARGV[2]) end
return 1
`,
);
