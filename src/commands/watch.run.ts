import path from "node:path";
import { effectiveLimitFrom, limitFileName, parseLimit } from "../cgroup/memoryFiles.js";
import { validateCgroupName, validateParent } from "../cgroup/names.js";
import type { WorkerCgroup } from "../cgroup/paths.js";
import { locateWorkerCgroup } from "../gate/workerCgroup.js";
import { absentCgroupHint } from "../cgroup/elsewhere.js";
import { writeDocument, writeOut } from "../closedStdout.js";
import { commandRedis, hostRoots, type GlobalOptions } from "../context.js";
import { readState } from "../drill/state.js";
import { DrillError, InterruptedError, UsageError } from "../errors.js";
import { onInterrupt } from "../interrupt.js";
import { readKernelText, type Reading } from "../host/kernelFile.js";
import { statFieldsAfterComm } from "../host/process.js";
import { consoleOutput } from "../output.js";
import { queueKeys, validateKeyPart } from "../queue/keys.js";
import { defaultAlarmConfig, type AlarmConfig, type AlarmEvent } from "../sampler/alarms.js";
import { runSidecar } from "../sampler/loop.js";
import { Recording, RecordingRemoved } from "../sampler/recording.js";
import { QueueReader, readSample } from "../sampler/read.js";
import { fieldsOfKey, type QueueRaw } from "../sampler/step.js";
import { NO_REJECTS, rejectBatchLines } from "../sampler/rejects.js";
import { LiveView, formatAlarmEvent, formatSampleLine, type ViewSize } from "../sampler/render.js";
import { formatBytes, parseDuration, parsePositiveDuration, parsePsiLimit, parsePercent, parsePositiveInt } from "../units.js";
import type { WatchOptions } from "./watch.js";
import { passwordRefused, refusalHint } from "../queue/refusal.js";
import { tlsHint } from "../queue/redis.js";

/**
 * cg_mem_max is the cgroup's own limit; an ancestor's tighter one is where the
 * OOM killer acts (cgroup status's effective limit). Said once at the start:
 * the sample stays one read of one file per field.
 */
function tighterAncestorLimit(cgroup: WorkerCgroup): string | null {
  const { dir, mount, version } = cgroup.limits;
  const ownFile = path.join(dir, limitFileName(version));
  const ownText = readKernelText(ownFile);
  const own = ownText.ok ? parseLimit(ownText.value, ownFile) : ownText;
  const effective = effectiveLimitFrom(dir, mount, version);
  const ancestorUnreadable = effective.unreadable.find((u) => u.file !== ownFile);
  if (ancestorUnreadable) {
    return `watch: ancestor limit ${ancestorUnreadable.file} could not be read (${ancestorUnreadable.reason}): the effective limit where the OOM killer acts is unknown`;
  }
  if (effective.limit === "max" || effective.dir === null || effective.dir === dir) return null;
  if (own.ok && own.value !== "max" && own.value <= effective.limit) return null;
  // An own limit that does not read is not "max": cg_mem_max is null (with its file in missing).
  const ownLimit = !own.ok ? `could not be read: ${own.reason}` : own.value === "max" ? "max" : formatBytes(own.value);
  return `watch: cg_mem_max is ${dir}'s own limit (${ownLimit}); ancestor ${effective.dir} limits it to ${formatBytes(effective.limit)}, the effective limit where the OOM killer acts`;
}

/**
 * When the drill whose state named this Redis is rolled back (or rolling
 * back): its embedded Redis stops with the rollback, so a watch started
 * beside it would wait for it for good (QA). Null otherwise.
 */
export function rolledBack(stateDir: string, drills: readonly string[]): string | null {
  for (const name of drills) {
    let state;
    try {
      state = readState(stateDir, name);
    } catch {
      continue;
    }
    // A given Redis outlives the rollback: its outage is another story.
    if (state === null || !state.redis.embedded || (state.phase !== "complete" && state.phase !== "rolling_back")) continue;
    const when = state.rollback?.at ? ` at ${state.rollback.at}` : "";
    const what = state.phase === "complete" ? `was rolled back${when}` : "is being rolled back";
    return `drill ${name} ${what}, and its embedded Redis stops with it: nothing here will answer again; stop this watch (Ctrl-C or q)`;
  }
  return null;
}

/**
 * Says on stderr once when the Redis reading starts failing (the URL,
 * password redacted, and the error) and once when it answers again, rather
 * than only a null in every sample's queue fields.
 */
export function redisWatch(source: string, say: (line: string) => void, whyGone: () => string | null = () => null): (reading: Reading<unknown>, monoMs: number) => void {
  let downSince: number | null = null;
  return (reading, monoMs) => {
    if (!reading.ok && downSince === null) {
      downSince = monoMs;
      const why = whyGone();
      // Redis that answers with a refusal (an ACL, BUSY) is not unreachable: said as refused, with its fix.
      const hint = refusalHint(reading.reason);
      if (hint !== null) say(`watch: Redis ${source} refused: ${reading.reason} (${hint}); queue fields stay null (listed in missing) until it is fixed`);
      else say(`watch: Redis ${source} unreachable: ${reading.reason}${tlsHint(source)}; ${why ?? "queue fields stay null (listed in missing) until it answers"}`);
    } else if (reading.ok && downSince !== null) {
      say(`watch: Redis ${source} answering again after ${formatSeconds(monoMs - downSince)}; queue fields are back`);
      downSince = null;
    }
  };
}

/**
 * Why a `--once` watch fails although it printed its sample: its Redis
 * refused the password (WRONGPASS, NOAUTH). A Redis down may come back and a
 * live watch samples on; a wrong password never fixes itself, and a script
 * reading the sample must not take its null queue fields for a quiet queue.
 * Null for any other reading.
 */
export function onceRefusal(source: string, reading: Reading<unknown>): string | null {
  if (reading.ok || !passwordRefused(reading.reason)) return null;
  return `watch --once: Redis ${source} refused the password (said above): the sample's queue fields are null`;
}

/**
 * Says on stderr once when the worker cgroup goes (a teardown or rollback
 * removed it) and once when it is there again: its cg_* fields go null in
 * every sample meanwhile, and a null in `missing` alone went unnoticed (QA).
 * Its absence at the start is the start's hint, not a change.
 */
export function cgroupWatch(say: (line: string) => void): (reading: Reading<{ dir: string }>) => void {
  let present: boolean | null = null;
  return (reading) => {
    if (present === true && !reading.ok) say(`watch: worker cgroup ${reading.file} gone (${reading.reason}): its cg_* fields stay null (listed in missing) until it is there again`);
    if (present === false && reading.ok) say(`watch: worker cgroup ${reading.value.dir} there now: its cg_* fields are read`);
    present = reading.ok;
  };
}

/**
 * Says on stderr once when a queue key starts holding what drill never writes
 * there (the key, its type, the fields that go null for it) and once when it
 * reads again: Redis answers, so it is not "unreachable", and the other keys'
 * fields still come through.
 */
export function wrongKeyWatch(say: (line: string) => void): (reading: Reading<QueueRaw>) => void {
  let said = new Map<string, string>();
  return (reading) => {
    if (!reading.ok) return; // redisWatch speaks for a failed reading
    const now = new Map(reading.value.wrongTyped.map((w) => [w.key, w.reason]));
    for (const wrong of reading.value.wrongTyped) {
      if (said.get(wrong.key) === wrong.reason) continue;
      const fields = fieldsOfKey(wrong.role, reading.value.workingScanned);
      const effect =
        fields.length > 0 ? `${fields.join(", ")} ${fields.length === 1 ? "stays" : "stay"} null (listed in missing)` : wrong.role === "events" ? "the gate's reject lines are not shown" : "no field is read from it now";
      const lost = wrong.role === "working" ? "the jobs that worker holds are not counted: " : "";
      say(`watch: redis key ${wrong.reason}; ${lost}${effect} until it is fixed`);
    }
    for (const key of said.keys()) if (!now.has(key)) say(`watch: redis key ${key} reads again`);
    said = now;
  };
}

const formatSeconds = (ms: number): string => (ms < 10_000 ? `${(ms / 1000).toFixed(1)}s` : `${Math.round(ms / 1000)}s`);

/**
 * Whether this process is in its terminal's foreground process group: raw
 * mode from the background (`drill watch &`) would stop it with SIGTTOU.
 * Read from this process's own /proc entry (not --procfs: that is the host
 * being watched, maybe from a container). Unknown counts as background.
 */
function inForeground(): boolean {
  const stat = readKernelText("/proc/self/stat");
  // pgrp (field 5) is the terminal's foreground group tpgid (field 8).
  const fields = stat.ok ? statFieldsAfterComm(stat.value) : null;
  return fields?.[5 - 3] !== undefined && fields[5 - 3] === fields[8 - 3];
}

/**
 * Keys of the live view, when stdin is a terminal: `q` aborts `quit`. The
 * terminal goes into raw mode to see a key without Enter, which also turns
 * off its own Ctrl-C, Ctrl-\\ and Ctrl-Z, so drill does what the terminal
 * would have done: SIGINT, SIGQUIT, and a suspend that `fg` resumes, after
 * which `onContinue` redraws. Only while in the terminal's foreground:
 * `take` again (each sample) picks the keys up after `fg`. Null when stdin
 * is not a terminal.
 */
function liveKeys(quit: AbortController, onContinue: () => void): { take: () => void; dispose: () => void } | null {
  const stdin = process.stdin;
  if (!stdin.isTTY) return null;
  let reading = false;
  // Raw mode from the background (`drill watch &`, or Ctrl-Z then `bg`) would stop us with SIGTTOU.
  const take = (): void => {
    if (reading || !inForeground()) return;
    stdin.setRawMode(true);
    stdin.on("data", onData);
    stdin.resume();
    reading = true;
  };
  // Cooked mode again, as the shell gave the terminal: echo, line editing, Ctrl-C.
  const release = (): void => {
    if (!reading) return;
    stdin.off("data", onData);
    stdin.setRawMode(false);
    stdin.pause();
    reading = false;
  };
  const suspend = (): void => {
    release();
    // What the terminal sends on Ctrl-Z: SIGTSTP to the foreground group, so
    // a wrapper in the same job (sudo, a script) stops with us and the shell
    // sees the job stopped. The kernel discards it in an orphaned group (no
    // shell that could resume it): then it returns at once and we go on.
    process.kill(0, "SIGTSTP");
    // Here once continued: the keyboard back if that was `fg` (not `bg`).
    take();
  };
  // Also a stop and continue from outside (kill -STOP / -CONT), or `fg` after `bg`.
  const continued = (): void => {
    take();
    onContinue();
  };
  function onData(chunk: Buffer): void {
    for (const byte of chunk) {
      if (byte === 0x71 || byte === 0x51) quit.abort(); // q, Q
      else if (byte === 0x03) process.kill(process.pid, "SIGINT");
      else if (byte === 0x1a) suspend(); // Ctrl-Z
      else if (byte === 0x1c) {
        // SIGQUIT's default action ends the process without any cleanup of
        // ours: the terminal goes back to cooked mode first, or the shell is
        // left without echo, line editing or Ctrl-C.
        release();
        process.kill(process.pid, "SIGQUIT");
      }
    }
  }
  process.on("SIGCONT", continued);
  take();
  return {
    take,
    dispose: () => {
      process.off("SIGCONT", continued);
      release();
    },
  };
}

export async function watchAction(g: GlobalOptions, options: WatchOptions): Promise<void> {
  const intervalMs = parseDuration(options.interval, "--interval");
  if (intervalMs < 10) throw new UsageError("--interval: must be at least 10ms");
  const count = options.count === undefined ? undefined : parsePositiveInt(options.count, "--count");
  const durationMs = options.duration === undefined ? undefined : parsePositiveDuration(options.duration, "--duration");
  if (options.once && (count !== undefined || durationMs !== undefined)) {
    throw new UsageError("--once: takes one sample; drop --count/--duration");
  }
  // Else it ends before its first sample, exit 0 with nothing printed (as --duration 0s did).
  if (durationMs !== undefined && durationMs < intervalMs) {
    throw new UsageError(
      `--duration: ${options.duration} is shorter than --interval (${options.interval}): the first sample comes one interval after the start (the first reading only seeds the rates)`,
    );
  }
  const alarmConfig: AlarmConfig = {
    ...defaultAlarmConfig,
    psiLimit: parsePsiLimit(options.psiLimit, "--psi-limit"),
    psiRateLimit: parsePercent(options.psiRateLimit, "--psi-rate-limit"),
    hostClass: validateKeyPart(options.hostClass, "--host-class"),
  };
  const name = validateCgroupName(options.name);
  validateParent(options.parent); // exit 2 before Redis is reached
  const keys = queueKeys(options.queue);
  const { url: redisUrl, drills: redisDrills } = await commandRedis(g, { queue: keys.queue, cgroupName: name });
  const roots = hostRoots(g);
  // Its absence (or no hierarchy at all, or no record of it to read) is a missing signal, not an error.
  const cgroup = locateWorkerCgroup(roots, g.stateDir, name, options.parent);

  const output = consoleOutput(g.color);
  // --once is one line on a terminal too: a view drawn once and left is a frame to scroll past, not a reading.
  const live = !g.json && !options.once && output.isTTY ? new LiveView({ cgroup: cgroup.ok ? `${name} (${cgroup.value.layout})` : `${name} (none)`, queue: keys.queue, intervalMs }, output.color, output.unicode) : null;

  let recording = options.record === undefined ? null : Recording.open(options.record);
  let recordFailed: string | null = null;
  let recorded = 0;

  // After the flags are known good; stderr, so --json stdout stays one sample a line.
  const hint = absentCgroupHint("watch", "its cg_* fields stay null", roots, g.stateDir, name, cgroup);
  if (hint !== null) output.err(hint);
  const ancestor = cgroup.ok ? tighterAncestorLimit(cgroup.value) : null;
  if (ancestor !== null) output.err(ancestor);

  const redisTimeoutMs = Math.min(2000, Math.max(250, intervalMs));
  const queueReader = new QueueReader(redisUrl, keys, alarmConfig.hostClass, redisTimeoutMs);
  let heldEvents: AlarmEvent[] = [];
  // A line on stderr between two frames of the live view: the frame goes first, the next one is drawn below it.
  const notice = (line: string): void => {
    if (live) writeOut(live.erase());
    output.err(line);
  };
  const redisState = redisWatch(queueReader.source, notice, () => rolledBack(g.stateDir, redisDrills));
  const wrongKeys = wrongKeyWatch(notice);
  const cgroupState = cgroupWatch(notice);
  const interrupt = onInterrupt();
  // The view is laid out for the terminal's size, and drawn again at once when it changes.
  const size = (): ViewSize => ({ columns: process.stdout.columns || 80, rows: process.stdout.rows || Infinity });
  const repaint = (): void => {
    if (live) writeOut(live.repaint(size()));
  };
  if (live) process.stdout.on("resize", repaint);
  // `q` ends the live view like --count would (exit 0); Ctrl-C stays an interrupt (130).
  // After Ctrl-Z and `fg` the shell has written below the frame: drawn again at once.
  const quit = new AbortController();
  const keyboard = live ? liveKeys(quit, repaint) : null;
  let lastQueueReading: Reading<unknown> | null = null;
  try {
    await queueReader.connect();
    if (live) writeOut(live.waiting(size()));
    await runSidecar({
      read: async () => {
        const raw = await readSample({ roots, cgroup }, queueReader);
        redisState(raw.queue, raw.monoMs);
        lastQueueReading = raw.queue;
        wrongKeys(raw.queue);
        cgroupState(raw.cgroup);
        return raw;
      },
      intervalMs,
      alarmConfig,
      // The first reading only seeds the rates (--once and streaming alike): a
      // first line with every rate null and listed in missing would read as
      // signals that failed, and page whatever alerts on missing, at each start.
      maxReadings: options.once ? 2 : count === undefined ? undefined : count + 1,
      durationMs,
      signal: AbortSignal.any([interrupt.signal, quit.signal]),
      onSample: (sample, stepEvents, index) => {
        // Alarms raised by the seeding reading are printed with the first sample.
        const events = [...heldEvents, ...stepEvents];
        heldEvents = [];
        if (index === 0) {
          heldEvents = events;
          return;
        }
        // The gate's reject lines since the last sample (the first reading only marks where they start).
        const rejects = queueReader.takeRejects();
        const line = recording !== null || g.json ? `${JSON.stringify(sample)}\n` : "";
        if (recording !== null) {
          try {
            recording.append(line);
            recorded++;
          } catch (err) {
            const removed = err instanceof RecordingRemoved;
            // The view is what the operator watches the incident on: it goes on, said once; the exit says it (1).
            // This watch's samples: another watch or a truncation may have added lines to the file or taken some.
            notice(`drill: ${(err as Error).message}; recording stopped after ${recorded} sample(s) recorded by this watch${removed ? ", gone with the file" : ""}; the view goes on`);
            // The exit says it once more, short (QA: the same line twice).
            recordFailed = `--record: ${options.record}: recording stopped after ${recorded} sample(s) recorded by this watch: ${removed ? "the file was removed" : "its write failed"} (said above)`;
            recording.close();
            recording = null;
          }
        }
        if (g.json) {
          // stdout stays one sample a line: the reject lines go to stderr, as the alarm lines do.
          if (rejects !== NO_REJECTS) for (const reject of rejectBatchLines(rejects)) output.err(reject);
          writeDocument(line);
          for (const event of events) output.err(event.line);
        } else if (live) {
          // `fg` of a job running in the background sends no SIGCONT: the keys are taken here.
          keyboard?.take();
          writeOut(live.redraw(sample, events, size(), rejects));
        } else {
          if (rejects !== NO_REJECTS) for (const reject of rejectBatchLines(rejects)) output.out(reject);
          for (const event of events) output.out(formatAlarmEvent(event, output.color));
          output.out(formatSampleLine(sample));
        }
      },
    });
  } finally {
    keyboard?.dispose();
    process.stdout.off("resize", repaint);
    interrupt.dispose();
    queueReader.close();
    recording?.close();
  }
  const received = interrupt.received();
  if (received) throw new InterruptedError(received);
  if (recordFailed !== null) throw new DrillError(recordFailed);
  const refused = options.once && lastQueueReading !== null ? onceRefusal(queueReader.source, lastQueueReading) : null;
  if (refused !== null) throw new DrillError(refused);
}
