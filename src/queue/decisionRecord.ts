/**
 * A job id's decision record, as the decision scripts keep it in hash
 * `<q>:decisions` (field = job id): `fingerprint \t attempt \t kind \t figures`.
 * The scripts in scripts.ts write and apply it atomically; this is the same
 * rule in TypeScript for `gate --dry-run`, which must predict them.
 */
export interface DecisionRecord {
  fingerprint: string;
  /** As the hash holds it: check_record compares attempts as text. */
  attempt: string;
  kind: string;
  figures: string;
}

/** What a delivery meets in its id's record: the stored decision, or none that applies. */
export type RecordCheck = { kind: "fresh" } | { kind: "conflict" | "redelivery"; storedKind: string; storedFigures: string };

// parse_record's pattern; `s` because Lua's `.` also matches a newline.
const RECORD = /^([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$/s;

/** parse_record in scripts.ts: text that does not split into the four fields is no record. */
export function parseDecisionRecord(text: string | null): DecisionRecord | null {
  const match = text === null ? null : RECORD.exec(text);
  if (match === null) return null;
  const [, fingerprint = "", attempt = "", kind = "", figures = ""] = match;
  return { fingerprint, attempt, kind, figures };
}

/**
 * Mirrors check_record in scripts.ts, the authority (change both together):
 * a different job under a used id is a conflict (dead); the same job gets the
 * stored decision when it is the same attempt, or when it was admitted
 * whatever the attempt (gate recovery bumps a re-sent copy's attempt); a new
 * attempt of a rejected job is decided afresh.
 */
export function checkDecisionRecord(record: DecisionRecord | null, fingerprint: string, attempt: number): RecordCheck {
  if (record === null) return { kind: "fresh" };
  const stored = { storedKind: record.kind, storedFigures: record.figures };
  if (record.fingerprint !== fingerprint) return { kind: "conflict", ...stored };
  if (record.attempt === String(attempt) || record.kind === "admit") return { kind: "redelivery", ...stored };
  return { kind: "fresh" };
}

/** What a decision whose reply was lost (Redis gone mid-script) left in its id's record. */
export type UnheardCheck = { kind: "applied"; storedKind: string; storedFigures: string } | { kind: "not_ours"; stored: DecisionRecord | null };

/**
 * The gate's job left its processing list while Redis was gone, with no reply
 * heard: a record of this fingerprint at this very attempt was written by the
 * decision script it sent (the script removes the job and writes the record
 * together). Any other record, or none, means the job left another way:
 * another gate recovered the list once this gate's heartbeat expired, and a
 * recovered copy is decided at attempt+1.
 */
export function checkUnheardDecision(record: DecisionRecord | null, fingerprint: string, attempt: number): UnheardCheck {
  if (record !== null && record.fingerprint === fingerprint && record.attempt === String(attempt)) {
    return { kind: "applied", storedKind: record.kind, storedFigures: record.figures };
  }
  return { kind: "not_ours", stored: record };
}
