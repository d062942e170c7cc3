import { describe, expect, it } from "vitest";
import { parsePsi, stallRatePct } from "../../src/host/psi.js";

const F = "/proc/pressure/memory";

describe("parsePsi", () => {
  it("parses real kernel lines (some and full)", () => {
    const r = parsePsi(
      "some avg10=0.22 avg60=0.17 avg300=1.11 total=58761459\nfull avg10=0.00 avg60=0.13 avg300=0.96 total=8708606\n",
      F,
    );
    expect(r).toEqual({
      ok: true,
      value: {
        some: { avg10: 0.22, avg60: 0.17, avg300: 1.11, total: 58761459 },
        full: { avg10: 0, avg60: 0.13, avg300: 0.96, total: 8708606 },
      },
    });
  });

  it("accepts a some line without full (older kernels, cpu): decide on some", () => {
    const r = parsePsi("some avg10=12.40 avg60=3.00 avg300=1.00 total=99\n", F);
    expect(r.ok && r.value.full).toBeNull();
    expect(r.ok && r.value.some.avg10).toBe(12.4);
  });

  it("tolerates extra fields and future line kinds", () => {
    const r = parsePsi("some avg10=1.00 avg60=2.00 avg300=3.00 total=4 avg900=5.00\nwhatever x=1\n", F);
    expect(r.ok).toBe(true);
  });

  it.each([
    ["empty", "", /empty/],
    ["whitespace", "  \n\n", /empty/],
    ["garbage", "garbage\n", /no some line|unparseable/],
    ["binary", "\u0000\u0001\u0002", /unparseable/],
    ["avg10=0.22=55", "some avg10=0.22=55 avg60=0.17 avg300=1.11 total=5\n", /bad field/],
    ["duplicated field", "some avg10=0.22 avg10=0.30 avg60=0.17 avg300=1.11 total=5\n", /duplicated field avg10/],
    ["duplicated some line", "some avg10=1 avg60=1 avg300=1 total=1\nsome avg10=1 avg60=1 avg300=1 total=1\n", /duplicated some/],
    ["missing total", "some avg10=0.22 avg60=0.17 avg300=1.11\n", /missing total/],
    ["negative", "some avg10=-1 avg60=0.17 avg300=1.11 total=5\n", /bad number/],
    ["NaN", "some avg10=NaN avg60=0.17 avg300=1.11 total=5\n", /bad number/],
    // QA: avg10=999.00 was taken (psi_mem_some_avg10 999): an avg is a percentage
    ["avg10 above 100", "some avg10=999.00 avg60=0.17 avg300=1.11 total=5\n", /avg10=999.00 above 100% in some line/],
    ["avg300 above 100", "some avg10=0.22 avg60=0.17 avg300=100.01 total=5\n", /avg300=100.01 above 100% in some line/],
    ["full avg60 above 100", "some avg10=1 avg60=1 avg300=1 total=1\nfull avg10=0.00 avg60=250.00 avg300=0.00 total=1\n", /avg60=250.00 above 100% in full line/],
    ["empty value", "some avg10= avg60=0.17 avg300=1.11 total=5\n", /bad field/],
    ["only full", "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", /no some line/],
    ["bad full line", "some avg10=1 avg60=1 avg300=1 total=1\nfull avg10=x avg60=1 avg300=1 total=1\n", /bad number/],
  ])("rejects %s with the file named", (_name, text, reason) => {
    const r = parsePsi(text, F);
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.file).toBe(F);
      expect(r.reason).toMatch(reason);
    }
  });
});

describe("stallRatePct", () => {
  it("is the share of wall time stalled, from total deltas in µs", () => {
    expect(stallRatePct(1_000_000, 1_100_000, 1000)).toBeCloseTo(10);
    expect(stallRatePct(0, 0, 1000)).toBe(0);
  });
  it("is null across a counter reset or a zero interval, never a fake 0", () => {
    expect(stallRatePct(500, 100, 1000)).toBeNull();
    expect(stallRatePct(0, 100, 0)).toBeNull();
  });
  it("is capped at 100 (several tasks stalled at once count once for `some`)", () => {
    expect(stallRatePct(0, 5_000_000, 1000)).toBe(100);
  });
});
