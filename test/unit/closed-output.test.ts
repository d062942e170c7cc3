import type { Command } from "commander";
import { describe, expect, it } from "vitest";
import { buildProgram } from "../../src/cli.js";
import { survivesClosedOutputOf } from "../../src/closedStdout.js";

/**
 * `drill <command> | head`: which commands keep running once the reader has
 * gone. Every command that changes state does (stopped half-way it leaves
 * the host or the queue half changed); those that only read end quietly.
 * A new command fails here until it is put in one column.
 */
const CHANGES_STATE = ["cgroup setup", "cgroup teardown", "inject", "pack", "worker", "gate", "gate mode", "up", "rollback"];
const ONLY_READS = ["doctor", "cgroup status", "watch", "report", "help"];
/** Groups with no action of their own (`drill cgroup` prints its help). */
const GROUPS = ["cgroup"];

function commandPaths(command: Command, prefix: string[] = []): string[] {
  return command.commands.flatMap((sub) => {
    const path = [...prefix, sub.name()];
    return [path.join(" "), ...commandPaths(sub, path)];
  });
}

describe("a closed stdout/stderr: one rule for every command", () => {
  it("every command of the program is in one column", () => {
    expect(commandPaths(buildProgram()).sort()).toEqual([...CHANGES_STATE, ...ONLY_READS, ...GROUPS].sort());
  });

  it.each(CHANGES_STATE)("drill %s changes state: it survives the reader going away", (path) => {
    expect(survivesClosedOutputOf(path)).toBe(true);
  });

  it.each(ONLY_READS)("drill %s only reads: it ends quietly", (path) => {
    expect(survivesClosedOutputOf(path)).toBe(false);
  });
});
