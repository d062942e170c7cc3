import type { GateMode } from "../gate/policy.js";

/** What `<q>:mode` holds: its Redis type (`none` when unset) and its value when a string. */
export interface StoredMode {
  type: string;
  value: string | null;
}

export const UNSET_MODE: StoredMode = { type: "none", value: null };

/**
 * The lever as the gate reads it (the scripts' read_mode is the same rule:
 * change both together): unset or exactly `admit` admits; anything else, a
 * mistyped deny-all or a key of another type, rejects every job (fail closed).
 */
export function gateModeOf(stored: StoredMode): GateMode {
  if (stored.type === "none" || (stored.type === "string" && stored.value === "admit")) return "admit";
  return "reject_all";
}

/** What the key holds when it is not a mode, in a few words; null when it is one (or unset). */
export function modeMistake(stored: StoredMode): string | null {
  if (stored.type === "none") return null;
  if (stored.type !== "string") return `is a ${stored.type}, not a string`;
  if (stored.value === "admit" || stored.value === "reject_all") return null;
  return `holds ${JSON.stringify((stored.value ?? "").slice(0, 40))}, not admit or reject_all`;
}

/** The extra k=v a decision carries when the lever is not a mode: `mode_value=banana`, `mode_type=hash`. */
export function modeValueField(stored: StoredMode): string | null {
  if (modeMistake(stored) === null) return null;
  if (stored.type !== "string") return `mode_type=${stored.type}`;
  const value = (stored.value ?? "").slice(0, 40);
  return `mode_value=${/^[^\s"]+$/.test(value) ? value : JSON.stringify(value)}`;
}

/**
 * A decision's recorded figures (decisionFigures(), then ` ${modeValueField()}`
 * when the lever was not a mode: what `<q>:decisions` and `<q>:events` hold)
 * split where that note begins: the decision's own figures, and the note with
 * its leading space, or "". The note's value may be quoted with spaces in it;
 * the decision's figures never hold `mode_value=`/`mode_type=`, so the first
 * one is the note's.
 */
export function splitModeNote(figures: string): { figures: string; modeNote: string } {
  const at = figures.search(/ mode_(?:value|type)=/);
  return at < 0 ? { figures, modeNote: "" } : { figures: figures.slice(0, at), modeNote: figures.slice(at) };
}

/** The stderr line for a lever that is not a mode (gate, dry run, `gate mode`), or null. */
export function modeWarning(key: string, stored: StoredMode, what: string): string | null {
  const mistake = modeMistake(stored);
  return mistake === null ? null : `${key} ${mistake}: ${what}`;
}
