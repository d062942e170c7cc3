import { UsageError } from "./errors.js";
import { HostRoots } from "./host/kernelFile.js";

/** Global flags of DESIGN.md, resolved once (flag, then env, then default). */
export interface GlobalOptions {
  redisUrl: string | undefined;
  procfs: string;
  sysfs: string;
  stateDir: string;
  json: boolean;
  color: boolean;
}

export function resolveGlobalOptions(raw: {
  redis?: string;
  procfs?: string;
  sysfs?: string;
  stateDir?: string;
  json?: boolean;
  color?: boolean;
}, env: NodeJS.ProcessEnv = process.env): GlobalOptions {
  const redisUrl = raw.redis ?? env.DRILL_REDIS_URL ?? undefined;
  if (redisUrl !== undefined) checkRedisUrl(redisUrl, raw.redis !== undefined ? "--redis" : "DRILL_REDIS_URL");
  return {
    redisUrl,
    procfs: raw.procfs ?? env.DRILL_PROCFS ?? "/proc",
    sysfs: raw.sysfs ?? env.DRILL_SYSFS ?? "/sys",
    stateDir: raw.stateDir ?? env.DRILL_STATE_DIR ?? "/var/lib/drill",
    json: raw.json ?? false,
    color: raw.color !== false && env.NO_COLOR === undefined && env.FORCE_COLOR !== "0",
  };
}

/** ioredis takes redis:// and rediss:// URLs (or a unix socket path); anything else would crash deep inside it. */
function checkRedisUrl(url: string, source: string): void {
  if (url.startsWith("/")) return;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`${source}: not a URL: "${url}" (e.g. redis://127.0.0.1:6379)`);
  }
  if (parsed.protocol !== "redis:" && parsed.protocol !== "rediss:") {
    throw new UsageError(`${source}: "${parsed.protocol}" is not redis: or rediss: (e.g. redis://127.0.0.1:6379)`);
  }
}

export function hostRoots(options: Pick<GlobalOptions, "procfs" | "sysfs">): HostRoots {
  return new HostRoots(options.procfs, options.sysfs);
}

/**
 * Each command lives in src/commands/<name>.ts and exports a factory taking
 * `globals` (resolved lazily, after parsing) and returning its Command.
 * That file holds what --help needs (options, defaults, flag types); its
 * action imports src/commands/<name>.run.ts, the implementation, only when
 * the command runs, so start-up loads no Redis, YAML or zod.
 */
export type GlobalsFn = () => GlobalOptions;
