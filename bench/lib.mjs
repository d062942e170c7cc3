// What every benchmark here shares: flags, the repo's paths, a free loopback
// port (never 6379, the host's Redis), per-thread CPU, median [min-max].
import { existsSync, readdirSync, readFileSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const drill = path.join(repo, "bin", "drill.js");

/** `--name value` from argv, else the fallback. */
export function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

export function requireBuilt() {
  if (!existsSync(path.join(repo, "dist", "bundle", "main.js"))) throw new Error("bench: dist/bundle/main.js missing: run npm run build (or npm run bench)");
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => (port === 6379 ? freePort().then(resolve, reject) : resolve(port)));
    });
  });
}

/** ns of CPU used so far by every live thread of `pid` (/proc/<pid>/task/*\/schedstat). */
export function threadCpuNs(pid) {
  let sum = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      sum += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // the thread exited between readdir and read
    }
  }
  return sum;
}

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

export const stats = (xs) => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs) });
export const fixed = (x, digits) => (Number.isFinite(x) ? x.toFixed(digits) : "n/a");
/** "median [min–max]" */
export const range = (s, digits) => `${fixed(s.median, digits)} [${fixed(s.min, digits)}–${fixed(s.max, digits)}]`;
