/**
 * A drill file for tests: the smoke drill's shape at test sizes (a 16M
 * worker, a 96M cgroup, a few seconds). `phases` are [at, step] pairs, the
 * step written as drills/*.yaml write it, e.g. ["0s", pack(3)].
 */
export function tinyDrill(
  name: string,
  options: { duration?: string; memoryMax?: string; gate?: string; phases: [string, string][] },
): string {
  const { duration = "6s", memoryMax = "96M", gate = "{ psi_rate_limit: 5, interval: 200ms }", phases } = options;
  return `
name: ${name}
duration: ${duration}
cgroup: { memory_max: ${memoryMax}, swap_max: 0 }
worker: { weights: 16M, kv_bytes_per_token: 64, decode_tokens_per_s: 200 }
gate: ${gate}
phases:
${phases.map(([at, step]) => `  - at: ${at}\n    ${step}\n`).join("")}`;
}

/** A pack step of `jobs` small jobs (8 completion tokens each). */
export const pack = (jobs: number, promptTokens = 1000, extra = ""): string =>
  `pack: { jobs: ${jobs}, prompt_tokens: ${promptTokens}, completion_tokens: 8${extra} }`;
