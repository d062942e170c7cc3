import { UsageError } from "../errors.js";

/**
 * A flag's value (or the variable commander read into it, `source`) that was
 * not UTF-8: exit 2, before anything is made. Node decodes argv and the
 * environment as UTF-8 and each byte that is not as U+FFFD, so `--record
 * $'/tmp/x\xffy.jsonl'` arrives as `/tmp/x\u{fffd}y.jsonl`: another file, the
 * one every file op and every command drill prints would name (a cgroup, a
 * queue: another name). A U+FFFD typed as such is refused too: argv cannot
 * tell it from a replaced byte. `shown`: the value as the message may print
 * it (a Redis URL with its password masked).
 */
export function refuseNotUtf8(source: string, value: string, shown: (value: string) => string = (v) => v): void {
  if (!value.includes("\ufffd")) return;
  throw new UsageError(
    `${source}: ${shown(value)} is not valid UTF-8: it holds bytes that are not UTF-8 (read as U+FFFD), and drill would act on another name or path than the one typed; ` +
      "give it in UTF-8 (for a file or dir, a symlink to it with a UTF-8 name)",
  );
}
