import { UsageError } from "../errors.js";

export const DEFAULT_CGROUP_NAME = "infer";

// Controller prefixes whose `<controller>.<file>` names are interface files in
// one version or the other: a cgroup named `memory.max` cannot even be made on
// v2, and on v1 would shadow nothing but confuse every reader of the tree.
const CONTROLLER_PREFIXES = [
  "cgroup",
  "memory",
  "memsw",
  "cpu",
  "cpuacct",
  "cpuset",
  "io",
  "blkio",
  "pids",
  "hugetlb",
  "rdma",
  "misc",
  "devices",
  "freezer",
  "net_cls",
  "net_prio",
  "perf_event",
  "irq", // irq.pressure (PSI, kernel >= 6.1)
];
const V1_CORE_FILES = new Set(["tasks", "notify_on_release", "release_agent"]);
/** NAME_MAX of the cgroup filesystems: enough for a --parent component. */
const NAME_MAX = 255;
/**
 * A --name also becomes longer file names, and each must fit NAME_MAX: the
 * hybrid twin `drill-<name>-<hash10>` (+17), the marker's temp file
 * `<name>-<hash10>.json.<pid>.tmp` and, longest, a hog record's
 * `<name>-<hash10>-<hex8>.json.<pid>.tmp` (+37 with a 7-digit pid).
 */
const MAX_NAME_BYTES = 200;

/** Why `name` cannot be a drill cgroup's --name, or null when it can. */
export function cgroupNameProblem(name: string): string | null {
  const problem = componentProblem(name, MAX_NAME_BYTES);
  // Not the kernel's 255: say why, or 201-255 bytes reads as a bug (QA).
  return problem?.startsWith("is longer than") ? `${problem} (drill names files after it, and each must fit the kernel's 255-byte limit)` : problem;
}

/** A name as an error shows it: JSON's escapes, and DEL too (JSON.stringify prints it raw, and the name looks valid: QA). */
export function shownName(name: string): string {
  return JSON.stringify(name).replaceAll("\u007f", "\\u007f");
}

/** Why `name` cannot be one path component of a cgroup, or null when it can. */
function componentProblem(name: string, maxBytes: number): string | null {
  if (name === "") return "is empty";
  if (Buffer.byteLength(name, "utf8") > maxBytes) return `is longer than ${maxBytes} bytes`;
  // eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
  if (/[\u0000-\u001f\u007f]/.test(name)) return "contains a control character (newline, NUL, ...)";
  if (name.includes("/")) return 'contains "/" (one cgroup name, not a path; use --parent for nesting)';
  if (name === "." || name === "..") return "is a relative path component";
  if (name.startsWith(".")) return 'starts with "." (hidden, and ".." tricks)';
  if (V1_CORE_FILES.has(name)) return "is a cgroup interface file name";
  const prefix = name.split(".")[0]!;
  if (name.includes(".") && CONTROLLER_PREFIXES.includes(prefix)) return `looks like a ${prefix} interface file (${prefix}.*)`;
  return null;
}

/** --name, checked before anything is created (RELIABILITY case 1). */
export function validateCgroupName(name: string, flag = "--name"): string {
  const problem = cgroupNameProblem(name);
  if (problem) throw new UsageError(`${flag}: cgroup name ${shownName(name)} ${problem}`);
  return name;
}

/** A parent cgroup: `self`, or a path from the hierarchy's root (`/`, `/a/b`, `a/b`). */
export type ParentSpec = { kind: "self" } | { kind: "path"; path: string };

/** --parent: `self`, or a path whose every component passes the name rules; normalised to `/a/b`. */
export function validateParent(raw: string | undefined, flag = "--parent"): ParentSpec {
  if (raw === undefined || raw === "/") return { kind: "path", path: "/" };
  if (raw === "self") return { kind: "self" };
  if (raw === "") throw new UsageError(`${flag}: is empty (use "/", a path such as /drills, or self)`);
  const components = raw.split("/").filter((part, i, all) => !(part === "" && (i === 0 || i === all.length - 1)));
  for (const component of components) {
    // Nothing is derived from a parent's name: only the directory limit applies.
    const problem = componentProblem(component, NAME_MAX);
    if (problem) throw new UsageError(`${flag}: component ${shownName(component)} of ${shownName(raw)} ${problem}`);
  }
  return { kind: "path", path: `/${components.join("/")}` };
}
