/**
 * One weights pass serves every job waiting when it starts, as a batched
 * forward step does on a real inference server: a job asking while a pass is
 * running rides the next one. So 8 jobs in flight cost one pass per step, not
 * 8, and a pass that slows down under reclaim slows every job at once.
 */
export interface PassRunner {
  pass(): Promise<number>;
}

export interface BatchStep {
  /** The pass's duration in µs, as the page toucher measured it. */
  us: number;
  /** How many requests this pass served. */
  batch: number;
}

interface Waiter {
  resolve: (step: BatchStep) => void;
  reject: (err: Error) => void;
}

export class PassBatcher {
  private running = false;
  private waiting: Waiter[] = [];
  /** Passes run and their summed µs, for the worker's summary. */
  passes = 0;
  passUsTotal = 0;

  constructor(private readonly runner: PassRunner) {}

  /** Resolves when a pass that started after this call has finished. */
  step(): Promise<BatchStep> {
    return new Promise<BatchStep>((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      if (!this.running) this.runNext();
    });
  }

  private runNext(): void {
    const batch = this.waiting.splice(0);
    if (batch.length === 0) {
      this.running = false;
      return;
    }
    this.running = true;
    this.runner.pass().then(
      (us) => {
        this.passes++;
        this.passUsTotal += us;
        for (const waiter of batch) waiter.resolve({ us, batch: batch.length });
        this.runNext();
      },
      (err: unknown) => {
        const error = err instanceof Error ? err : new Error(String(err));
        for (const waiter of batch) waiter.reject(error);
        this.runNext();
      },
    );
  }
}
