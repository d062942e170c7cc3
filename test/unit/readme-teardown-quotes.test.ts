// QA: the README quoted `killed 2: ... via sigterm+cgroup.kill` as the teardown's output, but `drill cgroup
// teardown` prints one `killed <pid> (<name>) in <dir>` line each and `how: ...`; the quoted form is the
// rollback step's. Each quote is checked against what its command's code prints, and attributed to it.
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { teardownDoneLines } from "../../src/commands/cgroup.run.js";
import { describeTeardown } from "../../src/drill/rollback.js";
import { repoRoot } from "../helpers/cli.js";

const whole = readFileSync(path.join(repoRoot, "README.md"), "utf8").replace(/\s+/g, " ");
/** The README's sentence on how a teardown stops what runs (a failure shows it, not the whole README). */
const readme = whole.slice(whole.indexOf("Teardown sends SIGTERM first"), whole.indexOf("Teardown sends SIGTERM first") + 600);
const dir = "/sys/fs/cgroup/memory/fq";
const killed = [
  { pid: 11, comm: "node", dir },
  { pid: 12, comm: "pagetoucher", dir },
];

describe("the README's teardown quotes, each as its command prints it", () => {
  it("the rollback step: `killed 2: ... via sigterm+cgroup.kill`", () => {
    const line = describeTeardown({ kind: "removed", removed: [dir], alreadyGone: [], killed, unlinked: [], method: ["sigterm", "cgroup.kill"], forced: null, queuesServed: [], queuesServedUnread: null, left: [] });
    expect(line).toMatch(/^killed 2: .* via sigterm\+cgroup\.kill;/);
    expect(readme).toContain("the rollback's step says `killed 2: ... via sigterm+cgroup.kill`");
  });

  it("drill cgroup teardown: a `killed <pid> (<name>) in <dir>` line each, then `how: sigterm, then cgroup.kill`", () => {
    const lines = teardownDoneLines({ killed, removed: [dir], alreadyGone: [], unlinked: [], method: ["sigterm", "cgroup.kill"] });
    expect(lines.slice(0, 3)).toEqual([`killed 11 (node) in ${dir}`, `killed 12 (pagetoucher) in ${dir}`, "how: sigterm, then cgroup.kill"]);
    expect(teardownDoneLines({ killed, removed: [dir], alreadyGone: [], unlinked: [], method: ["sigterm"] })).toContain("how: sigterm");
    expect(readme).toContain("`drill cgroup teardown` prints one `killed <pid> (<name>) in <dir>` line each, then `how: sigterm, then cgroup.kill` (`how: sigterm` when all ended on the SIGTERM");
    // Not attributed to the teardown as a whole any more.
    expect(readme).not.toContain("kills what is left after 3 s (`killed 2:");
  });
});
