import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";

/**
 * The least host `drill watch --procfs <root>/proc --sysfs <root>/sys` samples:
 * host PSI (`psiMemory`, /proc/pressure/memory's text), vmstat, stat, and a v2
 * root cgroup. For the files that run watch as an operator would, not for its figures.
 */
export function writeWatchTree(root: string, psiMemory: string): void {
  const write = (file: string, text: string) => {
    mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
    writeFileSync(path.join(root, file), text);
  };
  write("proc/pressure/memory", psiMemory);
  write("proc/vmstat", "nr_free_pages 1\npswpin 0\npswpout 0\nworkingset_refault_file 0\n");
  write("proc/stat", "cpu  1 0 1 100 0 0 0 0 0 0\nintr 1\n");
  write("proc/self/cgroup", "0::/\n");
  write("sys/fs/cgroup/cgroup.controllers", "memory\n");
  write("sys/fs/cgroup/cgroup.procs", "1\n");
}
