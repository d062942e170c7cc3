/**
 * `<q>:seq` as drill pack's push script reads it (pushScript in scripts.ts is
 * the rule; change both together): '0', or digits with no leading zero, up to
 * 2^53-1, the last exact id. Pack refuses to push on anything else ('007',
 * '+5', ' 5', '1e3', '2^53'): no id was issued from it, so whoever counts
 * issued ids (report) reads it as unreadable, never as a number.
 */
export function parseSeq(text: string): number | null {
  if (text !== "0" && !/^[1-9]\d*$/.test(text)) return null;
  const seq = Number(text);
  return Number.isSafeInteger(seq) ? seq : null;
}

/** What parseSeq accepts, for messages that name a seq it refused. */
export const SEQ_RULE = "0, or digits with no leading zero, under 2^53: what drill pack pushes on";
