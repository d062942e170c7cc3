import { validateParent } from "../cgroup/names.js";
import { hostRoots, type GlobalOptions } from "../context.js";
import { evaluateChecks, servingVerdict } from "../doctor/checks.js";
import { gatherFacts } from "../doctor/gather.js";
import { drillVerdict, renderDoctor } from "../doctor/render.js";
import { RefusedError } from "../errors.js";
import { consoleOutput } from "../output.js";
import { terminalWidth } from "../terminalWidth.js";
import { parseSize } from "../units.js";
import type { DoctorOptions } from "./doctor.js";
import { resolveFileDir } from "./up.js";

export async function doctorAction(g: GlobalOptions, options: DoctorOptions): Promise<void> {
  const facts = await gatherFacts({
    roots: hostRoots(g),
    parent: validateParent(options.parent),
    redisUrl: g.redisUrl,
    // Checked as up checks it: a --file-dir that is no directory is a typo (exit 2), as a --parent that does not exist is, not an unsafe host.
    hogDir: resolveFileDir(options.fileDir),
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
    output.out(renderDoctor(checks, serving, output.color, terminalWidth(process.stdout), output.unicode));
  }
  if (verdict === "refused") {
    const fails = checks.filter((c) => c.status === "fail").map((c) => `${c.name}: ${c.detail}`);
    throw new RefusedError(`doctor refused: ${fails.join("; ")}`);
  }
}
