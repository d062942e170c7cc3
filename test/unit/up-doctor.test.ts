import { describe, expect, it } from "vitest";
import type { Check } from "../../src/doctor/checks.js";
import { doctorOutcome } from "../../src/drill/up.js";

const check = (name: string, status: Check["status"], detail: string): Check => ({ name, status, value: null, detail });

// QA: up kept only the fail rows; an operator who never ran doctor never read its warnings.
describe("doctorOutcome: doctor's checks as up says them", () => {
  it("a line for each warning, in doctor's words and order; no refusal without a fail", () => {
    const checks = [
      check("root", "pass", "running as root"),
      check("host PSI", "warn", "/proc/pressure/memory: some avg10 is already ≥ 1.00 before the drill"),
      check("cgroup.kill", "warn", "no cgroup.kill (kernel < 5.14): rollback freezes the cgroup"),
    ];
    expect(doctorOutcome(checks)).toEqual({
      warnings: [
        "doctor: warning: host PSI: /proc/pressure/memory: some avg10 is already ≥ 1.00 before the drill",
        "doctor: warning: cgroup.kill: no cgroup.kill (kernel < 5.14): rollback freezes the cgroup",
      ],
      refusal: null,
    });
  });

  it("a fail refuses, naming every fail row; the warnings are said too", () => {
    const checks = [
      check("root", "fail", "cgroup files need root"),
      check("cgroup PSI", "warn", "no per-cgroup memory.pressure"),
      check("hog file system", "fail", "tmpfs pages are shmem"),
    ];
    expect(doctorOutcome(checks)).toEqual({
      warnings: ["doctor: warning: cgroup PSI: no per-cgroup memory.pressure"],
      refusal: "doctor refused: root: cgroup files need root; hog file system: tmpfs pages are shmem",
    });
  });

  it("doctor's value column when the detail does not say it: the figure, not only the problem", () => {
    const checks: Check[] = [
      { name: "host PSI", status: "warn", value: 3, detail: "/proc/pressure/memory: some avg10 is already ≥ 1.00 before the drill" },
      { name: "redis maxmemory-policy", status: "warn", value: "allkeys-lru", detail: "anything but noeviction can evict queued jobs" },
      { name: "cgroup PSI", status: "warn", value: "/sys/fs/cgroup/x/memory.pressure", detail: "/sys/fs/cgroup/x/memory.pressure: absent" },
      { name: "hog file system", status: "fail", value: "/dev/shm (tmpfs)", detail: "tmpfs pages are shmem" },
    ];
    expect(doctorOutcome(checks)).toEqual({
      warnings: [
        "doctor: warning: host PSI: /proc/pressure/memory: some avg10 is already ≥ 1.00 before the drill (host PSI = 3)",
        "doctor: warning: redis maxmemory-policy: anything but noeviction can evict queued jobs (redis maxmemory-policy = allkeys-lru)",
        "doctor: warning: cgroup PSI: /sys/fs/cgroup/x/memory.pressure: absent",
      ],
      refusal: "doctor refused: hog file system: tmpfs pages are shmem (hog file system = /dev/shm (tmpfs))",
    });
  });

  it("all pass: nothing to say", () => {
    expect(doctorOutcome([check("root", "pass", "running as root")])).toEqual({ warnings: [], refusal: null });
  });
});
