import { describe, expect, it } from "vitest";
import { reachesEmbeddedRedis } from "../../src/drill/embeddedRedis.js";

describe("reachesEmbeddedRedis: does --redis name the drill's embedded server (127.0.0.1, its port)?", () => {
  const embedded = { port: 41234 };
  it.each([
    ["redis://127.0.0.1:41234", true],
    ["redis://localhost:41234", true],
    ["redis://127.0.0.1:41234/2", true],
    ["redis://:secret@127.0.0.1:41234", true],
    ["redis://127.0.0.1:41235", false],
    ["redis://10.0.0.5:41234", false],
    ["redis://127.0.0.1", false],
    ["not a url", false],
  ])("%s → %s", (url, expected) => {
    expect(reachesEmbeddedRedis(url, embedded)).toBe(expected);
  });
  it("a URL without a port is 6379", () => {
    expect(reachesEmbeddedRedis("redis://127.0.0.1", { port: 6379 })).toBe(true);
  });
});
