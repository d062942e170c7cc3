import { createHash } from "node:crypto";

/**
 * Lua run by Redis: each push and each decision is one script, so the packed-token cap is
 * compared and changed atomically (MULTI cannot compare then increment), a
 * job leaves its processing list in the same step that puts it somewhere else,
 * and a job's id is taken in the same step that queues it.
 * Every decision script starts by checking the job is still in the processing
 * list, and the push script by looking up its token: re-running one after a
 * lost reply is a no-op, never a duplicate.
 */
export interface LuaScript {
  name: string;
  numberOfKeys: number;
  source: string;
  sha1: string;
}

/** The words every script's refusal of a key ends its reason with (isKeyRefusal): sending again cannot help. */
export const KEY_REFUSAL_MARK = "(drill never writes that there)";

/**
 * The cap on `<q>:events` (XADD MAXLEN ~): the stream keeps about the last
 * this many entries, so a long run's oldest decisions are trimmed away
 * (report says so when its window reaches before the stream's first entry).
 */
export const EVENTS_MAXLEN = 100_000;

/** The push script's refusal of a <q>:seq at the last exact id (isKeyRefusal): sending again cannot help either. */
export const SEQ_EXHAUSTED_MARK = "no job id left on this queue";

/** Every drill script, the worker's too, is built here: all of them start with PREAMBLE. */
export function script(name: string, numberOfKeys: number, body: string): LuaScript {
  const source = `${PREAMBLE}\n${body}`;
  return { name, numberOfKeys, source, sha1: createHash("sha1").update(source).digest("hex") };
}

// Decision record (hash <q>:decisions, field = job id):
//   fingerprint \t attempt \t kind \t figures
// check_record is the rule; checkDecisionRecord (decisionRecord.ts) mirrors it
// for gate --dry-run: change both together.
const PREAMBLE = `
-- Redis does not undo a script's writes when a later command in it errors, so
-- a key holding what drill never writes there (WRONGTYPE) must stop a script
-- before its first write: each script passes every key it writes, with the
-- type drill keeps there, and returns the first refusal before writing
-- (nothing moved). Absent keys are fine. Pairs: key, type, key, type...
-- A value of the operator's in an error reply: Redis ends an error at a NUL
-- (the refusal's mark after it would be lost, and the refusal read as a
-- passing failure) and turns CR/LF into spaces, so control bytes show as '?'.
local function shown(value, n)
  return (string.gsub(string.sub(value, 1, n), '%c', '?'))
end
-- An ACL that refuses one of a script's commands (NOPERM) stops it the same
-- way, after the writes before it: so each script asks first (Redis 7's
-- redis.acl_check_cmd, as the calling user) for every write it may make, and
-- refuses before its first write, naming command and key. Pairs: command,
-- key... The arguments after the key only make a well-formed call.
local ACL_ARGS = {LREM = {'0', ''}, LSET = {'0', ''}, RPUSH = {''}, LPUSH = {''}, LPOP = {}, HSET = {'', ''},
  HDEL = {''}, HINCRBY = {'', '0'}, XADD = {'*', '', ''}, INCR = {}, PEXPIRE = {'1'}}
local function acl_refusal(...)
  -- Before Redis 7 there is nothing to ask: a refusal may still stop a script midway there.
  if not redis.acl_check_cmd then return nil end
  local wanted = {...}
  for i = 1, #wanted, 2 do
    if not redis.acl_check_cmd(wanted[i], wanted[i + 1], unpack(ACL_ARGS[wanted[i]])) then
      return redis.error_reply('NOPERM this redis user may not run ' .. wanted[i] .. ' on ' .. wanted[i + 1] .. ', which this step writes: nothing done')
    end
  end
  return nil
end
local function wrong_type(...)
  local wanted = {...}
  for i = 1, #wanted, 2 do
    local found = redis.call('TYPE', wanted[i])['ok']
    if found ~= 'none' and found ~= wanted[i + 1] then
      return redis.error_reply(wanted[i] .. ' is a ' .. found .. ', not a ' .. wanted[i + 1] .. ' ${KEY_REFUSAL_MARK}')
    end
  end
  return nil
end
-- Why a key a script only records in may not be written (its type, or the
-- user's ACL), as text; nil when it may. The recovery scripts skip such a key
-- and name it, rather than strand the jobs they give back.
local function refused_record(key, wanted, command)
  local refusal = wrong_type(key, wanted) or acl_refusal(command, key)
  if refusal then return (string.gsub(refusal.err, '^%-', '')) end
  return nil
end
-- The gate's lever as it reads it (mode.ts gateModeOf is the same rule: change
-- both together): unset or exactly 'admit' admits; anything else, a mistyped
-- value or a key of another type, is deny-all (fail closed).
-- → mode, the key's type, its value (false unless a string)
local function read_mode(key)
  local found = redis.call('TYPE', key)['ok']
  if found == 'none' then return 'admit', found, false end
  if found ~= 'string' then return 'reject_all', found, false end
  local value = redis.call('GET', key)
  if value == 'admit' then return 'admit', found, value end
  return 'reject_all', found, value
end
local function parse_record(rec)
  if not rec then return nil end
  local fp, attempt, kind, figures = string.match(rec, '^([^\\t]*)\\t([^\\t]*)\\t([^\\t]*)\\t(.*)$')
  return fp, attempt, kind, figures
end
local function event(stream, reason, job, figures, ts, gate, attempt)
  redis.call('XADD', stream, 'MAXLEN', '~', '${EVENTS_MAXLEN}', '*',
    'reason', reason, 'job', job, 'figures', figures, 'ts', ts, 'gate', gate, 'attempt', attempt)
end
-- Same id seen before: a different job under that id is dead; the same job
-- (same fingerprint) gets the stored decision and its copy is dropped, so it
-- never runs twice nor has its tokens counted twice, when it is the same
-- attempt, or when it was admitted whatever the attempt: gate recovery bumps
-- the attempt of a re-sent copy, and an admitted job never comes back through
-- the gate (the worker's recovery returns it to admitted). A new attempt of a
-- rejected job is decided afresh.
local function check_record(processing, dead, decisions, events, stats, payload, id, fp, attempt, ts, gate, conflict_entry)
  local rfp, rattempt, rkind, rfigures = parse_record(redis.call('HGET', decisions, id))
  if not rfp then return nil end
  if rfp ~= fp then
    redis.call('LREM', processing, 1, payload)
    redis.call('RPUSH', dead, conflict_entry)
    event(events, 'dead', id, 'cause=id_reused_with_different_payload first=' .. rkind, ts, gate, attempt)
    redis.call('HINCRBY', stats, 'dead', 1)
    return {'conflict', rkind, rfigures}
  end
  if rattempt == attempt or rkind == 'admit' then
    redis.call('LREM', processing, 1, payload)
    event(events, 'redelivery', id, 'stored=' .. rkind .. ' ' .. rfigures, ts, gate, attempt)
    redis.call('HINCRBY', stats, 'redelivered', 1)
    return {'redelivery', rkind, rfigures}
  end
  return nil
end
local function gone(decisions, id)
  local _, _, rkind, rfigures = parse_record(redis.call('HGET', decisions, id))
  return {'gone', rkind or '', rfigures or ''}
end
`;

/**
 * The packer's push: take an id and queue the job in one step, once per token.
 * KEYS: seq ready pushes
 * ARGV: token payload_before_id payload_after_id ttl_ms
 * → {id, 'pushed'} | {id, 'again'} (this token's push already ran: nothing done)
 * A key of the wrong type, or a seq that is not an id, is an error reply naming it
 * (parseSeq in seq.ts reads a seq the same way for report: change both together).
 * `pushes` (hash token → id) expires ttl_ms after the last push, so a send
 * that waited in a paused server's socket still finds its token.
 */
export const pushScript = script(
  "push",
  3,
  `
local seq, ready, pushes = KEYS[1], KEYS[2], KEYS[3]
local token, before, after, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local bad = wrong_type(seq, 'string', ready, 'list', pushes, 'hash') or acl_refusal('INCR', seq, 'RPUSH', ready, 'HSET', pushes, 'PEXPIRE', pushes)
if bad then return bad end
local id = redis.call('HGET', pushes, token)
if id then return {id, 'again'} end
-- Ids are exact integers (a double's tostring turns 1e14 into '1e+14'), and
-- Lua's numbers are doubles, exact only up to 2^53-1 (2^53+1 reads as 2^53):
-- 2^53-1 is the last id, checked before the INCR that would pass it, so no
-- id is issued twice and the refused push queues nothing. INCR reads only
-- an integer as Redis writes one (string2ll): it refuses '007', '00', '+5',
-- ' 5', '5 ' ("not an integer"), so a seq it would refuse is refused here,
-- by name, not sent again: '0', or digits with no leading zero.
local last = redis.call('GET', seq)
if last and (not (last == '0' or string.match(last, '^[1-9]%d*$')) or tonumber(last) > 2^53 - 1) then
  return redis.error_reply(seq .. ' is "' .. shown(last, 30) .. '", not a job id under 2^53 (0, or digits with no leading zero) ${KEY_REFUSAL_MARK}: this job not pushed')
end
if last and tonumber(last) == 2^53 - 1 then
  return redis.error_reply(seq .. ' is at ' .. last .. ', the last exact job id (2^53-1): ${SEQ_EXHAUSTED_MARK}, this job not pushed')
end
id = string.format('%d', redis.call('INCR', seq))
redis.call('RPUSH', ready, before .. id .. after)
redis.call('HSET', pushes, token, id)
redis.call('PEXPIRE', pushes, ttl)
return {id, 'pushed'}
`,
);

/**
 * KEYS: processing admitted inflight decisions events stats mode dead
 * ARGV: payload id fingerprint attempt prompt_tokens limit ts gate conflict_entry
 * → {'admit', packed} | {'reject_packed_tokens', packed} | {'reject_all', mode_type, mode_value}
 *   | {'gone'|'conflict'|'redelivery', stored_kind, stored_figures}
 * Only an admit changes anything besides conflict/redelivery: a reject is
 * applied by the reject script with the nack payload the caller builds.
 * An inflight entry that is not a count is an error reply (fail closed: the
 * job stays in its processing list, the caller sees which entry).
 */
export const admitScript = script(
  "admit",
  8,
  `
local processing, admitted, inflight, decisions, events, stats, mode, dead =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local payload, id, fp, attempt, tokens, limit, ts, gate, conflict_entry =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7], ARGV[8], ARGV[9]
local bad = wrong_type(processing, 'list', admitted, 'list', inflight, 'hash', decisions, 'hash', events, 'stream', stats, 'hash', dead, 'list')
  or acl_refusal('LREM', processing, 'HSET', inflight, 'RPUSH', admitted, 'HSET', decisions, 'XADD', events, 'HINCRBY', stats, 'RPUSH', dead)
if bad then return bad end
if not redis.call('LPOS', processing, payload) then return gone(decisions, id) end
local seen = check_record(processing, dead, decisions, events, stats, payload, id, fp, attempt, ts, gate, conflict_entry)
if seen then return seen end
local lever, mode_type, mode_value = read_mode(mode)
if lever ~= 'admit' then return {'reject_all', mode_type, mode_value or ''} end
local packed = tokens
local entries = redis.call('HGETALL', inflight)
for i = 1, #entries, 2 do
  -- A corrupt entry makes the cap unknowable: refuse (nothing changed) rather than count it as 0.
  if not string.match(entries[i + 1], '^%d+$') then
    return redis.error_reply(inflight .. ' entry ' .. shown(entries[i], 40) .. ' is not a token count ("' .. shown(entries[i + 1], 20) .. '"): the packed-token cap cannot be checked, nothing admitted')
  end
  -- Its own entry, if one is left without an admit record, is replaced, not added to.
  if entries[i] ~= id then packed = packed + tonumber(entries[i + 1]) end
end
if packed > limit then return {'reject_packed_tokens', tostring(packed)} end
local figures = 'packed=' .. packed .. ' limit=' .. limit
redis.call('LREM', processing, 1, payload)
redis.call('HSET', inflight, id, tokens)
redis.call('RPUSH', admitted, payload)
redis.call('HSET', decisions, id, fp .. '\\t' .. attempt .. '\\tadmit\\t' .. figures)
event(events, 'admit', id, figures, ts, gate, attempt)
redis.call('HINCRBY', stats, 'admitted', 1)
return {'admit', tostring(packed)}
`,
);

/**
 * KEYS: processing target decisions events stats dead
 * ARGV: payload id fingerprint attempt kind figures ts gate routed route conflict_entry
 * route 'retry' → routed is the nack payload (attempt+1, reason); 'dead' → a dead entry.
 * → {'applied', route} | {'gone'|'conflict'|'redelivery', stored_kind, stored_figures}
 */
export const rejectScript = script(
  "reject",
  6,
  `
local processing, target, decisions, events, stats, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local payload, id, fp, attempt, kind, figures, ts, gate, routed, route, conflict_entry =
  ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11]
local bad = wrong_type(processing, 'list', target, 'list', decisions, 'hash', events, 'stream', stats, 'hash', dead, 'list')
  or acl_refusal('LREM', processing, 'RPUSH', target, 'HSET', decisions, 'XADD', events, 'HINCRBY', stats, 'RPUSH', dead)
if bad then return bad end
if not redis.call('LPOS', processing, payload) then return gone(decisions, id) end
local seen = check_record(processing, dead, decisions, events, stats, payload, id, fp, attempt, ts, gate, conflict_entry)
if seen then return seen end
redis.call('LREM', processing, 1, payload)
redis.call('RPUSH', target, routed)
redis.call('HSET', decisions, id, fp .. '\\t' .. attempt .. '\\t' .. kind .. '\\t' .. figures)
event(events, kind, id, figures .. ' route=' .. route, ts, gate, attempt)
redis.call('HINCRBY', stats, kind, 1)
if route == 'retry' then redis.call('HINCRBY', stats, 'nacked', 1) else redis.call('HINCRBY', stats, 'dead', 1) end
return {'applied', route}
`,
);

/**
 * A payload that is not a job: processing → dead with the reason.
 * KEYS: processing dead events stats
 * ARGV: payload dead_entry job cause ts gate
 */
export const deadScript = script(
  "dead",
  4,
  `
local processing, dead, events, stats = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local payload, entry, job, cause, ts, gate = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local bad = wrong_type(processing, 'list', dead, 'list', events, 'stream', stats, 'hash')
  or acl_refusal('LREM', processing, 'RPUSH', dead, 'XADD', events, 'HINCRBY', stats)
if bad then return bad end
if redis.call('LREM', processing, 1, payload) == 0 then return {'gone'} end
redis.call('RPUSH', dead, entry)
event(events, 'dead', job, 'cause=' .. cause, ts, gate, '')
redis.call('HINCRBY', stats, 'dead', 1)
return {'applied'}
`,
);

/**
 * Gives back a gate's processing list, only if its heartbeat has expired
 * (or it is the gate itself stopping, which deletes its heartbeat first).
 * Jobs go to the HEAD of the ready list in their original order.
 * Only processing or ready of another type refuse it. A key it only records
 * in (events, stats, gates) of another type is left unwritten and named in
 * the reply: refused, the list would wait where nobody reads it (every gate's
 * recovery is refused the same) until a rollback's re-drain. A dead list of
 * another type sends a job routed there back to ready as taken (old_payload)
 * instead, named the same.
 * KEYS: heartbeat processing ready dead events stats gates
 * ARGV: ts from_gate by_gate, then five per job (old_payload, new_payload, route 'ready'|'dead', id, attempt)
 * → -1 when the gate is alive, else {moved, as_taken, unrecorded}: the 0-based
 *   positions (in ARGV order) of the jobs this run moved, those of them that
 *   went back as taken instead of dead, and '' or each refusal of a key a
 *   write was skipped on, '; '-joined. A job another recoverer moved first is
 *   not in the list: its LREM found nothing here.
 */
export const recoverScript = script(
  "recover",
  7,
  `
local heartbeat, processing, ready, dead, events, stats, gates = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local ts, from_gate, by_gate = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', heartbeat) == 1 then return -1 end
local bad = wrong_type(processing, 'list', ready, 'list') or acl_refusal('LREM', processing, 'LPUSH', ready)
if bad then return bad end
local refusal_of = {}
local function writable(key, wanted, command)
  refusal_of[key] = refused_record(key, wanted, command)
  return not refusal_of[key]
end
local to_dead, to_events, to_stats, to_gates = writable(dead, 'list', 'RPUSH'), writable(events, 'stream', 'XADD'), writable(stats, 'hash', 'HINCRBY'), writable(gates, 'hash', 'HDEL')
local unrecorded, named = {}, {}
local function skipped(key)
  if not named[key] then
    named[key] = true
    table.insert(unrecorded, refusal_of[key])
  end
end
local moved, as_taken = {}, {}
-- Backwards, so LPUSH leaves the oldest-taken job first at the head.
for i = #ARGV - 4, 4, -5 do
  local old, new, route, id, attempt = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if redis.call('LREM', processing, 1, old) > 0 then
    local position = (i - 4) / 5
    if route == 'dead' and to_dead then
      redis.call('RPUSH', dead, new)
      if to_stats then redis.call('HINCRBY', stats, 'dead', 1) else skipped(stats) end
    elseif route == 'dead' then
      redis.call('LPUSH', ready, old)
      table.insert(as_taken, 1, position)
      route = 'ready_as_taken'
      skipped(dead)
    else
      redis.call('LPUSH', ready, new)
    end
    if to_events then event(events, 'recovered', id, 'from_gate=' .. from_gate .. ' route=' .. route, ts, by_gate, attempt) else skipped(events) end
    if to_stats then redis.call('HINCRBY', stats, 'recovered', 1) else skipped(stats) end
    table.insert(moved, 1, position)
  end
end
if redis.call('LLEN', processing) == 0 then
  if to_gates then redis.call('HDEL', gates, from_gate) else skipped(gates) end
end
return {moved, as_taken, table.concat(unrecorded, '; ')}
`,
);

/**
 * Rollback's drain, a batch per call: jobs from the head of `source` to the
 * END of the drain, in their order. Never RENAME: it replaces an existing
 * destination, so a second rollback would destroy the first drain. Each call
 * is one step: a rollback killed between two calls has moved whole batches,
 * and the next one moves the rest. RPUSH then LPOP, not LMOVE: the ACL check
 * asks for each command with its one key, and in a script the two are one
 * step; RPUSH first, as a full Redis (maxmemory) refuses it and nothing moves,
 * where LPOP, which frees memory, would be let through and the script's
 * writes after it with it.
 * The ready list goes by count: it holds no tokens, and a gate still running
 * under deny-all takes from its head meanwhile. A list whose jobs hold
 * packed tokens (admitted, a gate's or worker's) goes as read, each job with
 * its id: a job moves only while it is still the head, and releases its
 * tokens in the same step. An inflight of another type (or refused by the
 * ACL) is not written and named: the jobs still go to the drain.
 * KEYS: source drain inflight
 * ARGV: count, then for a list holding tokens each of the first `count` jobs as read and its id ('' for none)
 * → {moved, '' or why inflight was not written}
 */
export const drainScript = script(
  "drain",
  3,
  `
local source, drain, inflight = KEYS[1], KEYS[2], KEYS[3]
local bad = wrong_type(source, 'list', drain, 'list') or acl_refusal('LPOP', source, 'RPUSH', drain)
if bad then return bad end
local moved = 0
if #ARGV == 1 then
  for _ = 1, tonumber(ARGV[1]) do
    local payload = redis.call('LINDEX', source, 0)
    if not payload then break end
    redis.call('RPUSH', drain, payload)
    redis.call('LPOP', source)
    moved = moved + 1
  end
  return {moved, ''}
end
local unreleased = refused_record(inflight, 'hash', 'HDEL')
for i = 2, #ARGV, 2 do
  if redis.call('LINDEX', source, 0) ~= ARGV[i] then break end
  redis.call('RPUSH', drain, ARGV[i])
  redis.call('LPOP', source)
  if ARGV[i + 1] ~= '' and not unreleased then redis.call('HDEL', inflight, ARGV[i + 1]) end
  moved = moved + 1
end
return {moved, unreleased or ''}
`,
);

/** KEYS: inflight · ARGV: id → the tokens released, or nil when none were held. */
export const releaseScript = script(
  "release",
  1,
  `
local tokens = redis.call('HGET', KEYS[1], ARGV[1])
if tokens then redis.call('HDEL', KEYS[1], ARGV[1]) end
return tokens
`,
);

/**
 * The gate's lever, flipped in one step with its event: the mode it replaced is
 * the one the event names, even with two flips at once (a rollback's deny-all
 * beside `gate mode`). `previous` as the gate read it (read_mode), with what
 * the key held when that was not a mode. The lever always moves: SET
 * overwrites a key of any type, and an events key of the wrong type only
 * leaves the flip unrecorded.
 * `by=` names who moved it (gate_mode, up, rollback): the report tells a
 * rollback's deny-all from a hand on the lever without state.json (a hand-run
 * `rollback --queue` has none).
 * KEYS: mode events · ARGV: mode psi forced(0|1) ts by
 * → {previous_type, previous_value (false unless a string), recorded 1|0}
 */
export const setModeScript = script(
  "set_mode",
  2,
  `
local previous, previous_type, previous_value = read_mode(KEYS[1])
redis.call('SET', KEYS[1], ARGV[1])
local shown = previous
if previous_type == 'none' then shown = 'unset' end
local figures = 'mode=' .. ARGV[1] .. ' previous=' .. shown .. ' psi=' .. ARGV[2]
if ARGV[3] == '1' then figures = figures .. ' forced=1' end
if ARGV[6] and ARGV[6] ~= '' then figures = figures .. ' psi_avg60=' .. ARGV[6] end
if previous_type ~= 'none' and previous_type ~= 'string' then figures = figures .. ' previous_type=' .. previous_type end
if previous_value and previous_value ~= 'admit' and previous_value ~= 'reject_all' then
  figures = figures .. ' previous_value=' .. string.gsub(string.sub(previous_value, 1, 40), '%s', '_')
end
if ARGV[5] and ARGV[5] ~= '' then figures = figures .. ' by=' .. ARGV[5] end
if wrong_type(KEYS[2], 'stream') then return {previous_type, previous_value, 0} end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', '${EVENTS_MAXLEN}', '*', 'reason', 'mode', 'job', '', 'figures', figures, 'ts', ARGV[4])
return {previous_type, previous_value, 1}
`,
);

/** KEYS: mode → {type, value (false unless a string)}: what the lever holds, whatever its type. */
export const readModeScript = script(
  "read_mode",
  1,
  `
local _, found, value = read_mode(KEYS[1])
return {found, value}
`,
);
