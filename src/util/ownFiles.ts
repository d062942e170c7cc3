import { closeSync, constants, fchmodSync, fstatSync, openSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { DrillError, ExitCode, refusalMeaning } from "../errors.js";

/**
 * Drill's own dirs and files under --state-dir (records, locks, logs, the
 * embedded Redis's dir): the owner's alone, set explicitly, not left to the
 * umask. QA: under umask 000 they were world-writable, and a record another
 * user wrote there made root's rollback kill an unrelated cgroup's tasks.
 */
export const OWN_DIR_MODE = 0o700;
export const OWN_FILE_MODE = 0o600;

/** Opens one of drill's own files (`flags` as openSync's), created or already there, with OWN_FILE_MODE whatever the umask. */
export function openOwnFile(file: string, flags: string): number {
  const fd = openSync(file, flags, OWN_FILE_MODE);
  try {
    fchmodSync(fd, OWN_FILE_MODE);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  return fd;
}

/** Who may have written a file or dir: its owner and mode (st_uid, st_mode). */
export interface WrittenBy {
  uid: number;
  mode: number;
}

/** Why a record cannot be taken as drill's own, each with its fix; empty when it can. */
export type RecordDistrust = Array<{ reason: string; fix: string }>;

/**
 * Drill acts on a record (kills its pids, removes its cgroup, unlinks its
 * files, talks to its Redis) only if it can have written it: the file and
 * its dir owned by the user running drill (`euid`) or by root, and neither
 * writable by other users. Another user's file, or one in a dir others can
 * write (where they can put or replace one), may be forged.
 */
export function recordDistrust(file: string, written: WrittenBy, dir: WrittenBy, euid: number): RecordDistrust {
  const dirPath = path.dirname(file);
  const who = euid === 0 ? "not root, who runs drill" : `neither root nor the user running drill (uid ${euid})`;
  const owner = (uid: number) => uid === euid || uid === 0;
  const mode = (m: number) => `mode ${(m & 0o7777).toString(8).padStart(4, "0")}`;
  const distrust: RecordDistrust = [];
  if (!owner(written.uid)) distrust.push({ reason: `it is owned by uid ${written.uid}, ${who}`, fix: `chown ${euid} ${file}` });
  if ((written.mode & 0o022) !== 0) distrust.push({ reason: `other users can write it (${mode(written.mode)})`, fix: `chmod go-w ${file}` });
  if (!owner(dir.uid)) distrust.push({ reason: `its dir ${dirPath} is owned by uid ${dir.uid}, ${who}`, fix: `chown ${euid} ${dirPath}` });
  if ((dir.mode & 0o022) !== 0) distrust.push({ reason: `other users can write its dir ${dirPath} (${mode(dir.mode)})`, fix: `chmod go-w ${dirPath}` });
  return distrust;
}

/** A record drill did not write (recordDistrust): exit 4, as any record a rollback cannot act on; 2 to a command that does not undo (foreignRecordRefusal). */
export class ForeignRecordError extends DrillError {
  readonly file: string;
  constructor(file: string, distrust: RecordDistrust) {
    const fixes = distrust.map((d) => d.fix).join(" and ");
    super(
      `${file} is not a record drill wrote: ${distrust.map((d) => d.reason).join("; ")}. Nothing is done on its word: ` +
        `check what it names and who put it there; remove it if it is not drill's, or if it is, ${fixes}; then run drill again`,
      ExitCode.rollbackIncomplete,
    );
    this.name = "ForeignRecordError";
    this.file = file;
  }
}

/**
 * Commands (by path, `cgroup teardown`) that undo what a drill made: a record
 * drill did not write leaves what it stands for in place (a cgroup, a
 * drill's processes), ForeignRecordError's 4, "rollback incomplete".
 */
const UNDOING_COMMANDS: ReadonlySet<string> = new Set(["rollback", "cgroup teardown"]);

/**
 * A record drill did not write, as the command that met it (`commandPath`)
 * exits on it: 4 for one that undoes (UNDOING_COMMANDS); for every other it
 * is input it cannot take, exit 2, bad input (DESIGN.md): `cgroup setup`,
 * `inject`, `worker`, `gate`, `pack` and `up` refuse before acting on its
 * word, and report, `cgroup status`, watch and doctor only read, so none
 * leaves anything unfinished. main() asks, and gatherReport. Any other error
 * as it is.
 */
export function foreignRecordRefusal(err: unknown, commandPath: string): unknown {
  if (!(err instanceof ForeignRecordError) || UNDOING_COMMANDS.has(commandPath)) return err;
  return new DrillError(err.message, ExitCode.usage, { cause: err });
}

/**
 * The text of one of drill's records (state.json, a cgroup marker, a hog or
 * served-queue record, a lock), or null when there is none. One place for
 * every record drill acts on: ForeignRecordError when drill cannot have
 * written it (recordDistrust), or it is no plain file (a link or a FIFO
 * drill never makes). Other errors (EACCES) are thrown as they come.
 */
export function readOwnRecord(file: string, euid = process.geteuid?.() ?? 0): string | null {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return null;
    if (code === "ELOOP") throw new ForeignRecordError(file, [{ reason: "it is a symbolic link (drill writes none)", fix: "put the file it points to in its place" }]);
    throw err;
  }
  try {
    const written = fstatSync(fd);
    if (!written.isFile()) throw new ForeignRecordError(file, [{ reason: "it is not a plain file (drill writes only those)", fix: "put drill's file in its place" }]);
    const distrust = recordDistrust(file, written, statSync(path.dirname(file)), euid);
    if (distrust.length > 0) throw new ForeignRecordError(file, distrust);
    return readFileSync(fd, "utf8");
  } finally {
    closeSync(fd);
  }
}

/**
 * One of drill's records that did not read, as `cannot read <file>: <reason>`.
 * `file` and `reason` apart, for the observers (watch, gate) to list the file
 * with its null fields rather than blame another (QA: watch named
 * /proc/self/cgroup for a cgroup marker it could not read).
 */
export class RecordReadError extends DrillError {
  readonly file: string;
  readonly reason: string;
  constructor(file: string, reason: string, cause: unknown) {
    super(`cannot read ${file}: ${reason}`, ExitCode.failed, { cause });
    this.name = "RecordReadError";
    this.file = file;
    this.reason = reason;
  }
}

/**
 * A record that did not read: EACCES names whose it is and to run as that
 * user (up makes a drill dir 0700, the records' dirs are 0700 and their
 * files 0600: another user cannot even see them). `orElse`: what else a
 * user who is not root can do, for a command that can go on without it.
 */
export function recordReadError(file: string, err: unknown, orElse: string | null = null, isRoot = process.geteuid?.() === 0): RecordReadError {
  const code = (err as NodeJS.ErrnoException).code;
  const meaning = code === "EACCES" || code === "EPERM" ? refusalMeaning(code) : null;
  if (meaning === null) return new RecordReadError(file, err instanceof Error ? err.message : String(err), err);
  // The file's owner, else (its dir refused even a stat) the dir's.
  const seen = [file, path.dirname(file)].map(ownerOf).find((o) => o !== null);
  const whose = seen === undefined ? "" : `${whoseText(seen)}: `;
  const runAs = seen === undefined || seen.uid === 0 ? "run as root" : `run as uid ${seen.uid} or root`;
  const fix = isRoot ? "refused to root too: a restricted mount or a security policy" : orElse === null ? runAs : `${runAs}, or ${orElse}`;
  return new RecordReadError(file, `${code} (${meaning}: ${whose}${fix})`, err);
}

/** Who owns a path, and its mode; null when it cannot be stat'ed (gone, or its dir refused even that). */
function ownerOf(at: string): { at: string; uid: number; mode: number } | null {
  try {
    const st = statSync(at);
    return { at, uid: st.uid, mode: st.mode & 0o777 };
  } catch {
    return null;
  }
}

/** `<path> is root's, mode 0700`, as a refusal names whose a file or dir is. */
function whoseText(seen: { at: string; uid: number; mode: number }): string {
  return `${seen.at} is ${seen.uid === 0 ? "root" : `uid ${seen.uid}`}'s, mode ${seen.mode.toString(8).padStart(4, "0")}`;
}

/**
 * Why a file could not be written in `dir` when the kernel refused it
 * (EACCES, EPERM) because the dir is another user's and drill is not root:
 * `EACCES (permission denied: <dir> is root's, mode 0755: not writable by this
 * user (uid N); run as root to finish it)`. Null when that is not why (root,
 * or the dir this user's own: a mount or a policy, said by the caller).
 */
export function notWritableByThisUser(dir: string, code: string | undefined, euid = process.geteuid?.() ?? 0): string | null {
  return otherUsersDir(dir, code, euid)?.text ?? null;
}

/** notWritableByThisUser's `text`, and who may write there (`as`: "root", "uid N or root") for a line that says who reruns it. */
export function otherUsersDir(dir: string, code: string | undefined, euid = process.geteuid?.() ?? 0): { text: string; as: string } | null {
  const meaning = code === "EACCES" || code === "EPERM" ? refusalMeaning(code) : null;
  const seen = meaning === null || euid === 0 ? null : ownerOf(dir);
  if (seen === null || seen.uid === euid) return null;
  const as = seen.uid === 0 ? "root" : `uid ${seen.uid} or root`;
  return { text: `${code} (${meaning}: ${whoseText(seen)}: not writable by this user (uid ${euid}); run as ${as} to finish it)`, as };
}

/** A file drill could not write, said as notWritableByThisUser says why, then what stays as it is (`kept`); `reason` apart, for a line that names the file itself. */
export class FileWriteError extends DrillError {
  readonly reason: string;
  constructor(file: string, reason: string, cause: unknown, kept: string) {
    super(`cannot write ${file}: ${reason}; ${kept}`, ExitCode.failed, { cause });
    this.name = "FileWriteError";
    this.reason = reason;
  }
}
