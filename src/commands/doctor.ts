import { Command } from "commander";
import { validateParent } from "../cgroup/names.js";
import { hostRoots } from "../context.js";
import { evaluateChecks, servingVerdict } from "../doctor/checks.js";
import { gatherFacts } from "../doctor/gather.js";
import { drillVerdict, renderDoctor } from "../doctor/render.js";
import { RefusedError } from "../errors.js";
import { consoleOutput } from "../output.js";
import { parseSize } from "../units.js";
import type { CommandFactory } from "./index.js";

export interface DoctorOptions {
  parent?: string;
  fileDir: string;
  size: string;
}

export const doctorCommand: CommandFactory = (globals) =>
  new Command("doctor")
    .description("preflight checks; exit 3 only when the drill cannot run safely")
    .option("--parent <path|self>", "where the drill's cgroup would go (default: the hierarchy's root)")
    .option("--file-dir <dir>", "where the hog and weights files would go", "/var/tmp")
    .option("--size <size>", "the largest hog or weights file the drill will write", "3G")
    .action(async (options: DoctorOptions) => {
      const g = globals();
      const facts = await gatherFacts({
        roots: hostRoots(g),
        parent: validateParent(options.parent),
        redisUrl: g.redisUrl,
        hogDir: options.fileDir,
        hogBytes: parseSize(options.size, "--size"),
        stateDir: g.stateDir,
      });
      const checks = evaluateChecks(facts);
      const serving = servingVerdict(facts);
      const verdict = drillVerdict(checks);
      const output = consoleOutput(g.color);
      if (g.json) {
        output.json({ checks, verdict, serving });
      } else {
        output.out(renderDoctor(checks, serving, output.color, process.stdout.columns ?? 100));
      }
      if (verdict === "refused") {
        const fails = checks.filter((c) => c.status === "fail").map((c) => `${c.name}: ${c.detail}`);
        throw new RefusedError(`doctor refused: ${fails.join("; ")}`);
      }
    });
