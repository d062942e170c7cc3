// The page-touching helper behind `inject` (anon, thrash) and the worker's
// mmapped weights (serve). Core Node has no mmap, so the pages are faulted by
// native/build/pagetoucher (C, built at install) or, when that could not be
// built, by native/pagetoucher.py: same command line, same stdout lines
// (the protocol is documented at the top of native/pagetoucher.c).
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { accessSync, constants, existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { joinArgv } from "../cgroup/join.js";
import { DrillError, UsageError } from "../errors.js";
import { findOnPath } from "../util/findOnPath.js";
import { unlinkLeftover } from "../util/unlinkLeftover.js";
import { SELF_EXIT_GRACE_MS } from "../lifetime.js";
import { MAX_DURATION_MS } from "../units.js";

export type PageToucherImpl =
  | { kind: "native"; binary: string }
  | { kind: "python"; python: string; script: string };

/** An argv ready for spawn/execa; `fallback` is true for the python3 helper. */
export interface PageToucherCommand {
  file: string;
  args: string[];
  fallback: boolean;
}

export type PageOrder = "random" | "seq";
/** `random` sets MADV_RANDOM; measured here it lowers the memory stall (see pagetoucher.c). */
export type PageAdvice = "normal" | "random";

export interface LocateOptions {
  /** Where native/ lives; default: found from this module's own path. */
  packageRoot?: string;
  /** `python` skips the C helper (to measure or test the fallback). */
  prefer?: "native" | "python";
  /** PATH to search for python3; default process.env.PATH. */
  pathEnv?: string;
}

/**
 * The package root: the nearest ancestor with drill's package.json. This
 * module runs as src/native/pagetoucher.ts (tests) and as
 * dist/native/pagetoucher.js (installed), so the depth is not assumed.
 */
export function findPackageRoot(fromUrl: string = import.meta.url): string {
  let dir = path.dirname(fileURLToPath(fromUrl));
  for (let i = 0; i < 6; i++) {
    const manifest = path.join(dir, "package.json");
    if (existsSync(manifest) && existsSync(path.join(dir, "native"))) {
      try {
        const parsed: unknown = JSON.parse(readFileSync(manifest, "utf8"));
        if (typeof parsed === "object" && parsed !== null && (parsed as { name?: unknown }).name === "drill") return dir;
      } catch {
        // not ours; keep walking up
      }
    }
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  throw new DrillError(`cannot find drill's package root (with native/) above ${fileURLToPath(fromUrl)}`);
}

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The C helper if it was built, else python3 with the fallback script, else a DrillError naming both. */
export function locatePageToucher(options: LocateOptions = {}): PageToucherImpl {
  const root = options.packageRoot ?? findPackageRoot();
  const binary = path.join(root, "native", "build", "pagetoucher");
  if (options.prefer !== "python" && isExecutable(binary)) return { kind: "native", binary };
  const script = path.join(root, "native", "pagetoucher.py");
  const python = findOnPath("python3", options.pathEnv ?? process.env.PATH ?? "");
  if (python && existsSync(script)) return { kind: "python", python, script };
  const missing = [
    options.prefer === "python" ? null : `${binary} is not built (run \`npm run build\` on a host with a C compiler)`,
    python ? null : "python3 is not on PATH",
    existsSync(script) ? null : `${script} is missing`,
  ].filter((part): part is string => part !== null);
  throw new DrillError(`no page toucher to fault memory with: ${missing.join("; ")}`);
}

function command(impl: PageToucherImpl, args: string[]): PageToucherCommand {
  return impl.kind === "native"
    ? { file: impl.binary, args, fallback: false }
    : { file: impl.python, args: [impl.script, ...args], fallback: true };
}

function checkBytes(value: number, flag: string): string {
  if (!Number.isSafeInteger(value) || value <= 0) throw new UsageError(`${flag}: ${value} is not a positive whole number of bytes`);
  return String(value);
}

// The helper's own caps (native/pagetoucher.c): a hold as long as any drill
// duration, a lifetime a day more for the self-exit grace. Refusing here
// names the drill's flag instead.
const MAX_HOLD_MS = MAX_DURATION_MS;
const MAX_LIFETIME_MS = MAX_DURATION_MS + 24 * 3_600_000;

function checkMs(value: number, flag: string, min: number, max: number): string {
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new UsageError(`${flag}: ${value} is not whole milliseconds from ${min} to ${max / 86_400_000} days`);
  }
  return String(value);
}

function checkFile(file: string, flag: string): string {
  if (!path.isAbsolute(file)) throw new UsageError(`${flag}: "${file}" must be an absolute path`);
  return file;
}

function checkSeed(seed: number, flag: string): string {
  if (!Number.isSafeInteger(seed) || seed < 0) throw new UsageError(`${flag}: ${seed} is not a non-negative whole number`);
  return String(seed);
}

export const DEFAULT_SERVE_LIFETIME_MS = 3_600_000;

export interface AnonOptions {
  sizeBytes: number;
  holdMs: number;
  /** Default: holdMs + 5 min. */
  maxLifetimeMs?: number;
}

export interface ThrashOptions {
  file: string;
  sizeBytes: number;
  holdMs: number;
  order?: PageOrder;
  advice?: PageAdvice;
  seed?: number;
  /** Default: holdMs + 5 min. */
  maxLifetimeMs?: number;
}

export interface ServeOptions {
  file: string;
  sizeBytes: number;
  advice?: PageAdvice;
  seed?: number;
  /** Default: 1 h. */
  maxLifetimeMs?: number;
}

export function anonCommand(impl: PageToucherImpl, options: AnonOptions): PageToucherCommand {
  const lifetime = options.maxLifetimeMs ?? options.holdMs + SELF_EXIT_GRACE_MS;
  return command(impl, [
    "anon",
    "--size", checkBytes(options.sizeBytes, "--size"),
    "--hold-ms", checkMs(options.holdMs, "--hold", 0, MAX_HOLD_MS),
    "--max-lifetime-ms", checkMs(lifetime, "--max-lifetime", 1, MAX_LIFETIME_MS),
  ]);
}

export function thrashCommand(impl: PageToucherImpl, options: ThrashOptions): PageToucherCommand {
  const lifetime = options.maxLifetimeMs ?? options.holdMs + SELF_EXIT_GRACE_MS;
  const args = [
    "thrash",
    "--file", checkFile(options.file, "--file"),
    "--size", checkBytes(options.sizeBytes, "--size"),
    "--hold-ms", checkMs(options.holdMs, "--hold", 0, MAX_HOLD_MS),
    "--order", options.order ?? "random",
    "--advice", options.advice ?? "normal",
    "--max-lifetime-ms", checkMs(lifetime, "--max-lifetime", 1, MAX_LIFETIME_MS),
  ];
  if (options.seed !== undefined) args.push("--seed", checkSeed(options.seed, "--seed"));
  return command(impl, args);
}

export function serveCommand(impl: PageToucherImpl, options: ServeOptions): PageToucherCommand {
  const args = [
    "serve",
    "--file", checkFile(options.file, "--file"),
    "--size", checkBytes(options.sizeBytes, "--size"),
    "--advice", options.advice ?? "normal",
    "--max-lifetime-ms", checkMs(options.maxLifetimeMs ?? DEFAULT_SERVE_LIFETIME_MS, "--max-lifetime", 1, MAX_LIFETIME_MS),
  ];
  if (options.seed !== undefined) args.push("--seed", checkSeed(options.seed, "--seed"));
  return command(impl, args);
}

/**
 * Wraps a command so the process joins the given cgroup.procs files (v1
 * memory first, then the unified twin) before exec: its first page is then
 * charged inside the cgroup. Node has no execve; `/bin/sh` does. The paths
 * travel as arguments, never spliced into the script. A failed join exits 125
 * (sh names the file on stderr) before the helper runs.
 */
export function joinCgroupsFirst(cmd: PageToucherCommand, procsFiles: readonly string[]): PageToucherCommand {
  return { file: "/bin/sh", args: joinArgv([...procsFiles], cmd.file, cmd.args), fallback: cmd.fallback };
}

export type PageToucherLine =
  | {
      kind: "hello";
      impl: "c" | "python-fallback";
      mode: "anon" | "thrash" | "serve";
      pid: number;
      pageSize: number;
      sizeBytes: number;
      order: PageOrder | null;
      advice: PageAdvice | null;
      /** Up to 2^64: kept as text. */
      seed: string | null;
    }
  | { kind: "touched"; bytes: number }
  | { kind: "packed"; bytes: number }
  | { kind: "ready"; bytes: number }
  | { kind: "pass"; passes: number; us: number }
  | { kind: "reads"; pages: number; us: number }
  | { kind: "done"; us: number }
  | { kind: "err"; reason: string }
  | { kind: "exit"; reason: string }
  | { kind: "invalid"; line: string; reason: string };

const UINT = /^\d{1,16}$/;

function uint(text: string | undefined): number | null {
  return text !== undefined && UINT.test(text) && Number.isSafeInteger(Number(text)) ? Number(text) : null;
}

function invalid(line: string, reason: string): PageToucherLine {
  return { kind: "invalid", line: line.length > 80 ? `${line.slice(0, 80)}…` : line, reason };
}

/**
 * One stdout line of the helper:
 *   hello impl=c mode=thrash pid=4242 page=4096 size=268435456 order=random advice=normal seed=1
 *   touched 134217728 | packed 268435456 | ready 268435456 | pass 3 812345
 *   reads 2560 10154954 | done 124852 | err unknown command | exit signal SIGTERM
 * A line it cannot read is an `invalid` value, not a throw.
 */
export function parsePageToucherLine(raw: string): PageToucherLine {
  const line = raw.replace(/\r?\n$/, "");
  const [word, ...rest] = line.split(" ");
  switch (word) {
    case "touched":
    case "packed":
    case "ready": {
      const bytes = uint(rest[0]);
      return rest.length === 1 && bytes !== null ? { kind: word, bytes } : invalid(line, `${word} needs one byte count`);
    }
    case "done": {
      const us = uint(rest[0]);
      return rest.length === 1 && us !== null ? { kind: "done", us } : invalid(line, "done needs microseconds");
    }
    case "pass":
    case "reads": {
      const count = uint(rest[0]);
      const us = uint(rest[1]);
      if (rest.length !== 2 || count === null || us === null) return invalid(line, `${word} needs a count and microseconds`);
      return word === "pass" ? { kind: "pass", passes: count, us } : { kind: "reads", pages: count, us };
    }
    case "err":
    case "exit": {
      const reason = rest.join(" ");
      return reason === "" ? invalid(line, `${word} needs a reason`) : { kind: word, reason };
    }
    case "hello":
      return parseHello(line, rest);
    default:
      return invalid(line, "unknown line");
  }
}

function parseHello(line: string, pairs: string[]): PageToucherLine {
  const fields = new Map<string, string>();
  for (const pair of pairs) {
    const eq = pair.indexOf("=");
    if (eq <= 0) return invalid(line, `bad field "${pair}"`);
    const name = pair.slice(0, eq);
    if (fields.has(name)) return invalid(line, `duplicated field ${name}`);
    fields.set(name, pair.slice(eq + 1));
  }
  const impl = fields.get("impl");
  const mode = fields.get("mode");
  const pid = uint(fields.get("pid"));
  const pageSize = uint(fields.get("page"));
  const sizeBytes = uint(fields.get("size"));
  const order = fields.get("order") ?? null;
  const advice = fields.get("advice") ?? null;
  const seed = fields.get("seed") ?? null;
  if (impl !== "c" && impl !== "python-fallback") return invalid(line, "impl is not c or python-fallback");
  if (mode !== "anon" && mode !== "thrash" && mode !== "serve") return invalid(line, "unknown mode");
  if (pid === null || pageSize === null || sizeBytes === null) return invalid(line, "pid, page and size must be whole numbers");
  if (order !== null && order !== "random" && order !== "seq") return invalid(line, "order is not random or seq");
  if (advice !== null && advice !== "normal" && advice !== "random") return invalid(line, "advice is not normal or random");
  if (seed !== null && !/^\d{1,20}$/.test(seed)) return invalid(line, "seed is not a whole number");
  return { kind: "hello", impl, mode, pid, pageSize, sizeBytes, order, advice, seed };
}

/** The helper's exit status when it refused its --file (it exists, tmpfs/ramfs, no room): it never made it. */
const EXIT_REFUSED = 3;

/**
 * How the helper ended, in words an operator can act on (execa-style: fields, then a sentence).
 * `oomKillRose`: whether the cgroup's oom_kill count moved over the run, null when not read.
 * A SIGKILL it did not count is not the OOM killer's.
 */
export function describePageToucherExit(code: number | null, signal: NodeJS.Signals | null, oomKillRose: boolean | null = null): string {
  if (signal === "SIGKILL") {
    const left = "its file, if any, is left for the caller to unlink";
    if (oomKillRose === true) return `killed by SIGKILL: the OOM killer (the cgroup's oom_kill count rose); ${left}`;
    if (oomKillRose === false) return `killed by SIGKILL (oom_kill unchanged: not the OOM killer; a rollback, teardown or kill -9); ${left}`;
    return `killed by SIGKILL: likely the OOM killer (check the cgroup's oom_kill count); ${left}`;
  }
  if (signal !== null) return `killed by ${signal}`;
  switch (code) {
    case 0: return "exited 0";
    case 1: return "exited 1: failed (see its stderr)";
    case 2: return "exited 2: bad arguments";
    case EXIT_REFUSED: return "exited 3: refused (file exists, tmpfs/ramfs, or not enough free space)";
    case 125: return "exited 125: could not join the cgroup before exec";
    case 130: return "exited 130: stopped by SIGINT; its file, if any, unlinked";
    case 129: return "exited 129: stopped by SIGHUP; its file, if any, unlinked";
    case 143: return "exited 143: stopped by SIGTERM; its file, if any, unlinked";
    default: return `exited ${code ?? "?"}`;
  }
}

export interface PageToucherExit {
  code: number | null;
  signal: NodeJS.Signals | null;
  description: string;
}

export interface WeightsToucherOptions extends ServeOptions {
  /** Default: locatePageToucher(). */
  impl?: PageToucherImpl;
  /** cgroup.procs files to join before exec (see joinCgroupsFirst). */
  cgroupProcs?: readonly string[];
  /** Filling the file counts: default 120 s. */
  readyTimeoutMs?: number;
  onLine?: (line: PageToucherLine) => void;
}

interface Pending {
  resolve: (us: number) => void;
  reject: (err: Error) => void;
}

/**
 * The worker's mmapped weights: a `serve` coprocess. `pass()` faults every
 * page once and resolves with the microseconds it took, so a worker's token
 * rate slows through real refaults. `close()` is safe to call twice and always
 * leaves the file gone (but one it refused: never its own). A `start()` that
 * fails stops the helper and unlinks the file too: its caller has nothing to close.
 */
export class WeightsToucher {
  readonly pid: number;
  readonly fallback: boolean;
  readonly file: string;
  readonly sizeBytes: number;
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly pending: Pending[] = [];
  private stderrTail = "";
  private exitInfo: PageToucherExit | null = null;
  private readonly exitPromise: Promise<PageToucherExit>;
  private closing: Promise<PageToucherExit> | null = null;

  private constructor(child: ChildProcessWithoutNullStreams, options: WeightsToucherOptions, fallback: boolean) {
    if (child.pid === undefined) throw new DrillError("page toucher did not start");
    this.child = child;
    this.pid = child.pid;
    this.fallback = fallback;
    this.file = options.file;
    this.sizeBytes = options.sizeBytes;
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk: string) => {
      this.stderrTail = (this.stderrTail + chunk).slice(-2000);
    });
    child.stdin.on("error", () => {
      // EPIPE after the helper exited: the exit handler reports it.
    });
    this.exitPromise = new Promise((resolve) => {
      child.on("close", (code, signal) => {
        this.exitInfo = { code, signal, description: describePageToucherExit(code, signal) };
        const err = this.failure("exited");
        for (const waiter of this.pending.splice(0)) waiter.reject(err);
        resolve(this.exitInfo);
      });
    });
  }

  static async start(options: WeightsToucherOptions): Promise<WeightsToucher> {
    const impl = options.impl ?? locatePageToucher();
    let cmd = serveCommand(impl, options);
    if (options.cgroupProcs && options.cgroupProcs.length > 0) cmd = joinCgroupsFirst(cmd, options.cgroupProcs);
    const child = spawn(cmd.file, cmd.args, { stdio: ["pipe", "pipe", "pipe"] });
    const spawned = await new Promise<Error | null>((resolve) => {
      child.once("spawn", () => resolve(null));
      child.once("error", (err) => resolve(err));
    });
    if (spawned) throw new DrillError(`cannot start page toucher ${cmd.file}: ${spawned.message}`, undefined, { cause: spawned });
    const toucher = new WeightsToucher(child, options, cmd.fallback);
    const notReady = await toucher.waitReady(options.readyTimeoutMs ?? 120_000, options.onLine);
    if (notReady === null) return toucher;
    // The caller gets no toucher to close: a partly filled file must not outlive this call.
    const unlinked = await toucher.close().then(
      (exit) => (exit.code === EXIT_REFUSED ? "" : "; file unlinked"),
      (err: unknown) => `; file not unlinked: ${err instanceof Error ? err.message : String(err)}`,
    );
    throw toucher.failure(notReady, unlinked);
  }

  /** Null while running. */
  get exited(): PageToucherExit | null {
    return this.exitInfo;
  }

  private failure(what: string, after = ""): DrillError {
    const exit = this.exitInfo ? `: ${this.exitInfo.description}` : "";
    const stderr = this.stderrTail.trim() === "" ? "" : ` (stderr: ${this.stderrTail.trim().split("\n").slice(-3).join(" | ")})`;
    return new DrillError(`weights page toucher for ${this.file} ${what}${exit}${after}${stderr}`);
  }

  /** Null once ready, else what happened instead (start stops it and says so). */
  private waitReady(timeoutMs: number, onLine?: (line: PageToucherLine) => void): Promise<string | null> {
    return new Promise((resolve) => {
      let ready = false;
      const timer = setTimeout(() => resolve(`was not ready within ${timeoutMs} ms`), timeoutMs);
      const lines = createInterface({ input: this.child.stdout });
      lines.on("line", (text) => {
        const line = parsePageToucherLine(text);
        onLine?.(line);
        if (line.kind === "ready" && !ready) {
          ready = true;
          clearTimeout(timer);
          resolve(null);
        } else if (line.kind === "done") {
          this.pending.shift()?.resolve(line.us);
        } else if (line.kind === "err") {
          this.pending.shift()?.reject(this.failure(`refused a command: ${line.reason}`));
        }
      });
      void this.exitPromise.then(() => {
        clearTimeout(timer);
        if (!ready) resolve("exited before it was ready");
      });
    });
  }

  /** Faults every page once; resolves with the pass time in microseconds. */
  pass(order: PageOrder = "seq"): Promise<number> {
    if (this.exitInfo || this.closing) return Promise.reject(this.failure("is not running"));
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject });
      this.child.stdin.write(order === "random" ? "pass random\n" : "pass\n");
    });
  }

  /** quit, then SIGTERM, then SIGKILL; unlinks the file if the helper could not. */
  close(timeoutMs = 5000): Promise<PageToucherExit> {
    this.closing ??= this.shutdown(timeoutMs);
    return this.closing;
  }

  private async shutdown(timeoutMs: number): Promise<PageToucherExit> {
    const waitExit = (ms: number) =>
      Promise.race([this.exitPromise, new Promise<null>((resolve) => setTimeout(() => resolve(null), ms).unref())]);
    if (!this.exitInfo) {
      this.child.stdin.end("quit\n");
      if (!(await waitExit(timeoutMs))) {
        this.child.kill("SIGTERM");
        if (!(await waitExit(2000))) this.child.kill("SIGKILL");
      }
    }
    const exit = await this.exitPromise;
    // SIGKILL (ours or the OOM killer's) leaves the file: unlink it here. Not
    // after a refusal: the path it refused may be another program's file.
    const left = exit.code === EXIT_REFUSED ? null : unlinkLeftover(this.file);
    if (left !== null) throw new DrillError(`${this.file}: ${left}`);
    return exit;
  }
}
