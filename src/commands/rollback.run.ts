import { writeErr } from "../closedStdout.js";
import { drillCommandFor, hostRoots, leverCommand, type GlobalOptions } from "../context.js";
import { describeRunningDrill, findRunningDrills, listDrills, rollbackDrill, rollbackHint, type DrillRollback } from "../drill/rollback.js";
import { validateDrillName } from "../drill/names.js";
import { readState } from "../drill/state.js";
import { ExitCode, RollbackIncompleteError } from "../errors.js";
import { finishDespiteInterrupt } from "../interrupt.js";
import { consoleOutput } from "../output.js";
import type { RollbackFlags } from "./rollback.js";

export async function rollbackAction(g: GlobalOptions, flags: RollbackFlags): Promise<void> {
  const output = consoleOutput(g.color);
  // `--name ""` is not "every drill", and `../other/smoke` is not under --state-dir.
  const names = flags.name !== undefined ? [validateDrillName(flags.name)] : listDrills(g.stateDir);
  const results: DrillRollback[] = [];
  // Stopped half-way, a rollback leaves the host half rolled back: the first
  // Ctrl-C only says so; a second one (or SIGTERM) stops, naming where.
  const drillCmd = drillCommandFor(g.stateDir);
  let current = { name: "", lastStep: "" };
  const interrupts = finishDespiteInterrupt(
    () => writeErr(`drill: SIGINT: finishing the rollback (stopping now would leave it half done); Ctrl-C again to stop anyway\n`),
    (signal) => {
      const where = current.lastStep === "" ? "before its first step" : `after step "${current.lastStep}"`;
      writeErr(`drill: interrupted by ${signal} during the rollback of ${current.name} ${where}; run \`${drillCmd} rollback --name ${current.name}\` again to finish it\n`);
      process.exit(signal === "SIGINT" ? ExitCode.interrupted : ExitCode.terminated);
    },
  );
  try {
    for (const name of names) {
      current = { name, lastStep: "" };
      await rollbackOne(name);
    }
  } finally {
    interrupts.dispose();
  }
  async function rollbackOne(name: string): Promise<void> {
    if (!g.json) output.out(`rollback ${name}:`);
    const result = await rollbackDrill(name, {
      roots: hostRoots(g),
      stateDir: g.stateDir,
      redisUrl: g.redisUrl,
      crashAt: process.env.DRILL_CRASH_AT,
      log: (step) => {
        current.lastStep = step.step;
        if (!g.json) output.out(`  ${step.ok ? "ok  " : output.color.red("FAIL")} ${step.step}: ${step.detail}`);
      },
    });
    if (result) results.push(result);
    else if (!g.json) output.out(`  no drill ${name} in ${g.stateDir}, or it is complete`);
  }
  // Nothing here is not nothing on the host: a wrong --state-dir (or sudo
  // dropping DRILL_STATE_DIR) must not pass a running drill for rolled back.
  const running = results.length === 0 ? findRunningDrills(hostRoots(g), flags.name) : [];
  const left = [...results.flatMap((r) => r.left.map((l) => `${r.name}: ${l}`)), ...running.map((r) => `${describeRunningDrill(r)}; ${rollbackHint(r)}`)];
  if (g.json) {
    output.json({ drills: results, nothing_to_roll_back: results.length === 0 && running.length === 0, running: running.map((r) => ({ ...r, hint: rollbackHint(r) })), left });
  } else if (running.length > 0) {
    output.out(`not rolled back: ${names.length === 0 ? "no drill" : `no ${names.join(", ")} to roll back`} in ${g.stateDir}, but drill processes run on this host:`);
    for (const r of running) {
      output.out(`  ${describeRunningDrill(r)}`);
      output.out(`    ${r.stateDir !== null && !r.complete && !r.stateMissing ? "roll it back: " : ""}${rollbackHint(r)}`);
    }
  } else if (results.length === 0) {
    const what = flags.name ? `no process of drill ${flags.name}` : "no drill process";
    output.out(`nothing to roll back: ${names.length === 0 ? "no drill" : `${names.join(", ")} absent or complete`} in ${g.stateDir}, and ${what} on this host`);
  } else {
    for (const r of results) {
      const drain = r.drainLength !== null ? `LLEN ${r.drainLength} in the drain` : r.left.some((l) => l.startsWith("drain pending")) ? "drain pending" : "no queue to drain";
      output.out(`${r.name}: ${drain}${r.exported ? `; keys exported to ${r.exported}` : ""}`);
    }
    output.out("Re-enable admission only once PSI avg10 stays under 1.00 (gate mode admit refuses otherwise):");
    for (const r of results) output.out(`  ${readmitHint(r, g)}`);
  }
  if (left.length > 0) throw new RollbackIncompleteError(`rollback incomplete; left: ${left.join("; ")}`);
}

/** Where to re-admit: the drill's own Redis, named (it is rolled back, so no command finds it in the state dir any more). */
function readmitHint(r: DrillRollback, g: GlobalOptions): string {
  let state;
  try {
    state = readState(g.stateDir, r.name);
  } catch {
    state = null;
  }
  const url = g.redisUrl ?? state?.redis.url ?? "";
  if (g.redisUrl === undefined && state?.redis.embedded && r.exported !== null) {
    return `${r.name}: nothing to re-admit, its embedded Redis stopped with the drill (every key in ${r.exported}); the next drill up admits from the start`;
  }
  if (url === "") return `${r.name}: no Redis was set up, nothing to re-admit`;
  return `${r.name}: ${leverCommand(url, state?.queue ?? "jobs", "admit")}`;
}
