// QA "paste every command drill prints": hints that, pasted into bash as
// printed, acted on the wrong thing. Each is checked as bash splits it.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { spawnSync } from "node:child_process";
import { absentCgroupNext } from "../../src/cgroup/ready.js";
import { markerChange } from "../../src/cgroup/setup.js";
import { workerRecovery } from "../../src/commands/worker.run.js";
import { detachTimeoutText } from "../../src/commands/up.run.js";
import { DEFAULT_REDIS_URL, drillCommandFor, leverCommand, reportQueueAgain, rollbackAgain, type GlobalOptions } from "../../src/context.js";
import { queueClosingLines } from "../../src/commands/rollback.run.js";
import { rollbackDrill, rollbackHint, servingRunRollback, type RollbackStep } from "../../src/drill/rollback.js";
import { chooseDrillRedis, listDrills, readStateEntries } from "../../src/drill/state.js";
import { stalledParts } from "../../src/drill/stalls.js";
import { queueInUseText } from "../../src/drill/up.js";
import { HostRoots } from "../../src/host/kernelFile.js";
import { queueLeftOpenLine, queueRollbackCommand, type QueueLeftOpen } from "../../src/worker/served.js";
import { pastedArgv } from "../helpers/pasted.js";
import { writeFakeDrill } from "../helpers/fakeState.js";
import { resolveWorkerCgroup } from "../../src/cgroup/paths.js";
import type { CgroupLayout } from "../../src/cgroup/layout.js";

const root = mkdtempSync(path.join(os.tmpdir(), "drill-hints-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
/** A state dir whose name the shell would expand unquoted: `$X` is empty, so /…/s$X pasted bare is /…/s, another dir. */
const stateDir = path.join(root, "s$X y");
mkdirSync(stateDir);
const URL = "redis://127.0.0.1:7461";
const SOCKET = path.join(root, "my redis.sock");

describe("1. rollback --queue as the way to close and drain a hand-run queue", () => {
  writeFakeDrill(stateDir, "qaagb", "other", URL, { phase: "running" });
  writeFakeDrill(stateDir, "onq", "hq", URL, { phase: "running" });
  writeFakeDrill(stateDir, "done", "other", URL, { phase: "complete" });

  it("names the drills up there on other queues that it rolls back too, and the command for the queue alone", () => {
    const c = queueRollbackCommand({ stateDir }, URL, "hq");
    // Its own queue's drill is that queue's rollback; a complete one is not rolled back again.
    expect(c.alsoRollsBack).toEqual(["qaagb"]);
    expect(pastedArgv(c.command)).toEqual(["drill", "--state-dir", stateDir, "--redis", URL, "rollback", "--queue", "hq"]);
    // The same rollback with --queue-only: no drill there reached, and the state dir the same (not a temp dir left behind).
    expect(pastedArgv(c.queueOnlyCommand!)).toEqual(["drill", "--state-dir", stateDir, "--redis", URL, "rollback", "--queue", "hq", "--queue-only"]);
    const open: QueueLeftOpen = { queue: "hq", url: URL, lever: "admit", ...c };
    const line = queueLeftOpenLine(open);
    expect(line).toContain(`To close and drain it: ${c.command} (pasted as is, this also rolls back drill qaagb, up in that state dir on another queue`);
    expect(line).toContain(`this queue alone: ${c.queueOnlyCommand})`);
    // The launcher's line when its worker is killed says the same.
    expect(workerRecovery({ stateDir }, URL, "hq", "w1", {})).toContain(`drained by \`${c.command}\` (pasted as is, this also rolls back drill qaagb, `);
  });

  it("nothing else up there: the command alone, no queue-only variant", () => {
    // On another Redis, a queue of the same name is another queue.
    expect(queueRollbackCommand({ stateDir }, URL, "other").alsoRollsBack).toEqual(["onq"]);
    expect(queueRollbackCommand({ stateDir }, "redis://127.0.0.1:7462", "other").alsoRollsBack).toEqual(["onq", "qaagb"]);
    const lone = mkdtempSync(path.join(root, "lone-"));
    expect(queueRollbackCommand({ stateDir: lone }, URL, "q")).toEqual({ command: `drill --state-dir ${lone} --redis ${URL} rollback --queue q`, alsoRollsBack: [], queueOnlyCommand: null });
  });

  it("5. a killed worker's jobs: not said to be back in admitted", () => {
    const line = queueLeftOpenLine({ queue: "q", url: URL, lever: "admit", ...queueRollbackCommand({ stateDir: mkdtempSync(path.join(root, "e-")) }, URL, "q") });
    expect(line).not.toMatch(/\(what it held is back in q:admitted\)/);
    expect(line).toContain("what it held is back in q:admitted if it stopped on the SIGTERM; if it was killed, still in q:working:<its worker id>, which the queue's rollback re-drains");
  });
});

describe("2. what a rollback leaves names the command that runs it again, not a bare drill rollback", () => {
  it("a drill whose Redis does not answer: drain pending, run <the same rollback>", async () => {
    writeFakeDrill(stateDir, "pend", "q2", "redis://127.0.0.1:1", { phase: "stopped" });
    const steps: RollbackStep[] = [];
    const outcome = await rollbackDrill("pend", { roots: new HostRoots(), stateDir, log: (s) => steps.push(s) });
    if (outcome.kind !== "rolled_back") throw new Error(outcome.kind);
    const pending = outcome.result.left.find((l) => l.startsWith("drain pending"));
    const command = /\(run (.*)\)$/.exec(pending ?? "")?.[1];
    expect(command, pending).toBeDefined();
    expect(pastedArgv(command!)).toEqual(["drill", "--state-dir", stateDir, "rollback", "--name", "pend"]);
    rmSync(path.join(stateDir, "pend"), { recursive: true, force: true });
  });

  it("rollbackAgain: --name and --queue as asked, every word quoted", () => {
    expect(pastedArgv(rollbackAgain("drill --state-dir '/s t'", { queue: "xq" }, "smoke"))).toEqual(["drill", "--state-dir", "/s t", "rollback", "--name", "smoke", "--queue", "xq"]);
    expect(pastedArgv(rollbackAgain("drill", { name: "a b" }))).toEqual(["drill", "rollback", "--name", "a b"]);
  });
});

describe("3. up --detach that gave up waiting", () => {
  it("names the background up's pid and the rollback on its state dir", () => {
    const text = detachTimeoutText(270_000, 4242, true, "/s/smoke-up.log", rollbackAgain(`drill --state-dir '${stateDir}'`, {}, "smoke"));
    expect(text).toContain("its background up (pid 4242) is killed (SIGKILL): it starts nothing more");
    expect(pastedArgv(/then run (.*) for what it started$/.exec(text)![1]!)).toEqual(["drill", "--state-dir", stateDir, "rollback", "--name", "smoke"]);
    expect(detachTimeoutText(270_000, 4242, false, "/l", "drill rollback --name smoke")).toContain("could not be killed: kill -KILL 4242 first");
  });

  it("setup's marker-changed refusal: the rollback on setup's state dir", () => {
    const marker = (owner?: { drill: string; runId: string }) => ({ version: 1, name: "c", dirs: [], ...(owner ? { owner } : {}) }) as never;
    const text = markerChange(null, marker({ drill: "smoke", runId: "r" }), "/sys/fs/cgroup/c", "/m", drillCommandFor(stateDir))!;
    expect(pastedArgv(/Run (.*) first, or pick/.exec(text)![1]!)).toEqual(["drill", "--state-dir", stateDir, "rollback", "--name", "smoke"]);
  });
});

describe("4. every operator-typed word of a printed command is quoted", () => {
  it("a drill of another state dir, found serving the queue or running: its state dir as one word", () => {
    expect(pastedArgv(servingRunRollback({ runId: "smoke-20260101000000-abcdef", stateDir, pid: 1 }))).toEqual(["drill", "--state-dir", stateDir, "rollback", "--name", "smoke"]);
    const run = { runId: "smoke-1", drill: "smoke", stateDir, complete: false, stateMissing: false, processes: [] };
    expect(pastedArgv(rollbackHint(run))).toEqual(["drill", "--state-dir", stateDir, "rollback", "--name", "smoke"]);
  });

  it("the lever with no state dir: a socket path with a space and a queue with a $ stay whole", () => {
    expect(pastedArgv(leverCommand(SOCKET, "xq", "reject_all"))).toEqual(["drill", "--redis", SOCKET, "gate", "mode", "reject_all", "--queue", "xq"]);
    expect(pastedArgv(leverCommand("redis://:pw@127.0.0.1:7461", "jobs", "admit"))).toEqual(["drill", "--redis", "redis://:***@127.0.0.1:7461", "gate", "mode", "admit"]);
  });

  it("the thaw of a frozen worker cgroup writes its cgroup.freeze, whatever its path", () => {
    const dir = path.join(root, "cg $Q y");
    mkdirSync(dir);
    writeFileSync(path.join(dir, "cgroup.freeze"), "1\n");
    const [part] = stalledParts([], [dir]);
    const command = /until `(.*)`$/.exec(part!.stalled)![1]!;
    expect(spawnSync("bash", ["-c", command], { cwd: root }).status).toBe(0);
    expect(readFileSync(path.join(dir, "cgroup.freeze"), "utf8")).toBe("0\n");
  });

  it("the setup a command needs first: its cgroup name and parent as one word each", () => {
    const roots = new HostRoots(path.join(root, "proc"), path.join(root, "sys"));
    const layout: CgroupLayout = { kind: "v2", memoryMount: null, unifiedMount: path.join(root, "sys", "fs", "cgroup") };
    const computed = resolveWorkerCgroup(roots, layout, "qaagc$Q", { kind: "path", path: "/" });
    const text = absentCgroupNext(roots, computed, stateDir, "/a b");
    const command = /^run (.*) first$/.exec(text)?.[1];
    expect(command, text).toBeDefined();
    expect(pastedArgv(command!)).toEqual(["drill", "--state-dir", stateDir, "--sysfs", path.join(root, "sys"), "--procfs", path.join(root, "proc"), "cgroup", "setup", "--name", "qaagc$Q", "--parent", "/a b"]);
  });

  it("the flags that reach a drill's Redis: its cgroup name as one word", () => {
    const dir = mkdtempSync(path.join(root, "want-"));
    writeFakeDrill(dir, "qaag15", "jobs", URL, { phase: "running", cgroup: { name: "qaag15 x$Q", parent: "/", dirs: [] } as never });
    let said = "";
    try {
      chooseDrillRedis(readStateEntries(dir, listDrills(dir)), { queue: "jobs", cgroupName: "infer" }, dir);
    } catch (err) {
      said = (err as Error).message;
    }
    const flags = /give (.*) for its Redis/.exec(said)?.[1];
    expect(flags, said).toBeDefined();
    expect(pastedArgv(`drill worker ${flags!}`)).toEqual(["drill", "worker", "--name", "qaag15 x$Q"]);
  });
});

describe("6. up's refusals of a queue that holds keys", () => {
  const found = [{ key: "xq", type: "list", length: 0 }, { key: "xq_drain", type: "list", length: 3 }];
  it("keys left: the report command on up's state dir, its words whole", () => {
    const text = queueInUseText({ queue: "xq", url: URL, found, upDrills: [], drillCmd: `drill --state-dir '${stateDir}'`, upOnAnotherQueue: "drill up --queue <another name>" });
    const report = /keep what you need of them first \(.*; (drill .*) keeps their summary\)/.exec(text)?.[1];
    expect(report, text).toBeDefined();
    expect(pastedArgv(report!)).toEqual(["drill", "--state-dir", stateDir, "--redis", URL, "report", "--queue", "xq", "--format", "md"]);
    expect(pastedArgv(/yourself: (redis-cli .*), and each key/.exec(text)![1]!)).toEqual(["redis-cli", "-u", URL, "DEL", "xq", "xq_drain"]);
  });

  it("in use by a drill of another state dir that serves it: that drill's rollback, named", () => {
    const live = [...found, { key: "xq:gates:g1", type: "string", length: null }];
    const text = queueInUseText({ queue: "xq", url: URL, found: live, upDrills: [], drillCmd: "drill", servedBy: { what: "drill smoke's gate (pid 7, run smoke-1)", rollback: servingRunRollback({ runId: "smoke-20260101000000-abcdef", stateDir, pid: 7 }) }, upOnAnotherQueue: "drill up --queue <another name>" });
    expect(text).toContain("by drill smoke's gate (pid 7, run smoke-1), up from another --state-dir");
    expect(pastedArgv(/or first: (.*)$/.exec(text)![1]!)).toEqual(["drill", "--state-dir", stateDir, "rollback", "--name", "smoke"]);
  });
});

describe("7. a queue's report after its rollback (report --queue): on the Redis the rollback acted on", () => {
  const at = (redis: Pick<GlobalOptions, "redisUrl" | "redisTyped">): GlobalOptions => ({ ...redis, stateDir, procfs: "/proc", sysfs: "/sys", json: false, color: false });
  const reportOf = (lines: string[]) => {
    const i = lines.indexOf("For the incident notes:");
    expect(i, lines.join("\n")).toBeGreaterThan(0);
    return pastedArgv(lines[i + 1]!.trim());
  };
  const closed = (url: string) => ({ queue: "hq", url, steps: [], drainLength: 2, left: [] });

  it("--redis typed: named again; from DRILL_REDIS_URL: left to it, as every printed command", () => {
    expect(reportOf(queueClosingLines(closed(URL), URL, "unused", at({ redisUrl: URL, redisTyped: true })))).toEqual(["drill", "--state-dir", stateDir, "--redis", URL, "report", "--queue", "hq", "--format", "md"]);
    expect(reportOf(queueClosingLines(closed(URL), URL, "unused", at({ redisUrl: URL, redisTyped: false })))).toEqual(["drill", "--state-dir", stateDir, "report", "--queue", "hq", "--format", "md"]);
  });

  it("neither: the default the rollback used, named (report has no default Redis: 'no drill to report on', or another drill's)", () => {
    expect(reportOf(queueClosingLines(closed(DEFAULT_REDIS_URL), DEFAULT_REDIS_URL, "unused", at({ redisUrl: undefined })))).toEqual(["drill", "--state-dir", stateDir, "--redis", DEFAULT_REDIS_URL, "report", "--queue", "hq", "--format", "md"]);
  });

  it("reportQueueAgain: every word whole, the password masked", () => {
    expect(pastedArgv(reportQueueAgain(drillCommandFor(stateDir), "x$Q y", SOCKET))).toEqual(["drill", "--state-dir", stateDir, "--redis", SOCKET, "report", "--queue", "x$Q y", "--format", "md"]);
    expect(pastedArgv(reportQueueAgain("drill", "q", "redis://:pw@127.0.0.1:7461"))).toEqual(["drill", "--redis", "redis://:***@127.0.0.1:7461", "report", "--queue", "q", "--format", "md"]);
  });
});
