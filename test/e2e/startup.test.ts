import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { runDrill } from "../helpers/cli.js";

// Which modules `drill --help` loads, not how long it takes (bench/startup.mjs
// times it): a resolve hook appends every module URL the CLI resolves to a file.
const dir = mkdtempSync(path.join(tmpdir(), "drill-startup-"));
const loadsFile = path.join(dir, "loads.txt");
writeFileSync(
  path.join(dir, "hooks.mjs"),
  `import { appendFileSync } from "node:fs";
export async function resolve(specifier, context, next) {
  const result = await next(specifier, context);
  appendFileSync(process.env.DRILL_TEST_LOADS, result.url + "\\n");
  return result;
}
`,
);
writeFileSync(path.join(dir, "register.mjs"), `import { register } from "node:module";\nregister("./hooks.mjs", import.meta.url);\n`);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("start-up", () => {
  it("--help loads commander and the command definitions, no command implementation", async () => {
    const r = await runDrill(["--help"], { env: { NODE_OPTIONS: `--import ${path.join(dir, "register.mjs")}`, DRILL_TEST_LOADS: loadsFile } });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain("Usage: drill");
    // bin/drill.js runs dist/bundle/ (scripts/bundle.mjs), whose files say which module each part came from (`// dist/commands/watch.js`).
    const loaded = readFileSync(loadsFile, "utf8").split("\n").filter((url) => url.startsWith("file:"));
    expect(loaded.some((url) => url.includes("/node_modules/")), "the bundle holds the dependencies").toBe(false);
    const modules = loaded.filter((url) => url.includes("/dist/bundle/")).flatMap((url) => [...readFileSync(fileURLToPath(url), "utf8").matchAll(/^\/\/ (\S+\.[cm]?js)$/gm)].map((m) => m[1]!));
    expect(modules).toContain("dist/commands/watch.js");
    expect(modules).toContain("node_modules/commander/lib/command.js");
    const heavy = modules.filter((m) => /^node_modules\/(ioredis|zod|yaml|cli-table3|chalk|execa)\/|^dist\/commands\/[a-z]+\.run\.js$/.test(m));
    expect(heavy).toEqual([]);
  });
});
