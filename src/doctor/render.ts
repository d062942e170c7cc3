import Table from "cli-table3";
import type { ChalkInstance } from "chalk";
import type { Check, ServingVerdict } from "./checks.js";

export type DrillVerdict = "ready" | "ready_with_warnings" | "refused";

export function drillVerdict(checks: Check[]): DrillVerdict {
  if (checks.some((c) => c.status === "fail")) return "refused";
  return checks.some((c) => c.status === "warn") ? "ready_with_warnings" : "ready";
}

export function renderDoctor(checks: Check[], serving: ServingVerdict, color: ChalkInstance, width = 100): string {
  const mark = { pass: color.green("pass"), warn: color.yellow("warn"), fail: color.red("FAIL") };
  const table = new Table({
    head: ["check", "status", "value", "detail"],
    style: { head: [], border: [] },
    colWidths: [22, 8, 30, Math.max(30, width - 66)],
    wordWrap: true,
    wrapOnWordBoundary: true,
  });
  for (const c of checks) table.push([c.name, mark[c.status], c.value === null ? "-" : String(c.value), c.detail]);

  const verdict = drillVerdict(checks);
  const lines = [table.toString()];
  const fails = checks.filter((c) => c.status === "fail");
  if (verdict === "refused") {
    lines.push(color.red(`drill: REFUSED, the drill cannot run safely here: ${fails.map((c) => c.name).join(", ")}`));
  } else {
    lines.push(verdict === "ready" ? color.green("drill: ready") : color.yellow("drill: ready, read the warnings above"));
  }
  lines.push(
    "",
    `serving on this host class (the runbook's "refuse the free-host bet" list; informational, never blocks the drill):`,
  );
  for (const r of serving.reasons) {
    const state = r.holds === null ? "ask " : r.holds ? color.red("yes ") : color.green("no  ");
    lines.push(`  ${state} ${r.rule} (${r.why})`);
  }
  lines.push(
    serving.refuse
      ? color.red("  verdict: refuse the free-host bet for deadline serving; rehearse and gate it here instead")
      : "  verdict: no refusal condition holds; still gate admission on PSI, slack and packed tokens",
  );
  return lines.join("\n");
}
