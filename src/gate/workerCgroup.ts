import { existsSync } from "node:fs";
import { detectLayout } from "../cgroup/layout.js";
import { readCgroupSwap } from "../cgroup/memoryFiles.js";
import { validateCgroupName, validateParent } from "../cgroup/names.js";
import { resolveWorkerCgroup, type WorkerCgroup } from "../cgroup/paths.js";
import { recordedWorkerCgroup } from "../cgroup/teardown.js";
import { fail, ok, type HostRoots, type Reading } from "../host/kernelFile.js";
import { ForeignRecordError, RecordReadError, recordReadError } from "../util/ownFiles.js";
import { absentCgroupHint } from "../cgroup/elsewhere.js";
import { readPsiFile } from "../host/psi.js";
import { pressureFileProbe, type WorkerCgroupProbe } from "./signals.js";

/**
 * The worker cgroup as the gate and sidecar see it: the dirs drill recorded
 * when it made the cgroup (the unified twin sits under whoever ran setup),
 * else the ones --name/--parent compute. Failed, the file that did not read
 * and why: drill's record of the cgroup (a non-root run of a root drill's
 * state dir), /proc/self/cgroup (--parent self), no hierarchy at all.
 */
export function locateWorkerCgroup(roots: HostRoots, stateDir: string, name: string, parent: string | undefined): Reading<WorkerCgroup> {
  const layout = detectLayout(roots);
  if (!layout.ok) return layout;
  try {
    const computed = resolveWorkerCgroup(roots, layout.value, validateCgroupName(name), validateParent(parent));
    return ok(recordedWorkerCgroup(computed, stateDir, parent !== undefined) ?? computed);
  } catch (err) {
    if (err instanceof RecordReadError) {
      // Without the record the computed dirs may be another cgroup's (its twin is under whoever ran setup): not guessed.
      const own = recordReadError(err.file, err.cause, "give --state-dir a directory of your own and --name/--parent of a cgroup you can read");
      return fail(own.file, own.reason);
    }
    if (err instanceof ForeignRecordError) return fail(err.file, err.message);
    return fail(roots.proc("self", "cgroup"), err instanceof Error ? err.message : String(err));
  }
}

/**
 * A probe of the worker cgroup's own PSI and swap, read on every gate sample.
 * A cgroup that does not exist (yet, or any more) is "no worker cgroup": the
 * gate decides on host signals, it does not fail closed.
 */
export function workerCgroupProbe(cgroup: WorkerCgroup): WorkerCgroupProbe {
  return () => {
    if (!existsSync(cgroup.limits.dir)) return null;
    const pressure = cgroup.pressureFile ? readPsiFile(cgroup.pressureFile) : null;
    const swap = readCgroupSwap(cgroup.limits);
    // Swap used inside a cgroup whose swap is off means the limit leaked (read from the cgroup, not host si);
    // swap in use unreadable is no leak seen, as for the sidecar's swap_leak alarm.
    const swapLeak = swap.swapLimit === 0 && swap.swapCurrent !== null && swap.swapCurrent > 0;
    return { pressure: pressure?.ok ? pressure.value : null, swapLeak };
  };
}

export function resolveWorkerProbe(
  roots: HostRoots,
  stateDir: string,
  target: { name: string; parent: string | undefined; pressureFile: string | undefined },
): WorkerCgroupProbe | null {
  if (target.pressureFile) return pressureFileProbe(target.pressureFile);
  const cgroup = locateWorkerCgroup(roots, stateDir, target.name, target.parent);
  return cgroup.ok ? workerCgroupProbe(cgroup.value) : null;
}

/**
 * One stderr line at the gate's start when it will decide on host signals
 * alone: the --cgroup-pressure file does not read, or the worker cgroup is
 * not there (a --parent slip after `up --parent self` looks just like a
 * cgroup not set up yet). Both are allowed (the file or cgroup may come
 * later) but never silent. Null when the worker's own signals are there.
 */
export function gateSignalsHint(roots: HostRoots, stateDir: string, target: { name: string; parent: string | undefined; pressureFile: string | undefined }): string | null {
  if (target.pressureFile) {
    const reading = readPsiFile(target.pressureFile);
    return reading.ok ? null : `gate: --cgroup-pressure ${target.pressureFile}: ${reading.reason}; it decides on host signals alone until the file reads`;
  }
  const reading = locateWorkerCgroup(roots, stateDir, target.name, target.parent);
  return absentCgroupHint("gate", "it decides on host signals alone", roots, stateDir, target.name, reading);
}
