/**
 * DESIGN: "Detached children exit by themselves at the drill's duration plus
 * 5 minutes." One grace for every process drill leaves running (gate, worker,
 * watch, the page toucher, the embedded redis-server), so a forgotten drill
 * cleans itself up even when nobody runs `drill rollback`.
 */
export const SELF_EXIT_GRACE_MS = 5 * 60_000;
