import { describe, expect, it } from "vitest";
import { overrideWords } from "../../src/commands/up.js";
import { queueInUseText, upCommand, type QueueKey } from "../../src/drill/up.js";

const URL = "redis://127.0.0.1:7410";
const UP = `drill --redis ${URL} up --drill /d/smoke.yaml --queue <another name>`;
const left: QueueKey[] = [
  { key: "q7", type: "list", length: 0 },
  { key: "q7:seq", type: "string", length: null },
  { key: "q7_drain", type: "list", length: 3 },
];
const live: QueueKey[] = [...left, { key: "q7:gates:vm-20423", type: "string", length: null }, { key: "q7:workers:smokew", type: "string", length: null }, { key: "q7:gates", type: "hash", length: 1 }];

// QA: with drill smoke's gate and worker running on the queue, up listed their heartbeats and advised DEL of the queue's keys.
describe("up refuses a queue that holds keys, saying whose they are", () => {
  it("an earlier run's keys: the DEL advice names the URL it knows, not <url>", () => {
    const text = queueInUseText({ queue: "q7", url: URL, found: left, upDrills: [], drillCmd: "drill", upOnAnotherQueue: UP });
    expect(text).toMatch(/^queue q7 on redis:\/\/127\.0\.0\.1:7410 already holds keys \(an earlier run's: /);
    expect(text).toContain("q7 (list, 0), q7:seq (string), q7_drain (list, 3)");
    expect(text).toContain(`redis-cli -u ${URL} DEL q7 q7_drain, and each key redis-cli -u ${URL} --scan --pattern 'q7:*' lists`);
    expect(text).toContain(`drill --redis ${URL} report --queue q7 --format md`);
    expect(text).toContain(`Run on a fresh queue (${UP})`);
    expect(text).not.toContain("<url>");
  });

  it("the URL in the commands quoted for the shell: a socket's `?db=` is a glob zsh refuses unquoted", () => {
    const text = queueInUseText({ queue: "q7", url: "/run/r.sock?db=2", found: left, upDrills: [], drillCmd: "drill", upOnAnotherQueue: UP });
    expect(text).toContain("drill --redis '/run/r.sock?db=2' report --queue q7 --format md");
    expect(text).toContain("redis-cli -u '/run/r.sock?db=2' DEL q7 q7_drain, and each key redis-cli -u '/run/r.sock?db=2' --scan");
  });

  it("an earlier run this state dir knows: named as whose the keys are, with its export", () => {
    const text = queueInUseText({ queue: "q7", url: URL, found: left, upDrills: [], earlierRuns: ["drill smoke's run smoke-1 (exported to /s/smoke/final-1.jsonl)"], drillCmd: "drill", upOnAnotherQueue: UP });
    expect(text).toMatch(/^queue q7 on \S+ already holds keys \(those of drill smoke's run smoke-1 \(exported to \/s\/smoke\/final-1\.jsonl\): rollback exports them and leaves them\): q7 \(list, 0\)/);
    expect(text).toContain(`redis-cli -u ${URL} DEL q7 q7_drain`);
  });

  it("a drill of this state dir up on it: named, with its rollback, and no DEL advice", () => {
    const text = queueInUseText({ queue: "q7", url: URL, found: live, upDrills: ["smoke"], drillCmd: "drill --state-dir /tmp/s", upOnAnotherQueue: UP });
    expect(text).toMatch(/^drill smoke is up on queue q7 on redis:\/\/127\.0\.0\.1:7410 \(live heartbeats: gate vm-20423; worker smokew\); the queue's keys: /);
    expect(text).toContain("Do not delete them while it runs.");
    expect(text).toMatch(/or first: drill --state-dir \/tmp\/s rollback --name smoke$/);
    expect(text).not.toMatch(/DEL|redis-cli/);
  });

  it("live heartbeats with no drill of this state dir on it: in use now, by whom it may be, and no DEL advice", () => {
    const text = queueInUseText({ queue: "q7", url: URL, found: live, upDrills: [], drillCmd: "drill", upOnAnotherQueue: UP });
    expect(text).toMatch(/^queue q7 on redis:\/\/127\.0\.0\.1:7410 is in use now \(live heartbeats: gate vm-20423; worker smokew\), by a drill of another --state-dir or a gate or worker started by hand; /);
    expect(text).not.toMatch(/DEL|redis-cli/);
  });

  it("two drills up on it: both rollbacks", () => {
    const text = queueInUseText({ queue: "q7", url: URL, found: left, upDrills: ["a", "b"], drillCmd: "drill", upOnAnotherQueue: UP });
    expect(text).toMatch(/^drill a, b are up on queue q7 on \S+; the queue's keys: /);
    expect(text).toMatch(/drill rollback --name a, then drill rollback --name b$/);
  });
});

// QA: `up --duration 12s --file-dir /srv/scratch` refused on a queue in use suggested a rerun without either:
// pasted, it ran the file's 40 s and wrote its files to /var/tmp.
describe("the drill up that up prints to run again is the drill typed", () => {
  const typed = { stateDir: "/tmp/s", sysfs: "/sys", procfs: "/proc", drillFile: "/d/smoke.yaml", cgroupName: "w1", parent: "self" };

  it("carries --file-dir and every override given, in the order of up's flags", () => {
    const flags = { detach: true, name: "w1", queue: "jobs", fileDir: "/srv/scratch", duration: "12s", memoryMax: "96M", psiLimit: "5", psiRateLimit: "2.5", slackLimit: "2s", packedTokenLimit: "16000" };
    expect(upCommand({ ...typed, fileDir: "/srv/scratch", overrides: overrideWords(flags) }, URL, "<another name>")).toBe(
      `drill --state-dir /tmp/s --redis ${URL} up --drill /d/smoke.yaml --name w1 --parent self --file-dir /srv/scratch --duration 12s --memory-max 96M --psi-limit 5 --psi-rate-limit 2.5 --slack-limit 2s --packed-token-limit 16000 --queue <another name>`,
    );
  });

  it("leaves out the default --file-dir and the overrides not given", () => {
    const flags = { detach: false, name: "w1", queue: "jobs", fileDir: "/var/tmp" };
    expect(upCommand({ ...typed, fileDir: "/var/tmp", overrides: overrideWords(flags) }, undefined, "q2")).toBe("drill --state-dir /tmp/s up --drill /d/smoke.yaml --name w1 --parent self --queue q2");
  });

  it("quotes a value the shell would split", () => {
    expect(upCommand({ ...typed, fileDir: "/srv/my scratch", overrides: [] }, undefined, "q2")).toContain("--file-dir '/srv/my scratch' --queue q2");
  });
});
